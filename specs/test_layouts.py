"""ROPE-13 (004 §3.2): pair layouts differ by one fixed permutation.

With ``P_out`` the output order and ``P_in`` the input pairing of a layout (see
``specs.support.output_pair_order`` / ``input_pair_order``):

* ``f(x, m) = P_out · formula(P_in x, m)`` — concatenated has ``P_in = I``; half_split
  ``P_in = P_out⁻¹``-style pairing ``(i, i + d/2)``;
* the formula's own output is ``formula(x, m)``; the concatenated and half-split layouts are
  not equal to it element by element (declared refutations, aimed at that spec);
* when q and k share a layout, scores equal the formula's on ``P_in q, P_in k``;
* mixing layouts between q and k breaks ROPE-4.
"""

import pytest
import torch
from hypothesis import example, given

from posenc import ClaimViolation, RotaryEmbedding
from specs import strategies as draws
from specs import support as s
from specs.test_relative_offset import offset_logit_error


def _formula(record, x_heads, positions, side="q", length=None):
    geometry = type(record.geometry)(**{**record.geometry.__dict__, "layout": "interleaved"})
    return s.reference_rotation(x_heads, positions, geometry, s.SPEC_CONFIG.head_dim, side=side, length=length)


def _encode(record, dtype, seed, offset, batch=1, seq=5):
    """The encoder at explicit positions ``offset …``: the layout is judged, not the offset path (PATH-1)."""
    module = s.build(record, dtype)
    x = s.randn(s.input_shape(record, batch, seq), seed, dtype)
    offset = min(offset, s.position_cap(record, offset + seq) - seq)
    positions = torch.arange(offset, offset + seq)[None]
    with torch.no_grad():
        y = s.as_heads(module(x, positions)).to(torch.float64)
    return s.as_heads(x).to(torch.float64), y, positions


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=1)
def test_output_is_a_fixed_permutation_of_the_formula(record, dtype, seed, offset):
    x, y, positions = _encode(record, dtype, seed, offset)
    head_dim = s.SPEC_CONFIG.head_dim
    layout = record.geometry.layout
    expected = _formula(record, x[..., s.input_pair_order(record.geometry, head_dim)], positions)
    expected = expected[..., s.output_pair_order(record.geometry, head_dim)]
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()),
                                                       s.max_angle(positions, record.geometry)),
                     what=f"output is not P_out·formula(P_in·x) for the declared layout {layout!r}")


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=1)
def test_output_equals_formula_elementwise(record, dtype, seed, offset):
    """004 §3.2's claim taken literally: the output equals the formula's, coordinate by coordinate."""
    x, y, positions = _encode(record, dtype, seed, offset)
    expected = _formula(record, x, positions)
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()),
                                                       s.max_angle(positions, record.geometry)),
                     what="output differs from the formula's (x'_2i, x'_2i+1) coordinates")


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=draws.seeds, m=draws.position_lists(5000, 5), n=draws.position_lists(5000, 5))
@example(seed=0, m=[0, 3, 9, 100, 4000], n=[1, 1, 50, 60, 2])
@example(seed=1, m=[0, 10, 20, 30, 40], n=[4900, 4000, 20, 1, 0])  # far apart: xPos's k factor leaves fp16's range
def test_shared_layout_scores_match_the_formula(record, dtype, seed, m, n):
    module = s.build(record, dtype)
    q, k = s.randn(s.input_shape(record, 1, 5), seed, dtype), s.randn(s.input_shape(record, 1, 5), seed + 1, dtype)
    m, n = (torch.tensor(v).clamp(max=s.position_cap(record, 10**7)) for v in (m, n))
    scores, _ = s.logits(module, q, k, m, n)
    pin = s.input_pair_order(record.geometry, s.SPEC_CONFIG.head_dim)
    length = s.call_length(torch.cat((m, n)))  # q and k go through the encoder in one call
    fq = _formula(record, s.as_heads(q).double()[..., pin], m[None], length=length)
    fk = _formula(record, s.as_heads(k).double()[..., pin], n[None], side="k", length=length)
    expected = (fq * fk).sum(-1)
    scale = s.dot_scale(fq, fk)
    s.require_within(error=s.max_error(scores, expected),
                     bound=record.tolerance(dtype).bound(scale, s.max_angle(torch.cat((m, n)), record.geometry)),
                     what="⟨f(q, m), f(k, n)⟩ differs from the formula's scores on P_in q, P_in k")


class _MixedLayouts(torch.nn.Module):
    """q through one layout, k through another: what a half-converted checkpoint does."""

    def __init__(self, head_dim):
        super().__init__()
        self.q_rope = RotaryEmbedding(head_dim, layout="interleaved")
        self.k_rope = RotaryEmbedding(head_dim, layout="half_split")
        self.calls = 0

    def forward(self, x, positions=None, offset=0):
        self.calls += 1
        rope = self.q_rope if self.calls % 2 else self.k_rope
        return rope(x, positions, offset=offset)


@pytest.mark.claim("ROPE-13")
def test_mixing_layouts_between_q_and_k_breaks_relative_offset():
    """The ROPE-4 check rejects q in the interleaved layout with k in the half-split layout."""
    from posenc import get

    record = get("rope_interleaved")
    module = _MixedLayouts(s.SPEC_CONFIG.head_dim)
    m, n = torch.tensor([0, 1, 2, 3, 5, 8]), torch.tensor([0, 0, 1, 7, 3, 2])
    error, scale, _ = offset_logit_error(record, module, torch.float32, "cpu", 0, m, n, 100)
    bound = record.tolerance(torch.float32).bound(scale, 200.0)
    with s.judging(record, "ROPE-4"), pytest.raises(ClaimViolation, match="ROPE-4"):
        s.require_within(error=error, bound=bound, what="mixed layouts")
    assert error > 100 * bound, (error, bound)
