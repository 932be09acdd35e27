"""ROPE-3 (004 §6.1): rotation preserves the norm, ``‖R_m x‖ = ‖x‖``, per head and per coordinate pair:
the encoder's own pairs, read off its map (two input coordinates that one step of position sends
to the same two output coordinates), so that a wrong pairing whose pairs keep their norm is
ROPE-1's and ROPE-13's to blame; the declared pairs where the map has no such pairs."""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 8


_OWN_PAIRS: dict[tuple[str, int], list | None] = {}


def own_pairs(record, head_dim: int):
    """``[(input pair, output pair), …]`` of the encoder's map at position 1, or None where some input
    coordinate reaches more than two outputs (no rotation of pairs); read once per encoder and size."""
    key = (record.name, head_dim)
    if key not in _OWN_PAIRS:
        _OWN_PAIRS[key] = _read_own_pairs(record, head_dim)
    return _OWN_PAIRS[key]


def _read_own_pairs(record, head_dim: int):
    from specs.test_rotation_algebra import rotation_matrix

    dtype = torch.float64 if torch.float64 in record.limits.dtypes else torch.float32
    module = s.build(record, dtype, **s.heads_config(head_dim, n_heads=1))
    m = rotation_matrix(record, module, 1, head_dim, dtype)
    tol = (1e-9 if dtype == torch.float64 else 1e-6) * float(m.abs().max())
    support = [tuple(i for i in range(head_dim) if abs(float(m[i, j])) > tol) for j in range(head_dim)]
    if any(len(outputs) > 2 for outputs in support):
        return None
    groups: dict[tuple, list[int]] = {}
    for j, outputs in enumerate(support):
        if len(outputs) == 2:
            groups.setdefault(outputs, []).append(j)
    if any(len(inputs) != 2 for inputs in groups.values()):
        return None
    return [(tuple(inputs), outputs) for outputs, inputs in groups.items()]


def pair_norms(t: torch.Tensor, layout: str, side: str) -> torch.Tensor:
    """Norms of the coordinate pairs of the rotated part ``t`` of each head; ``side`` is input or output."""
    half = t.shape[-1] // 2
    if layout == "half_split" or (layout == "concatenated" and side == "output"):
        a, b = t[..., :half], t[..., half:]
    else:
        a, b = t[..., 0::2], t[..., 1::2]
    return torch.sqrt(a.to(torch.float64) ** 2 + b.to(torch.float64) ** 2)


@pytest.mark.claim("ROPE-3", kinds=("rotary",))
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=0)
@example(seed=1, offset=1000)
def test_rotation_preserves_norm(record, dtype, device, seed, offset):
    offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)
    module = s.build(record, dtype, device)
    x = s.randn(s.input_shape(record, 2, SEQ), seed, dtype, device)
    with torch.no_grad():
        y = module(x, None, offset=offset)
    xh, yh = s.as_heads(x).to(torch.float64), s.as_heads(y).to(torch.float64)
    tol = record.tolerance(dtype)
    norms = xh.norm(dim=-1)
    s.require_within(error=float((yh.norm(dim=-1) - norms).abs().max()),
                     bound=tol.bound(float(norms.max())), what="‖f(x, p)‖ ≠ ‖x‖ per head")
    if record.geometry is not None:
        pairs = own_pairs(record, xh.shape[-1])
        if pairs:
            before = torch.stack([xh[..., list(i)].norm(dim=-1) for i, _ in pairs], dim=-1)
            after = torch.stack([yh[..., list(o)].norm(dim=-1) for _, o in pairs], dim=-1)
        else:
            layout = record.geometry.layout
            r = record.geometry.rotary_dim(xh.shape[-1])
            before, after = pair_norms(xh[..., :r], layout, "input"), pair_norms(yh[..., :r], layout, "output")
        s.require_within(error=float((after - before).abs().max()),
                         bound=tol.bound(float(before.max())), what="a coordinate pair changed norm")
