"""ROPE-7 (004 §7): every head is rotated with the same angles, computed from ``head_dim``.

Inputs whose heads are all equal must give outputs whose heads are all equal, each equal to
the float64 rotation with ``θ_i = base^(−2i/head_dim)``. The sequence length differs from the
head count and from ``head_dim / 2``, so angles broadcast along the wrong axis (004 §7's
published snippet) or computed from ``d_model`` cannot pass.
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 5  # ≠ n_heads (4), ≠ head_dim / 2 (8)


@pytest.mark.claim("ROPE-7", kinds=("rotary",))
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=1)
def test_every_head_gets_the_same_head_dim_rotation(record, dtype, device, seed, offset):
    offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)
    cfg = s.SPEC_CONFIG
    module = s.build(record, dtype, device)
    one_head = s.randn((2, SEQ, 1, cfg.head_dim), seed, dtype, device)
    x = s.from_heads(one_head.expand(2, SEQ, cfg.n_heads, cfg.head_dim).contiguous(), record)
    with torch.no_grad():
        y = s.as_heads(module(x, None, offset=offset)).to(torch.float64)
    positions = torch.arange(offset, offset + SEQ, device=device)[None]
    expected = s.reference_rotation(s.as_heads(x), positions, record.geometry, cfg.head_dim)
    tol = record.tolerance(dtype)
    s.require_within(error=s.max_error(y, y[:, :, :1]), bound=tol.bound(float(y.abs().max())),
                     what="equal heads came out different: heads are not rotated alike")
    s.require_within(error=s.max_error(y, expected),
                     bound=tol.bound(float(expected.abs().max()), s.max_angle(positions, record.geometry)),
                     what=f"a head differs from the rotation with head_dim={cfg.head_dim} angles")
