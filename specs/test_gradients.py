"""Gradients (matrix row ``contract``): every encoder is differentiable, checked by
``torch.autograd.gradcheck`` in float64 against finite differences, with respect to its input
(and, for attention modules, through the projections), within the finite differences' own error or
the record's float64 tolerance, whichever is wider.

An encoder whose float64 output is only as exact as fp32 (it computes float64 input in float32,
declared by ``angle_dtype=torch.float32``) cannot meet finite differences at float64's step: a
rounding ``δ`` becomes ``δ / step`` in the difference quotient. Its check takes the step that
balances truncation and rounding, ``√δ``, and the error that step leaves, ``10·√δ``: an exact
gradient passes, a wrong one (``R_p`` for ``R_pᵀ``, a lost term) stays far outside."""

import math

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from posenc.harness.catalogue.records import FINITE_DIFFERENCE
from specs import support as s

TENSOR_KINDS = ("additive", "rotary", "attention")  # a bias takes positions, not x: test_alibi

SMALL = dict(d_model=16, n_heads=2)  # gradcheck cost grows with the number of inputs
#: A declared float64 error below this leaves finite differences at their own step exact enough.
EXACT_ENOUGH = 1e-9


def finite_difference(declared) -> tuple[float, float, float]:
    """(step, atol, rtol) of the gradient check for an encoder with this float64 tolerance."""
    if declared.rtol <= EXACT_ENOUGH:
        return (FINITE_DIFFERENCE.step, max(FINITE_DIFFERENCE.atol, declared.atol),
                max(FINITE_DIFFERENCE.rtol, declared.rtol))
    step = math.sqrt(max(declared.rtol, declared.atol))
    return step, 10 * step, 10 * step


@pytest.mark.claim("contract", kinds=TENSOR_KINDS)
def test_gradcheck_in_float64(record):
    s.needs_float64(record)
    small = dict(SMALL, d_model=s.supported_head_dim(record, SMALL["d_model"] // SMALL["n_heads"]) * SMALL["n_heads"])
    module = s.build(record, torch.float64, **small)
    x = s.randn(s.input_shape(record, 1, 3, s.config(**small)), seed=4, dtype=torch.float64).requires_grad_()
    # Attention modules get a contiguous run (the documents' attention takes a start offset only).
    positions = torch.arange(3, 6) if record.kind == "attention" else torch.tensor([0, 5, 2])
    step, atol, rtol = finite_difference(record.tolerance(torch.float64))  # the encoder's own float64 error
    try:
        ok = torch.autograd.gradcheck(lambda t: module(t, positions), (x,), eps=step, atol=atol, rtol=rtol,
                                      raise_exception=True)
    except GradcheckError as error:
        s.violated("autograd gradient differs from finite differences",
                   message=str(error).splitlines()[0])
    assert ok
