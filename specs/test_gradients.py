"""Gradients (matrix row ``contract``): every encoder is differentiable, checked by
``torch.autograd.gradcheck`` in float64 against finite differences, with respect to its input
(and, for attention modules, through the projections), within the finite differences' own error or
the record's float64 tolerance, whichever is wider."""

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from posenc.harness.records import FINITE_DIFFERENCE
from specs import support as s

TENSOR_KINDS = ("additive", "rotary", "attention")  # a bias takes positions, not x: test_alibi

SMALL = dict(d_model=16, n_heads=2)  # gradcheck cost grows with the number of inputs


@pytest.mark.claim("contract", kinds=TENSOR_KINDS)
def test_gradcheck_in_float64(record):
    s.needs_float64(record)
    small = dict(SMALL, d_model=s.supported_head_dim(record, SMALL["d_model"] // SMALL["n_heads"]) * SMALL["n_heads"])
    module = s.build(record, torch.float64, **small)
    x = s.randn(s.input_shape(record, 1, 3, s.config(**small)), seed=4, dtype=torch.float64).requires_grad_()
    # Attention modules get a contiguous run (the documents' attention takes a start offset only).
    positions = torch.arange(3, 6) if record.kind == "attention" else torch.tensor([0, 5, 2])
    declared = record.tolerance(torch.float64)  # an encoder's own float64 error widens the comparison
    try:
        ok = torch.autograd.gradcheck(lambda t: module(t, positions), (x,), eps=FINITE_DIFFERENCE.step,
                                      atol=max(FINITE_DIFFERENCE.atol, declared.atol),
                                      rtol=max(FINITE_DIFFERENCE.rtol, declared.rtol), raise_exception=True)
    except GradcheckError as error:
        s.violated("autograd gradient differs from finite differences",
                   message=str(error).splitlines()[0])
    assert ok
