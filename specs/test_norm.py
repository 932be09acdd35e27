"""ROPE-3 (004 §6.1): rotation preserves the norm, ``‖R_m x‖ = ‖x‖``, per head and per coordinate pair."""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 8


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
        layout = record.geometry.layout
        r = record.geometry.rotary_dim(xh.shape[-1])
        before, after = pair_norms(xh[..., :r], layout, "input"), pair_norms(yh[..., :r], layout, "output")
        s.require_within(error=float((after - before).abs().max()),
                         bound=tol.bound(float(before.max())), what="a coordinate pair changed norm")
