"""ROPE-4 (004 §6.2, 000 §3.3): ``⟨R_m q, R_n k⟩`` depends only on ``m − n``.

Observed as: for any positions ``m_j, n_j`` and any shift ``t``,
``⟨f(q_j, m_j), f(k_j, n_j)⟩ = ⟨f(q_j, m_j + t), f(k_j, n_j + t)⟩`` per head.
The pinned examples put the unshifted pairs inside any small table and the
shifted pairs far outside it, where truncated or identity tables give themselves away.
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

PAIRS = 6


def logits(record, module, q, k, q_positions, k_positions) -> torch.Tensor:
    """Per-token, per-head ``⟨f(q_j, m_j), f(k_j, n_j)⟩`` in float64."""
    with torch.no_grad():
        fq = s.as_heads(module(q, q_positions)).to(torch.float64)
        fk = s.as_heads(module(k, k_positions)).to(torch.float64)
    return (fq * fk).sum(-1)


def shifted_logit_error(record, module, q, k, m, n, shift):
    """Largest change of the logits under a common shift, and the scale ``|q||k|`` it is measured against."""
    before = logits(record, module, q, k, m, n)
    after = logits(record, module, q, k, m + shift, n + shift)
    scale = float((s.as_heads(q).double().norm(dim=-1) * s.as_heads(k).double().norm(dim=-1)).max())
    return float((after - before).abs().max()), scale


@pytest.mark.claim("ROPE-4", kinds=("rotary",))
@given(seed=draws.seeds, m=draws.position_lists(2048, PAIRS), n=draws.position_lists(2048, PAIRS), shift=draws.shifts)
@example(seed=0, m=[0, 1, 2, 3, 5, 8], n=[0, 0, 1, 7, 3, 2], shift=4096)
@example(seed=1, m=[3, 9, 17, 30, 40, 60], n=[1, 12, 16, 31, 2, 63], shift=70)
def test_logits_depend_only_on_offset(record, dtype, device, seed, m, n, shift):
    cap = s.position_cap(record, 10**7)
    m, n = (torch.tensor(v, device=device).clamp(max=cap // 2) for v in (m, n))
    shift = min(shift, cap - int(max(m.max(), n.max())))
    module = s.build(record, dtype, device)
    q = s.randn(s.input_shape(record, 1, PAIRS), seed, dtype, device)
    k = s.randn(s.input_shape(record, 1, PAIRS), seed + 1, dtype, device)
    error, scale = shifted_logit_error(record, module, q, k, m, n, shift)
    bound = record.tolerance(dtype).bound(scale, s.max_angle(torch.stack((m, n)) + shift, record.geometry))
    s.require_within(
        error=error, bound=bound,
        what=f"⟨f(q, m), f(k, n)⟩ changed when every position was shifted by {shift}",
    )
