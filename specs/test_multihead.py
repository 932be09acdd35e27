"""ROPE-7 (004 §7): every head is rotated with the same angles.

Inputs whose heads are all equal must give outputs whose heads are all equal. The sequence
length differs from the head count and from ``head_dim / 2``, so angles broadcast along the wrong
axis (004 §7's published snippet) cannot pass. That the angles come from ``head_dim`` and not
``d_model`` is a statement about θ, judged by ROPE-2 (which measures θ at each head size).
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 5  # ≠ n_heads (4), ≠ head_dim / 2 (8)


@pytest.mark.claim("ROPE-7", kinds=("rotary",), requires=lambda r: "hybrid" not in r.designs)  # its table differs by head
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=1)
def test_every_head_gets_the_same_rotation(record, dtype, device, seed, offset):
    offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)
    cfg = s.SPEC_CONFIG
    module = s.build(record, dtype, device)
    one_head = s.randn((2, SEQ, 1, cfg.head_dim), seed, dtype, device)
    x = s.from_heads(one_head.expand(2, SEQ, cfg.n_heads, cfg.head_dim).contiguous(), record)
    with torch.no_grad():
        y = s.as_heads(module(x, None, offset=offset)).to(torch.float64)
    s.require_within(error=s.max_error(y, y[:, :, :1]), bound=record.tolerance(dtype).bound(float(y.abs().max())),
                     what="equal heads came out different: heads are not rotated alike")
