"""ROPE-4 (004 §6.2, 000 §3.3): ``⟨R_m q, R_n k⟩`` depends only on ``m − n``.

Observed on the encoder itself, so that only this property is judged (not the layout or the
frequencies, which ROPE-1, ROPE-2 and ROPE-13 judge): q and k go through the encoder's q/k
protocol in one batch whose rows have different positions ``m_j, n_j`` (row ``b`` at
``m + b·stride``), and every row's logits must equal those of the same q and k encoded alone, at
``(m_j − c_j, n_j − c_j)`` with ``c_j = min(m_j, n_j)``: a function of the offset alone. Rows differ in their offsets
``m_j − n_j`` too, so a RoPE that takes every row's angles from row 0 gives other logits, as
does one that rotates k backwards. Invariance alone is passed by an encoder that ignores
positions, so the logits must also change when q moves 37 positions away from k. The pinned
examples put the batched positions far outside any small table, at strides that are no power of
two, and put pairs of one row on both sides of 4096 and of 10^4, where a table read modulo its
length wraps.
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

PAIRS = 6
ROWS = 3
MOVE = 37  # positions q moves away from k in the awareness check


def offset_logit_error(record, module, dtype, device, seed, m, n, stride):
    """Largest difference between the batched logits and each row's logits at its offsets alone."""
    q = s.randn(s.input_shape(record, ROWS, PAIRS), seed, dtype, device)
    k = s.randn(s.input_shape(record, ROWS, PAIRS), seed + 1, dtype, device)
    rows = torch.arange(ROWS, device=device)[:, None] * stride
    m_rows = torch.stack([m.roll(b) for b in range(ROWS)]) + rows  # each row at other offsets and positions
    n_rows = n[None] + rows
    batched, scale = s.logits(module, q, k, m_rows, n_rows)
    errors = []
    for b in range(ROWS):
        start = torch.minimum(m_rows[b], n_rows[b])
        alone, alone_scale = s.logits(module, q[b : b + 1], k[b : b + 1], m_rows[b] - start, n_rows[b] - start)
        errors.append(float((batched[b : b + 1] - alone).abs().max()))
        scale = max(scale, alone_scale)
    return max(errors), scale, max(float(m_rows.max()), float(n_rows.max()))


@pytest.mark.far_positions
@pytest.mark.claim("ROPE-4", kinds=("rotary",))
@given(seed=draws.seeds, m=draws.position_lists(2048, PAIRS), n=draws.position_lists(2048, PAIRS),
       stride=draws.shifts)
@example(seed=0, m=[0, 1, 2, 3, 5, 8], n=[0, 0, 1, 7, 3, 2], stride=4096)
@example(seed=1, m=[3, 9, 17, 30, 40, 60], n=[1, 12, 16, 31, 2, 63], stride=70)
@example(seed=2, m=[5, 0, 33, 2, 19, 7], n=[0, 21, 3, 2, 40, 11], stride=9001)  # rows far apart, no power of two
# pairs of one row on both sides of a large power of two (a table read modulo 4096 wraps there) and of
# a round number that is none (10^4); far positions are ROPE-10a's
@example(seed=3, m=[4094, 4095, 4096, 4097, 4100, 4090], n=[4096, 4090, 4095, 4098, 4093, 4101], stride=70)
@example(seed=4, m=[9998, 9999, 10000, 10003, 9990, 10001], n=[10000, 9997, 9999, 10004, 10001, 9985], stride=9001)
def test_logits_depend_only_on_offset(record, dtype, device, seed, m, n, stride):
    cap = s.position_cap(record, 10**7)
    m, n = (torch.tensor(v, device=device).clamp(max=cap // 2) for v in (m, n))
    stride = max(0, min(stride, (cap - int(max(m.max(), n.max()))) // (ROWS - 1)))
    module = s.build(record, dtype, device)
    error, scale, largest = offset_logit_error(record, module, dtype, device, seed, m, n, stride)
    bound = 2 * record.tolerance(dtype).bound(scale, s.max_angle(largest, record.geometry))
    s.require_within(
        error=error, bound=bound,
        what=f"⟨f(q, m), f(k, n)⟩ in a batch (rows {stride} apart) differs from the same q, k alone at "
             "offset-equal positions: the logits are not a function of m − n",
    )
    require_offset_matters(record, module, dtype, device, seed)


_POSITIONS_MATTER: set[tuple] = set()  # (encoder, dtype, device) whose logits moved with q: checked once


def require_offset_matters(record, module, dtype, device, seed):
    """Invariance alone is passed by an encoder that ignores positions: the logits at offsets
    0 and 37 (no power of two) must differ by more than the tolerance. Once per encoder and dtype:
    a failure recurs on every draw, a pass is kept."""
    key = (record.name, dtype, str(device))
    if key in _POSITIONS_MATTER:
        return
    q = s.randn(s.input_shape(record, 1, PAIRS), seed + 7, dtype, device)
    k = s.randn(s.input_shape(record, 1, PAIRS), seed + 8, dtype, device)
    base = torch.arange(PAIRS, device=device)
    same, scale = s.logits(module, q, k, base, base)
    apart, apart_scale = s.logits(module, q, k, base + MOVE, base)
    bound = 2 * record.tolerance(dtype).bound(max(scale, apart_scale), s.max_angle(PAIRS + MOVE, record.geometry))
    change = float((same - apart).abs().max())
    if change <= bound:
        s.violated(f"moving q {MOVE} positions away from k left the logits unchanged: positions do not reach them",
                   change=change, tolerance=bound)
    _POSITIONS_MATTER.add(key)
