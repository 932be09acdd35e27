"""Defects of the absolute encodings: the learnable and sinusoidal tables."""

from __future__ import annotations

import torch

from posenc import LearnablePositionalEmbedding, SinusoidalPositionalEncoding, angle_dtype

from ._scaffold import mutant, placed


class ClampsPastTable(LearnablePositionalEmbedding):
    def lookup(self, positions):
        return self.table[positions.long().clamp(max=self.max_len - 1)]


@mutant("learnable", fails={"ABS-2"})
def learnable_clamps_past_max_len(c):
    """learnable table clamps positions past max_len to its last row instead of raising"""
    # references: bug class 2: the usual "fix" for "index out of range in self" (HF #5611).
    return placed(ClampsPastTable(c.max_len, c.d_model), c)


class FrozenTable(LearnablePositionalEmbedding):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        table = self.table.detach()
        del self.table
        self.register_buffer("table", table)  # a buffer never trains


@mutant("learnable", fails={"ABS-1"})
def learnable_table_frozen(c):
    """learnable table registered as a buffer: it never trains"""
    # 000 §2.1 trains the table; a buffer is saved and moved like a parameter, so nothing looks wrong.
    return placed(FrozenTable(c.max_len, c.d_model), c)


class SinusoidalSinCosSwapped(SinusoidalPositionalEncoding):
    def table(self, positions, dtype=torch.float32):
        rows = super().table(positions, dtype)
        return torch.stack((rows[..., 1::2], rows[..., 0::2]), dim=-1).flatten(-2)


# ABS-4 left the set: the swapped pairs are still defined everywhere, turning by a constant angle.
@mutant("sinusoidal", fails={"ABS-3"})
def sinusoidal_sin_cos_swapped(c):
    """sinusoidal table with cos in the even columns and sin in the odd ones"""
    # 000 §2.2 puts sin at 2i and cos at 2i+1; tensor2tensor-style [sin…, cos…] ports mix the two orders.
    return placed(SinusoidalSinCosSwapped(c.d_model, base=c.base), c)


class SinusoidalAnglesInBf16(SinusoidalPositionalEncoding):
    def table(self, positions, dtype=torch.float32):
        angles = positions.to(torch.bfloat16).unsqueeze(-1) * self.inv_freq.to(torch.bfloat16)
        angles = angles.to(angle_dtype(dtype))
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


@mutant("sinusoidal", fails={"ABS-3", "ABS-4"}, why="a bf16 table is not the formula (ABS-3), near or far (ABS-4)")
def sinusoidal_table_in_bf16(c):
    """sinusoidal angles p·θ formed in bfloat16"""
    # references: bug class 1, the same precision loss as in RoPE's angles (HF PR #29285).
    return placed(SinusoidalAnglesInBf16(c.d_model, base=c.base), c)


@mutant("sinusoidal", fails={"ABS-3"})
def sinusoidal_other_base(c):
    """sinusoidal table of base 500 where the formula says 10000: finite and bounded everywhere"""
    # Blamed on ABS-4 too by a spec that compared the far rows with the formula: that is ABS-3's claim alone.
    return placed(SinusoidalPositionalEncoding(c.d_model, base=500.0), c)


class SinusoidalStoredTable(SinusoidalPositionalEncoding):
    """The original Transformer's buffer of max_len precomputed rows, computed past it."""

    def __init__(self, d_model, max_len, **options):
        super().__init__(d_model, **options)
        self.max_len = max_len
        self.register_buffer("pe", super().table(torch.arange(max_len), torch.float64))

    def table(self, positions, dtype=torch.float32):
        stored = self.pe[positions.clamp(max=self.max_len - 1)].to(angle_dtype(dtype))
        return torch.where((positions < self.max_len).unsqueeze(-1), stored, super().table(positions, dtype))


@mutant("sinusoidal", fails={"ABS-6"})
def sinusoidal_precomputed_table(c):
    """sinusoidal encoding stored as a max_len × d_model buffer"""
    # The Annotated Transformer / PyTorch tutorial register_buffer("pe") pattern: memory grows with
    # max_len, against 000 §2.2's "low" memory claim.
    return placed(SinusoidalStoredTable(c.d_model, c.max_len, base=c.base), c)


class SinusoidalOffsetIgnored(SinusoidalPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        return super().forward(x, positions)


@mutant(
    "sinusoidal",
    fails={"ABS-5", "contract"},
    why="the offset path ignores the offset (ABS-5's shifted logits), and a negative "
    "offset is silently ignored (the contract's silent garbage)",
)
def sinusoidal_offset_ignored(c):
    """sinusoidal encoding that drops the decoding offset: every step is encoded at position 0"""
    # references: bug class 5 (offsets in KV-cache decoding, HF #22161).
    return placed(SinusoidalOffsetIgnored(c.d_model, base=c.base), c)
