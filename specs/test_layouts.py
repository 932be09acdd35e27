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
from specs.strategies import offsets, position_lists, seeds
from specs.support import (
    SPEC_CONFIG,
    as_heads,
    build,
    input_pair_order,
    input_shape,
    max_angle,
    max_error,
    output_pair_order,
    randn,
    reference_rotation,
    reproducer,
    require_within,
)
from specs.test_relative_offset import shifted_logit_error



def _formula(record, x_heads, positions):
    geometry = type(record.geometry)(**{**record.geometry.__dict__, "layout": "interleaved"})
    return reference_rotation(x_heads, positions, geometry, SPEC_CONFIG.head_dim)


def _encode(record, dtype, seed, offset, batch=1, seq=5):
    module = build(record, dtype)
    x = randn(input_shape(record, batch, seq), seed, dtype)
    with torch.no_grad():
        y = as_heads(module(x, None, offset=offset)).to(torch.float64)
    positions = torch.arange(offset, offset + seq)[None]
    return as_heads(x).to(torch.float64), y, positions


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=seeds, offset=offsets)
@example(seed=0, offset=1)
def test_output_is_a_fixed_permutation_of_the_formula(record, dtype, seed, offset):
    x, y, positions = _encode(record, dtype, seed, offset)
    head_dim = SPEC_CONFIG.head_dim
    layout = record.geometry.layout
    expected = _formula(record, x[..., input_pair_order(record.geometry, head_dim)], positions)
    expected = expected[..., output_pair_order(record.geometry, head_dim)]
    require_within(record, "ROPE-13", error=max_error(y, expected),
                   bound=record.tolerance(dtype).bound(float(expected.abs().max()),
                                                       max_angle(positions, record.geometry)),
                   what=f"output is not P_out·formula(P_in·x) for the declared layout {layout!r}",
                   repro=reproducer("test_output_is_a_fixed_permutation_of_the_formula", record, dtype=dtype,
                                    seed=seed, offset=offset))


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=seeds, offset=offsets)
@example(seed=0, offset=1)
def test_output_equals_formula_elementwise(record, dtype, seed, offset):
    """004 §3.2's claim taken literally: the output equals the formula's, coordinate by coordinate."""
    x, y, positions = _encode(record, dtype, seed, offset)
    expected = _formula(record, x, positions)
    require_within(record, "ROPE-13", error=max_error(y, expected),
                   bound=record.tolerance(dtype).bound(float(expected.abs().max()),
                                                       max_angle(positions, record.geometry)),
                   what="output differs from the formula's (x'_2i, x'_2i+1) coordinates",
                   repro=reproducer("test_output_equals_formula_elementwise", record, dtype=dtype, seed=seed,
                                    offset=offset))


@pytest.mark.claim("ROPE-13", kinds=("rotary",))
@given(seed=seeds, m=position_lists(5000, 5), n=position_lists(5000, 5))
@example(seed=0, m=[0, 3, 9, 100, 4000], n=[1, 1, 50, 60, 2])
def test_shared_layout_scores_match_the_formula(record, dtype, seed, m, n):
    module = build(record, dtype)
    q, k = randn(input_shape(record, 1, 5), seed, dtype), randn(input_shape(record, 1, 5), seed + 1, dtype)
    m, n = torch.tensor(m), torch.tensor(n)
    with torch.no_grad():
        scores = (as_heads(module(q, m)).double() * as_heads(module(k, n)).double()).sum(-1)
    pin = input_pair_order(record.geometry, SPEC_CONFIG.head_dim)
    fq = _formula(record, as_heads(q).double()[..., pin], m[None])
    fk = _formula(record, as_heads(k).double()[..., pin], n[None])
    expected = (fq * fk).sum(-1)
    scale = float((as_heads(q).double().norm(dim=-1) * as_heads(k).double().norm(dim=-1)).max())
    require_within(record, "ROPE-13", error=max_error(scores, expected),
                   bound=record.tolerance(dtype).bound(scale, max_angle(torch.cat((m, n)), record.geometry)),
                   what="⟨f(q, m), f(k, n)⟩ differs from the formula's scores on P_in q, P_in k",
                   repro=reproducer("test_shared_layout_scores_match_the_formula", record, dtype=dtype,
                                    seed=seed, m=m.tolist(), n=n.tolist()))


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
    module = _MixedLayouts(SPEC_CONFIG.head_dim)
    q, k = randn(input_shape(record, 1, 6), 0), randn(input_shape(record, 1, 6), 1)
    m, n = torch.tensor([0, 1, 2, 3, 5, 8]), torch.tensor([0, 0, 1, 7, 3, 2])
    error, scale = shifted_logit_error(record, module, q, k, m, n, 100)
    bound = record.tolerance(torch.float32).bound(scale, 200.0)
    with pytest.raises(ClaimViolation, match="ROPE-4"):
        require_within(record, "ROPE-4", error=error, bound=bound, what="mixed layouts", repro="")
    assert error > 100 * bound, (error, bound)
