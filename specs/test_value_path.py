"""ROPE-6 (004 §3.3): V is not rotated; only q and k carry position.

Observed on attention modules: with every value row of every head equal to the same vector
``c``, each output row of ``Σ_n w_mn v_n`` is a multiple of ``c``, whatever the weights (and
whatever heads they mix: that is ATT-1's to judge). A rotated V gives ``Σ_n w_mn R_n c``, which
is not.
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 7


@pytest.mark.claim("ROPE-6", kinds=("attention",))
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=3)
def test_values_are_not_rotated(record, dtype, device, seed, offset):
    module = s.build(record, dtype, device)
    cfg = s.SPEC_CONFIG
    offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)  # a fixed cache's end is ROPE-9's
    shape = (2, SEQ, cfg.n_heads, cfg.head_dim)
    q, k = s.randn(shape, seed, dtype, device), s.randn(shape, seed + 1, dtype, device)
    c = s.randn((1, 1, 1, cfg.head_dim), seed + 2, dtype, device)  # one vector for every head
    v = c.expand(shape).contiguous()
    with torch.no_grad():
        out = module.attend(q, k, v, None, offset=offset).to(torch.float64)
    c64 = c.to(torch.float64)
    coefficient = (out * c64).sum(-1, keepdim=True) / (c64 * c64).sum(-1, keepdim=True)
    residual = out - coefficient * c64  # the part of each output row not along c
    s.require_within(
        error=float(residual.abs().max()),
        bound=record.tolerance(dtype).bound(float(out.abs().max())),
        what="with every value row equal to c, an output row is not a multiple of c (V carries position)",
    )
