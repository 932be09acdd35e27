"""Dynamic encoding (000 §5.3): ``y = 0.7 · R_p x + 0.3 · R_{s·p} x`` with a learned scale ``s``.

* DYN-1: explicit, non-contiguous (and per-batch) positions are honoured: the output equals the
  float64 formula at those positions, token by token.
* DYN-2: ``s`` is a trainable parameter and receives the gradient ``∂L/∂s`` (checked against a
  central finite difference in float64).
* DYN-3: the mix is 0.7 : 0.3, and at ``s = 1`` the output equals plain RoPE at ``p``.

Derivation of what the mix keeps (observed by ROPE-3 and ROPE-4 on the ``dynamic`` encoder):
``‖0.7 R_a x + 0.3 R_b x‖² = (0.58 + 0.42 cos((a − b)θ))‖x‖²`` per pair, so the norm is kept
only where ``(1 − s)·p·θ_i ≡ 0 (mod 2π)``; and ``⟨y_m, y_n⟩`` expands into
``0.49⟨q, R_{n−m}k⟩ + 0.21⟨q, R_{sn−m}k⟩ + 0.21⟨q, R_{n−sm}k⟩ + 0.09⟨q, R_{s(n−m)}k⟩``,
whose cross terms depend on ``m`` and ``n`` separately unless ``s = 1``.
"""

import pytest
import torch
from hypothesis import example, given

from posenc.harness.catalogue.records import FINITE_DIFFERENCE
from specs import strategies as draws
from specs import support as s

MIX = (0.7, 0.3)


def dynamic_formula(record, x, positions, scale):
    geometry, head_dim = record.geometry, s.SPEC_CONFIG.head_dim
    return (MIX[0] * s.reference_rotation(x, positions, geometry, head_dim)
            + MIX[1] * s.reference_rotation(x, positions.double() * scale, geometry, head_dim))


@pytest.mark.claim("DYN-1", kinds=("rotary",))
@given(seed=draws.seeds, positions=draws.position_lists(5000, 8))
@example(seed=0, positions=[0, 7, 3, 3, 100, 101, 4999, 12])
def test_non_contiguous_positions_follow_the_formula(record, dtype, seed, positions):
    module = s.build(record, dtype)
    scale = float(module.dynamic_scale.detach())
    p = torch.tensor(positions).reshape(2, 4)
    x = s.randn(s.input_shape(record, 2, 4), seed, dtype)
    with torch.no_grad():
        y = module(x, p)
        singles = torch.cat([module(x[:, j : j + 1], p[:, j : j + 1]) for j in range(4)], dim=1)
    expected = dynamic_formula(record, x.double(), p, scale)
    bound = record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(p) * max(scale, 1.0))
    s.require_within(error=s.max_error(y, expected), bound=bound,
                     what="output at explicit positions differs from 0.7·R_p x + 0.3·R_{s·p} x")
    s.require_within(error=s.max_error(singles, y), bound=bound,
                     what="a token encoded alone at its position differs from the same token in the sequence")


@pytest.mark.claim("DYN-2", kinds=("rotary",))
@given(seed=draws.seeds)
@example(seed=0)
def test_scale_is_trainable_and_gets_the_right_gradient(record, seed):
    s.needs_float64(record)
    module = s.build(record, torch.float64)
    scale = module.dynamic_scale
    if not isinstance(scale, torch.nn.Parameter) or not scale.requires_grad:
        s.violated("the scale is not a trainable parameter")
    x = s.randn(s.input_shape(record, 1, 6), seed, torch.float64)
    g = s.randn(s.input_shape(record, 1, 6), seed + 1, torch.float64)
    positions = torch.tensor([0, 2, 3, 10, 11, 40])
    output = module(x, positions)
    if not output.requires_grad:
        s.violated("the output does not depend on the scale: no gradient can reach it")
    (output * g).sum().backward()
    if scale.grad is None or not bool(torch.isfinite(scale.grad).all()) or float(scale.grad.abs().sum()) == 0.0:
        s.violated("the scale received no gradient", grad=scale.grad)
    step = FINITE_DIFFERENCE.step
    with torch.no_grad():
        values = []
        for sign in (1, -1):
            scale.add_(sign * step)
            values.append(float((module(x, positions) * g).sum()))
            scale.sub_(sign * step)
    numeric = (values[0] - values[1]) / (2 * step)
    # Central difference: truncation ≤ step²/6 · |L‴|, |L‴| ≤ 0.3 · p_max³ · Σ|g x|; rounding ≤ 2 eps Σ|g x| / step.
    magnitude = float((g.abs() * x.abs()).sum()) * 2
    difference_error = (step**2 / 6 * MIX[1] * float(positions.max()) ** 3 * magnitude
                        + 2 * torch.finfo(torch.float64).eps * magnitude / step)
    s.require_within(error=abs(float(scale.grad.sum()) - numeric),
                     bound=record.tolerance(torch.float64).bound(abs(numeric)) + difference_error,
                     what="∂L/∂s differs from the central finite difference",
                     autograd=float(scale.grad.sum()), finite_difference=numeric)


@pytest.mark.claim("DYN-3", kinds=("rotary",))
@given(seed=draws.seeds)
@example(seed=0)
def test_mix_weights_and_scale_one_gives_the_base(record, dtype, seed):
    module = s.build(record, dtype)
    x = s.randn(s.input_shape(record, 2, 5), seed, dtype)
    positions = torch.tensor([1, 4, 9, 16, 900])
    with torch.no_grad():
        module.dynamic_scale.fill_(1.0)
        y = module(x, positions)
    base = s.reference_rotation(x.double(), positions[None], record.geometry, s.SPEC_CONFIG.head_dim)
    bound = record.tolerance(dtype).bound(float(base.abs().max()), s.max_angle(positions))
    s.require_within(error=s.max_error(y, base), bound=bound,
                     what="at s = 1 the output differs from plain RoPE")
    with torch.no_grad():
        module.dynamic_scale.fill_(0.0)  # s = 0: the second term is x itself
        y0 = module(x, positions)
    expected = MIX[0] * base + MIX[1] * x.double()
    s.require_within(error=s.max_error(y0, expected), bound=bound,
                     what="at s = 0 the output is not 0.7·R_p x + 0.3·x: the mix is not 0.7 : 0.3")
