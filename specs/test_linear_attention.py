"""LIN-2 (000 §5.2): linear attention with RoPE, checked against an explicit O(n²) float64 form.

For ``order = "map_then_rotate"`` (RoFormer eq. 19), with ``φ(t) = elu(W t + b) + 1``::

    out_m = Σ_n ⟨R_m φ(q_m), R_n φ(k_n)⟩ v_n / Σ_n ⟨φ(q_m), φ(k_n)⟩

For ``order = "rotate_then_map"`` (the published order), with ``k̃_n = softmax_n(W R_n k_n + b)``::

    out_m = Σ_n ⟨W R_m q_m + b, k̃_n⟩ v_n

The pair-by-pair sums are formed explicitly (an n × n matrix), so an O(n) implementation that
drops the feature map, the normaliser or a rotation cannot agree. The formula needs the feature
map's weights, so this spec runs on this project's :class:`LinearAttentionRoPE` only; every linear
attention, a third party's included, is judged through its public call by the shift-invariance
and position-awareness spec of LIN-2 in ``test_translation_invariance``.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given

from posenc.encoders.attention import LinearAttentionRoPE
from specs import strategies as draws
from specs import support as s


def quadratic_reference(module, geometry, q, k, v, positions):
    w = module.feature_map.weight.detach().double()
    b = module.feature_map.bias.detach().double()
    q, k, v = q.double(), k.double(), v.double()
    if module.order == "map_then_rotate":
        phi_q, phi_k = F.elu(q @ w.T + b) + 1, F.elu(k @ w.T + b) + 1
        rq = s.reference_rotation(phi_q, positions, geometry, phi_q.shape[-1])
        rk = s.reference_rotation(phi_k, positions, geometry, phi_k.shape[-1])
        weights = torch.einsum("bmhf,bnhf->bhmn", rq, rk)
        normaliser = torch.einsum("bmhf,bnhf->bhmn", phi_q, phi_k).sum(-1, keepdim=True)
        weights = weights / normaliser
    else:
        rq = s.reference_rotation(q, positions, geometry, q.shape[-1]) @ w.T + b
        rk = (s.reference_rotation(k, positions, geometry, k.shape[-1]) @ w.T + b).softmax(dim=1)
        weights = torch.einsum("bmhf,bnhf->bhmn", rq, rk)
    return torch.einsum("bhmn,bnhe->bmhe", weights, v)


def _is_this_projects_linear_attention(record) -> bool:
    return isinstance(record.make(d_model=16, n_heads=2), LinearAttentionRoPE)


@pytest.mark.claim("LIN-2", kinds=("attention",), requires=_is_this_projects_linear_attention)
@given(seed=draws.seeds, offset=draws.offsets, seq=draws.seq_lens)
@example(seed=0, offset=5, seq=7)
def test_linear_form_equals_the_quadratic_formula(record, seed, offset, seq):
    s.needs_float64(record)
    module = s.build(record, torch.float64)
    shape = (2, seq, s.SPEC_CONFIG.n_heads, s.SPEC_CONFIG.head_dim)
    q, k, v = (s.randn(shape, seed + i, torch.float64) for i in range(3))
    positions = torch.arange(offset, offset + seq)[None]
    with torch.no_grad():
        out = module.attend(q, k, v, None, offset=offset)
    expected = quadratic_reference(module, record.geometry, q, k, v, positions)
    s.require_within(error=s.max_error(out, expected),
                     bound=record.tolerance(torch.float64).bound(float(expected.abs().max()) * seq,
                                                               s.max_angle(offset + seq, record.geometry)),
                     what="the O(n) form differs from the explicit O(n²) formula")
