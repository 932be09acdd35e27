"""A softmax attention registered as a linear attention: LIN-1 must refuse it.

Softmax attention on a memory-efficient kernel keeps O(n) memory, so only the time slope at
lengths where n² dominates tells it from an O(n) linear attention
(``specs/test_complexity.py::test_linear_attention_time_is_linear_in_length``). The second record
declares a 2048-row cache, as 000 §5.2's published linear attention does, so LIN-1 is measured
at n ≤ 2048 only, where a softmax attention's slope on a CPU is well below 2.
"""

import dataclasses

import posenc
from posenc import RoPEAttention

linear = posenc.get("linear_attention_rope")
posenc.register(dataclasses.replace(
    linear,
    name="softmax_attention_as_linear",
    build=lambda c: RoPEAttention(c.d_model, c.n_heads, base=c.base).to(device=c.device, dtype=c.dtype),
    description="O(n²)-time softmax attention (SDPA) declared a linear attention",
))
posenc.register(dataclasses.replace(
    posenc.get("softmax_attention_as_linear"),
    name="softmax_attention_as_linear_capped",
    limits=dataclasses.replace(linear.limits, max_position=2048),
    description="O(n²)-time softmax attention declared a linear attention with a 2048-row cache",
))
