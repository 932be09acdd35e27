"""ROPE-14 (004 §10.3): linear position scaling (position interpolation).

With factor ``s`` the output at position ``p`` equals plain RoPE at the fractional position ``p / s``
(float64 reference), for positions far past the unscaled range.
"""

import dataclasses

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s


@pytest.mark.claim("ROPE-14", kinds=("rotary",))
@given(seed=draws.seeds, positions=draws.position_lists(50_000, 6))
@example(seed=0, positions=[0, 1, 3, 4, 4097, 49_999])
def test_scaled_position_equals_plain_rope_at_p_over_s(record, dtype, seed, positions):
    factor = record.geometry.scaling_factor
    module = s.build(record, dtype)
    p = torch.tensor(positions)
    x = s.randn(s.input_shape(record, 1, len(positions)), seed, dtype)
    with torch.no_grad():
        y = s.as_heads(module(x, p))
    plain = dataclasses.replace(record.geometry, scaling_factor=1.0)
    expected = s.reference_rotation(s.as_heads(x), (p.double() / factor)[None], plain, s.SPEC_CONFIG.head_dim)
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()), float(p.max()) / factor),
                     what=f"output at p with factor {factor} ≠ plain RoPE at p / {factor}")
    if factor == 1.0:
        s.violated("declares no scaling factor, so position interpolation is not exercised")
