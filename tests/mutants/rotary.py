"""Defects of a standalone RoPE: precision, tables and caches, positions, q/k wiring, the rotation, input checks, interpolation."""

from __future__ import annotations

import math

import torch
from torch import nn

import posenc
from posenc import MultiHeadRotaryEmbedding, RotaryEmbedding, RotaryGeometry, angle_dtype
from posenc.encoders.positions import rotation_angles
from posenc.encoders.rotary import rotate
from posenc.encoders.validation import require_float, require_last_dim, require_rank

from ._scaffold import mutant, placed, QAndK, RELATIVE, rope, SteppedRotary, THETA_WRONG, VALUE_WRONG


class AnglesInInputDtype(SteppedRotary):
    """``p·θ`` formed in the input's half-precision dtype instead of float32."""

    def __init__(self, head_dim, *, half: torch.dtype, **options):
        super().__init__(head_dim, **options)
        self.half = half

    def angles(self, positions, x):
        if x.dtype != self.half:
            return super().angles(positions, x)
        return positions.to(self.half).unsqueeze(-1) * self.inv_freq.to(self.half)


@mutant(
    "rope_interleaved",
    fails={"ROPE-11", "ROPE-4", "ROPE-1", "ROPE-8"},
    why="positions and angles rounded in bf16 break half precision (ROPE-11) and the offsets it "
    "rounds (ROPE-4 in bf16); " + VALUE_WRONG + " in bf16",
)
def rope_angles_in_bf16(c):
    """angles p·θ formed in bfloat16 for bfloat16 inputs"""
    # references: bug class 1 (HF PR #29285, candle #3520, Megatron-LM #535): bf16 holds integers
    # exactly only up to 256, so angles are off by ~1 rad within a few hundred positions.
    return rope(AnglesInInputDtype, c, half=torch.bfloat16)


@mutant(
    "rope_interleaved",
    fails={"ROPE-11", "ROPE-4", "ROPE-1", "ROPE-8"},
    why="as in bf16, past fp16's 2048 exact integers",
)
def rope_angles_in_fp16(c):
    """angles p·θ formed in float16 for float16 inputs"""
    # references: bug class 1; fp16 is exact only to 2048 and overflows past 65504.
    return rope(AnglesInInputDtype, c, half=torch.float16)


class OutputInAngleDtype(SteppedRotary):
    def finish(self, rotated, x):
        return rotated  # float32 cos/sin promote bf16/fp16 q and k to float32


@mutant("rope_interleaved", fails={"contract"})
def rope_output_in_angle_dtype(c):
    """half-precision input comes back as float32: the output is never cast back"""
    # Type promotion against a float32 cos/sin cache; the fix in mixed-precision code is an explicit
    # cast back to the input dtype (flash-attention and TransformerEngine test the output dtype).
    return rope(OutputInAngleDtype, c)


class CacheTruncatedAtMaxLen(SteppedRotary):
    """A cos/sin table of ``max_len`` rows; later positions read its last row."""

    def __init__(self, head_dim, *, max_len, **options):
        super().__init__(head_dim, **options)
        self.max_len = max_len

    def table_angles(self, x, device):
        rows = torch.arange(self.max_len, device=device)
        return rotation_angles(rows, self.inv_freq, angle_dtype(x.dtype), self.scaling_factor)

    def angles(self, positions, x):
        return self.table_angles(x, positions.device)[positions.long().clamp(max=self.max_len - 1)]


class CacheIdentityPastMaxLen(CacheTruncatedAtMaxLen):
    """A zero-padded angle table: positions past ``max_len`` are not rotated at all."""

    def angles(self, positions, x):
        inside = (positions < self.max_len).unsqueeze(-1)
        return torch.where(inside, super().angles(positions, x), 0.0)


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-8", "ROPE-4", "ROPE-10a", "ATT-4"},
    why="past max_len the map is not R_p: " + VALUE_WRONG + ", and " + RELATIVE
    + ". A fresh module is as wrong as a used one, so ROPE-9 (fresh against used) cannot see it",
)
def rope_cache_truncated_past_max_len(c):
    """sin/cos cache of max_len rows, later positions clamped to the last row"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # references: bug class 2 (vLLM #55910, flash-attn #1195, onnxruntime #27597): caches sized to
    # a length the inputs outgrow.
    return rope(CacheTruncatedAtMaxLen, c, max_len=c.max_len)


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-8", "ROPE-4", "ROPE-10a", "ATT-4"},
    why="as the truncated cache",
)
def rope_cache_identity_past_max_len(c):
    """positions past the cache get angle 0: RoPE silently turns into the identity"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # references: bug class 2 (tables silently treated as identity, vLLM #55910).
    return rope(CacheIdentityPastMaxLen, c, max_len=c.max_len)


class CacheKeptFromFirstCall(SteppedRotary):
    """cos/sin built for a set of positions, rounded to that call's dtype, and reused by any later
    call with the same positions, whatever its dtype."""

    def forward(self, x, positions=None, *, offset=0):
        self.call_dtype = x.dtype
        return super().forward(x, positions, offset=offset)

    def angles(self, positions, x):
        self.positions_key = (tuple(positions.shape), tuple(positions.flatten().tolist()))
        return super().angles(positions, x)

    def trig(self, angles):
        if getattr(self, "cached_key", None) != self.positions_key:
            self.cached_key = self.positions_key
            self.cached = (angles.cos().to(self.call_dtype), angles.sin().to(self.call_dtype))
        return self.cached


@mutant("rope_interleaved", fails={"ROPE-9"})
def rope_cache_kept_from_first_dtype(c):
    """the sin/cos cache keeps the dtype of its first call and serves later calls in other dtypes"""
    # Caches filled once in the input dtype (cos_cached buffers) go stale when the model is cast or
    # called in another dtype; references: bug class 2 (stale tables).
    return rope(CacheKeptFromFirstCall, c)


class TableWithoutBoundsCheck(SteppedRotary):
    """A cos/sin table of max_len rows, indexed directly."""

    def __init__(self, head_dim, *, base, max_len):
        super().__init__(head_dim, base=base)
        self.table_len = max_len

    def angles(self, positions, x):
        table = torch.arange(self.table_len, device=positions.device)
        return super().angles(table, x)[positions]  # IndexError past the end, naming no limit


@mutant("rope_interleaved", table_limited=True, fails={"contract"})
def rope_table_index_error_past_max_len(c):
    """a table of max_len positions that raises IndexError past its end, naming no limit"""
    # torchtune 0.6.1's RotaryPositionalEmbeddings past max_seq_len (its docstring promises a recomputed cache).
    return rope(TableWithoutBoundsCheck, c, max_len=c.max_len)


class CacheIndexedWithoutBoundsCheck(SteppedRotary):
    """Positions index an angle table directly; nothing rejects a negative one."""

    def __init__(self, head_dim, *, max_len, **options):
        super().__init__(head_dim, **options)
        self.max_len = max_len

    def positions(self, x, positions, offset):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        if positions.shape[-1] != x.shape[1]:
            raise ValueError(f"positions must have shape (seq,) or (batch, seq), got {tuple(positions.shape)}")
        return positions.reshape(-1, x.shape[1])

    def angles(self, positions, x):
        length = max(self.max_len, int(positions.max()) + 1)
        rows = torch.arange(length, device=positions.device)
        table = rotation_angles(rows, self.inv_freq, angle_dtype(x.dtype), self.scaling_factor)
        return table[positions]  # table[-2] silently reads a row from the end


@mutant("rope_interleaved", fails={"contract"})
def rope_cache_wraps_negative_positions(c):
    """negative positions or offsets accepted: the cache lookup wraps around to its last rows"""
    # references: bug class 5 (offsets and padding in KV-cache decoding: HF #22161, flashinfer #847);
    # a padded position of −1 reads the end of the table instead of failing.
    return rope(CacheIndexedWithoutBoundsCheck, c, max_len=c.max_len)


class OffsetIgnored(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, 0)


@mutant(
    "rope_interleaved",
    fails={"PATH-1", "PATH-2", "contract"},
    why="decoding goes through the offset path (PATH-2), and a negative offset is silently "
    "ignored (the contract's silent garbage)",
)
def rope_offset_ignored(c):
    """the KV-cache offset is dropped: every decoding step starts again at position 0"""
    # references: bug class 5 (HF #22161, flashinfer #847, lucidrains rotary-embedding-torch #11).
    return rope(OffsetIgnored, c)


class PerBatchPositionsIgnored(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset)[:1]  # row 0 broadcast over the batch


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-4"},
    why="rows other than the first are rotated at the wrong positions (ROPE-1), so "
    "their logits follow the first row's offsets (ROPE-4)",
)
def rope_per_batch_positions_ignored(c):
    """per-sequence positions collapsed to the first sequence's"""
    # references: bug class 5; flash-attention and TransformerEngine test per-batch offsets for this.
    return rope(PerBatchPositionsIgnored, c)


class PositionsStartAtOne(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) + 1


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-8"},
    why="f(x, p) = R_(p+1) x: " + VALUE_WRONG + "; offsets and θ (a rate) hold",
)
def rope_positions_start_at_one(c):
    """positions counted from 1 (position ids from attention_mask.cumsum(-1) without the − 1)"""
    # references: bug class 5 (position ids built from padding masks, HF #22161).
    return rope(PositionsStartAtOne, c)


class PositionsTruncatedToSequence(SteppedRotary):
    def positions(self, x, positions, offset):
        if positions is not None:
            positions = positions[..., : x.shape[1]]  # the cos[:seq_len] idiom applied to position ids
        return super().positions(x, positions, offset)


@mutant("rope_interleaved", fails={"contract"})
def rope_positions_truncated_to_seq_len(c):
    """position ids longer than the sequence silently cut instead of rejected"""
    # references: bug class 5; a mismatched position tensor hides an upstream padding error.
    return rope(PositionsTruncatedToSequence, c)


class PositionsPlusOne(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) + 1


class RotatesBackwards(SteppedRotary):
    def trig(self, angles):
        return angles.cos(), -angles.sin()


@mutant("rope_interleaved", protocol="pair", fails={"ROPE-1"})
def rope_k_position_off_by_one(c):
    """k encoded at p + 1 while q is at p"""
    # references: bug class 5: k written to the cache with the next step's position (HF #22161).
    return placed(QAndK(SteppedRotary(c.head_dim, base=c.base), PositionsPlusOne(c.head_dim, base=c.base)), c)


@mutant(
    "rope_interleaved", protocol="pair",
    fails={"ROPE-1", "ROPE-4", "ROPE-10a", "ATT-4"},
    why="k's side is not R_n k (ROPE-1, ROPE-13), and " + RELATIVE,
)
def rope_k_rotated_backwards(c):
    """k rotated by −p·θ (sign of sin flipped on the k path only)"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # references: bug class 8 (kernel wiring, Liger-Kernel #342, ColossalAI #6444): separate q and k
    # code paths that disagree.
    return placed(QAndK(SteppedRotary(c.head_dim, base=c.base), RotatesBackwards(c.head_dim, base=c.base)), c)


@mutant(
    "rope_interleaved", protocol="pair",
    fails={"ROPE-1", "ROPE-4", "ROPE-10a", "ATT-4"},
    why="k's side is not in the declared layout (ROPE-1, ROPE-13), and " + RELATIVE,
)
def rope_k_half_split_layout(c):
    """q in the interleaved layout, k in the half-split layout"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # references: bug class 4 (HF #25199, #39687; candle #3949): q and k converted with different conventions.
    return placed(QAndK(RotaryEmbedding(c.head_dim, base=c.base, layout="interleaved"),
                          RotaryEmbedding(c.head_dim, base=c.base, layout="half_split")), c)


class SinCosSwapped(SteppedRotary):
    def trig(self, angles):
        return angles.sin(), angles.cos()


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-8"},
    # ROPE-2 left the set: it reads |θ|, and the rate's magnitude is right; turning backwards is ROPE-1's.
    why="the map turns by π/2 − pθ, backwards: " + VALUE_WRONG,
)
def rope_sin_cos_swapped(c):
    """sin and cos swapped when unpacking the cache"""
    # A (sin, cos) tuple unpacked as (cos, sin); position 0 then turns every pair by 90°.
    return rope(SinCosSwapped, c)


@mutant("rope_interleaved", fails={"ROPE-2"})
def rope_base_ignores_config(c):
    """base hard-coded to 10000, the configured base ignored"""
    # TransformerEngine #849 (inv_freq hard-coded to 10k), candle #3746 (Yi's rope_theta 5e6 ignored).
    return placed(SteppedRotary(c.head_dim, base=10000.0), c)


class LinearlySpacedFrequencies(SteppedRotary):
    def angles(self, positions, x):
        theta = 1 - torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device=positions.device) / self.rotary_dim
        return rotation_angles(positions, theta, angle_dtype(x.dtype), self.scaling_factor)


@mutant("rope_interleaved", fails={"ROPE-2", "ROPE-1"}, why="θ is wrong (ROPE-2); " + THETA_WRONG)
def rope_linear_frequency_schedule(c):
    """θ_i spaced linearly from 1 to 2/d instead of geometrically"""
    # 000 §3.2 / 004 §3.1 give θ_i = base^(−2i/d); RoFormer §3.4.3's long-term decay needs the geometric schedule.
    return rope(LinearlySpacedFrequencies, c)


class FrequenciesFromHeadDim(SteppedRotary):
    """Partial rotary: rotates the first ``rotary_dim`` features, with θ computed from ``head_dim``."""

    def angles(self, positions, x):
        theta = posenc.inverse_frequencies(self.head_dim, self.base, dtype=torch.float64)[: self.rotary_dim // 2]
        return rotation_angles(positions, theta.to(positions.device), angle_dtype(x.dtype), self.scaling_factor)


PARTIAL_ROTARY = RotaryGeometry(rotary_fraction=0.5)


@mutant(
    "rope_interleaved", geometry=PARTIAL_ROTARY,
    fails={"ROPE-2", "ROPE-1"},
    why="θ over head_dim, not the rotated width (ROPE-2); " + THETA_WRONG,
)
def partial_rope_frequencies_from_head_dim(c):
    """partial rotary (first half of each head) with θ_i = base^(−2i/head_dim) instead of base^(−2i/rotary_dim)"""
    # references: bug class 6 (sglang #35096, maxtext #4616).
    return rope(FrequenciesFromHeadDim, c, rotary_dim=PARTIAL_ROTARY.rotary_dim(c.head_dim))


class _RotationWithForwardBackward(torch.autograd.Function):
    """Rotation whose backward applies the forward rotation again instead of its transpose."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout):
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return rotate(x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return rotate(grad, cos, sin, ctx.layout), None, None, None  # should be rotate(grad, cos, −sin)


class BackwardRotatesForward(SteppedRotary):
    def rotate_pairs(self, x, cos, sin):
        return _RotationWithForwardBackward.apply(x, cos, sin, self.layout)


@mutant("rope_interleaved", fails={"contract"})
def rope_backward_rotates_forward(c):
    """hand-written backward rotates the gradient by +p·θ instead of −p·θ"""
    # Fused kernels with their own backward (Liger-Kernel, TransformerEngine) are tested against
    # autograd for this reason (references: "How the strongest peers test RoPE").
    return rope(BackwardRotatesForward, c)


class TrainableFrequencies(SteppedRotary):
    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.frequencies = nn.Parameter(self.inv_freq.clone())

    def angles(self, positions, x):
        return rotation_angles(positions, self.frequencies, angle_dtype(x.dtype), self.scaling_factor)


@mutant(
    "rope_interleaved",
    fails={"ROPE-5", "PATH-3", "ROPE-1", "ROPE-8"},
    why="θ is a parameter (ROPE-5), so module.to(bfloat16) rounds it (PATH-3) and, in half "
    "precision, " + VALUE_WRONG,
)
def rope_inv_freq_trainable(c):
    """inv_freq registered as an nn.Parameter: the optimizer moves the frequencies"""
    # A buffer turned into a parameter (or left in the optimizer's list) during a port; 004 §1.1
    # states RoPE has no trainable parameters.
    return rope(TrainableFrequencies, c)


class AcceptsIntegerInput(SteppedRotary):
    def check_input(self, x):
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        require_last_dim(x, self.head_dim, "head_dim")


@mutant("rope_interleaved", fails={"contract"})
def rope_accepts_integer_input(c):
    """integer input silently rotated in float32 and truncated back to integers"""
    # Token ids passed where embeddings belong run without error and return garbage.
    return rope(AcceptsIntegerInput, c)


class EmptyForNegativeStart(SteppedRotary):
    """A table sliced from the start position: a negative start slices nothing, returned as is."""

    def forward(self, x, positions=None, *, offset=0):
        start = int(torch.as_tensor(positions).min()) if positions is not None else offset
        if start < 0:
            return x[:, :0]
        return super().forward(x, positions, offset=offset)


@mutant("rope_interleaved", fails={"contract"})
def rope_empty_for_a_negative_start(c):
    """a negative start position slices an empty table, and the empty tensor is returned"""
    # A wrong-shaped answer is silent garbage, to be reported, not a crash of the garbage check.
    return rope(EmptyForNegativeStart, c)


class NoRankCheck(SteppedRotary):
    def check_input(self, x):
        require_float(x)
        require_last_dim(x, self.head_dim, "head_dim")


@mutant("rope_interleaved", fails={"contract"})
def rope_without_rank_check(c):
    """input of the wrong rank broadcast instead of rejected"""
    # (batch, heads, seq, head_dim) vs (batch, seq, heads, head_dim) confusion (TransformerEngine's
    # sbhd/bshd layouts) goes unnoticed when shapes broadcast.
    return rope(NoRankCheck, c)


class DivisibilityNotChecked(MultiHeadRotaryEmbedding):
    def __init__(self, d_model, n_heads, **rotary_options):
        nn.Module.__init__(self)
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = d_model // n_heads  # floors silently when d_model % n_heads != 0
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)


@mutant("rope_multihead", fails={"ATT-5"})
def multihead_rope_without_divisibility_check(c):
    """d_model not divisible by the head count: head_dim floored instead of an error"""
    # 004 §8.1 asks for the check; without it the error surfaces later as a reshape failure, or never.
    return placed(DivisibilityNotChecked(c.d_model, c.n_heads, base=c.base), c)


class InterpolatedTwice(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) / self.scaling_factor  # the rotary divides again


@mutant(
    "rope_linear_scaled",
    fails={"ROPE-14", "ROPE-2", "ROPE-1"},
    why="positions divided by s² (ROPE-14); indistinguishable from θ/s (ROPE-2); "
    + THETA_WRONG,
)
def rope_linear_scaled_twice(c):
    """position interpolation applied twice: positions divided by s²"""
    # references: bug class 7 (a scaling applied twice or not at all: sglang #33558, mlx-lm #1507).
    return rope(InterpolatedTwice, c, scaling_factor=4.0)


class AttentionFactorOnCosSin(SteppedRotary):
    def trig(self, angles):
        factor = 0.1 * math.log(self.scaling_factor) + 1  # YaRN's attention temperature
        return factor * angles.cos(), factor * angles.sin()


@mutant(
    "rope_linear_scaled",
    fails={
        "ROPE-3", "ROPE-10a", "ROPE-14", "ROPE-1", "ROPE-8"},
    why="an undeclared scale: norms change (ROPE-3, and where ROPE-10a checks them), the map is not RoPE "
    "at p/s (ROPE-14); " + VALUE_WRONG,
)
def rope_linear_scaled_with_attention_factor(c):
    """YaRN's attention factor 0.1·ln s + 1 folded into cos/sin of a linear-scaled RoPE"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # references: bug class 7 (YaRN attention scale applied where it does not belong: sglang #33558,
    # mlx-lm #1507); the rotation stops preserving norms.
    return rope(AttentionFactorOnCosSin, c, scaling_factor=4.0)
