"""Defects of the documents' published snippets, reproduced on the correct designs."""

from __future__ import annotations

import torch

from posenc import (
    DynamicPositionalEncoding,
    HybridPositionalEncoding,
    MultiHeadRotaryEmbedding,
    RotaryEmbedding,
    angle_dtype,
)
from posenc.encoders.positions import resolve_positions
from posenc.encoders.validation import require_float, require_last_dim, require_rank

from ._scaffold import mutant, placed, QAndK, RELATIVE, rope, SteppedRotary, VALUE_WRONG


class HalfSplitCacheOnInterleavedPairs(SteppedRotary):
    """Cache ``cat(freqs, freqs)`` (one angle per coordinate, half-split order), applied to pairs (2i, 2i+1)."""

    def trig(self, angles):
        per_coordinate = torch.cat((angles, angles), dim=-1)
        return per_coordinate.cos(), per_coordinate.sin()

    def rotate_pairs(self, x, cos, sin):
        partner = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # rotate_every_two
        return x * cos + partner * sin


@mutant(
    "rope_interleaved",
    fails={
        "ROPE-1", "ROPE-2", "ROPE-3", "ROPE-4", "ROPE-8", "ROPE-10a", "ATT-4"},
    why="one angle per coordinate, not per pair: the map is not a "
    "rotation of pairs at all, so every rotary claim with a value fails (frequencies, norm, offsets, formula)",
)
def rope_half_split_cache_on_interleaved_pairs(c):
    """000 §3.2: sin/cos cache in half-split layout applied to interleaved pairs"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # 000 §3.2's snippet; in the field the GPT-J / GPT-NeoX layout mix-up of checkpoint conversions
    # (HF #25199, #39687; candle #3949). Position 0 is the identity, so short tests miss it.
    return rope(HalfSplitCacheOnInterleavedPairs, c)


@mutant(
    "rope_concatenated", protocol="pair",
    fails={"ROPE-1", "ROPE-13", "ROPE-4", "ROPE-10a", "ATT-4"},
    why="k is not in the declared layout (ROPE-1, ROPE-13), and q and k in two layouts "
    "make " + RELATIVE,
)
def rope_concatenated_on_q_only(c):
    """004 §3.2: q written in the concatenated layout, k in the formula's interleaved layout"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # 004 §3.2's real-valued code used for one projection only; the same q/k layout split appears when
    # half of a checkpoint is converted (HF #25199).
    return placed(QAndK(RotaryEmbedding(c.head_dim, base=c.base, layout="concatenated"),
                          RotaryEmbedding(c.head_dim, base=c.base, layout="interleaved")), c)


class AnglesFromDModel(MultiHeadRotaryEmbedding):
    """Angles computed for d_model and laid across the heads: head h gets frequencies h·head_dim/2 …"""

    def __init__(self, d_model, n_heads, **rotary_options):
        super().__init__(d_model, n_heads, **rotary_options)
        self.across_heads = RotaryEmbedding(d_model, **rotary_options)

    def forward(self, x, positions=None, *, offset=0):
        require_float(x)
        require_rank(x, 3, "(batch, seq, d_model)")
        require_last_dim(x, self.d_model, "d_model")
        return self.across_heads(x.unsqueeze(-2), positions, offset=offset).squeeze(-2)


@mutant(
    "rope_multihead",
    fails={"ROPE-7", "ROPE-2", "ROPE-1", "ROPE-8"},
    why="heads get different angles (ROPE-7) that are not base^(−2i/d) (ROPE-2); "
    + VALUE_WRONG,
)
def multihead_rope_angles_from_d_model(c):
    """004 §7: angles from d_model instead of head_dim, broadcast across the heads"""
    # 004 §7's snippet once its shapes are made to agree: (1, seq, d_model/2) angles spread over
    # (heads, head_dim/2), so each head turns with another slice of the spectrum.
    return placed(AnglesFromDModel(c.d_model, c.n_heads, base=c.base), c)


class HybridRotatingAcrossHeads(HybridPositionalEncoding):
    def __init__(self, d_model, n_heads, max_len, **rotary_options):
        super().__init__(d_model, n_heads, max_len, **rotary_options)
        self.rotary = AnglesFromDModel(d_model, n_heads, **rotary_options)


@mutant("hybrid", fails={"ROPE-7"})
def hybrid_rotating_across_heads(c):
    """000 §5.1: the hybrid rotates the whole d_model vector instead of each head"""
    # 000 §5.1's snippet: RoPE applied to (batch, seq, d_model) with d_model frequencies.
    return placed(HybridRotatingAcrossHeads(c.d_model, c.n_heads, c.max_len, base=c.base), c)


class ScaledPositionsNeverUsed(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = pos.to(angle_dtype(x.dtype)) * self.dynamic_scale  # noqa: F841  (computed, never passed on)
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, pos)


@mutant(
    "dynamic",
    fails={"DYN-1", "DYN-2", "DYN-3"},
    why="the scaled positions, the scale's gradient and the mix "
    "are three statements of 000 §5.3, and all three need s·p to reach the rotation",
)
def dynamic_scaled_positions_never_reach_rotation(c):
    """000 §5.3: the scaled positions s·p are computed but the rotation gets p"""
    # 000 §5.3's snippet: the second term rotates by p again, so the mix is plain RoPE and s learns nothing.
    return placed(ScaledPositionsNeverUsed(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)
