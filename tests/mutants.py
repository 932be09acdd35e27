"""Mutant encoders: each reproduces one known defect, so that the specs can show they catch it.

A plug-in file, loaded only on request::

    pytest specs --plugin tests/mutants.py --encoders <mutant names>

Every mutant is the record of the correct design it imitates, with a broken ``build``: it keeps
that design's declarations, so a spec that catches the defect reports the claim as
"unexpectedly failing" with a ``ClaimViolation`` (a kill). A crash is not a kill.

``EXPECTED_CLAIMS`` names the claims each mutant fails, exactly: a defect fails its own claim and
the others the mathematics forces, which ``WHY`` names. ``KNOWN_SURVIVORS`` lists mutants that no
spec can kill yet, with the missing check.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc import (
    ALiBiBias,
    BuildConfig,
    DynamicPositionalEncoding,
    HybridPositionalEncoding,
    LearnablePositionalEmbedding,
    LinearAttentionRoPE,
    MultiHeadRotaryEmbedding,
    RoPEAttention,
    RotaryEmbedding,
    RotaryGeometry,
    SinusoidalPositionalEncoding,
    angle_dtype,
)
from posenc.encoders.positions import resolve_positions, rotation_angles
from posenc.encoders.rotary import rotate
from posenc.encoders.validation import require_float, require_last_dim, require_rank

# ============================================================ shared scaffolding


class SteppedRotary(RotaryEmbedding):
    """The correct ``RotaryEmbedding``, its forward pass split into steps; each mutant breaks one."""

    def check_input(self, x):
        require_float(x)
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        require_last_dim(x, self.head_dim, "head_dim")

    def positions(self, x, positions, offset):
        return resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)

    def angles(self, positions, x):
        return rotation_angles(positions, self.inv_freq, angle_dtype(x.dtype), self.scaling_factor)

    def trig(self, angles):
        return angles.cos(), angles.sin()

    def rotate_pairs(self, x, cos, sin):
        return rotate(x, cos, sin, self.layout)

    def finish(self, rotated, x):
        return rotated.to(x.dtype)

    def forward(self, x, positions=None, *, offset=0):
        self.check_input(x)
        pos = self.positions(x, positions, offset)
        compute = angle_dtype(x.dtype)
        cos, sin = (t.to(compute).unsqueeze(-2) for t in self.trig(self.angles(pos, x)))
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        out = self.finish(self.rotate_pairs(rot.to(compute), cos, sin), x)
        return torch.cat((out, rest.to(out.dtype)), dim=-1) if rest.shape[-1] else out


class QAndK(nn.Module):
    """q and k through different code paths, called together (the pair protocol)."""

    def __init__(self, q_encoder: nn.Module, k_encoder: nn.Module):
        super().__init__()
        self.q_encoder, self.k_encoder = q_encoder, k_encoder
        self.head_dim = q_encoder.head_dim

    def forward(self, q, k, q_positions, k_positions):
        return self.q_encoder(q, q_positions), self.k_encoder(k, k_positions)


def _placed(module: nn.Module, c: BuildConfig) -> nn.Module:
    return module.to(device=c.device, dtype=c.dtype)


def _rope(cls, c: BuildConfig, **options) -> nn.Module:
    return _placed(cls(c.head_dim, base=c.base, **options), c)


MUTANTS: list[posenc.EncoderRecord] = []


def mutant(imitates: str, **changes):
    """Declare ``build`` a mutant of the built-in ``imitates``: its record, named after the function."""

    def decorate(build):
        record = dataclasses.replace(posenc.get(imitates), name=build.__name__, build=build,
                                     description=(build.__doc__ or "").strip(), **changes)
        MUTANTS.append(record)
        return build

    return decorate


# ============================================================ defects of the published snippets


class HalfSplitCacheOnInterleavedPairs(SteppedRotary):
    """Cache ``cat(freqs, freqs)`` (one angle per coordinate, half-split order), applied to pairs (2i, 2i+1)."""

    def trig(self, angles):
        per_coordinate = torch.cat((angles, angles), dim=-1)
        return per_coordinate.cos(), per_coordinate.sin()

    def rotate_pairs(self, x, cos, sin):
        partner = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # rotate_every_two
        return x * cos + partner * sin


@mutant("rope_interleaved")
def rope_half_split_cache_on_interleaved_pairs(c):
    """000 §3.2: sin/cos cache in half-split layout applied to interleaved pairs"""
    # 000 §3.2's snippet; in the field the GPT-J / GPT-NeoX layout mix-up of checkpoint conversions
    # (HF #25199, #39687; candle #3949). Position 0 is the identity, so short tests miss it.
    return _rope(HalfSplitCacheOnInterleavedPairs, c)


@mutant("rope_concatenated", protocol="pair")
def rope_concatenated_on_q_only(c):
    """004 §3.2: q written in the concatenated layout, k in the formula's interleaved layout"""
    # 004 §3.2's real-valued code used for one projection only; the same q/k layout split appears when
    # half of a checkpoint is converted (HF #25199).
    return _placed(QAndK(RotaryEmbedding(c.head_dim, base=c.base, layout="concatenated"),
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


@mutant("rope_multihead")
def multihead_rope_angles_from_d_model(c):
    """004 §7: angles from d_model instead of head_dim, broadcast across the heads"""
    # 004 §7's snippet once its shapes are made to agree: (1, seq, d_model/2) angles spread over
    # (heads, head_dim/2), so each head turns with another slice of the spectrum.
    return _placed(AnglesFromDModel(c.d_model, c.n_heads, base=c.base), c)


class HybridRotatingAcrossHeads(HybridPositionalEncoding):
    def __init__(self, d_model, n_heads, max_len, **rotary_options):
        super().__init__(d_model, n_heads, max_len, **rotary_options)
        self.rotary = AnglesFromDModel(d_model, n_heads, **rotary_options)


@mutant("hybrid")
def hybrid_rotating_across_heads(c):
    """000 §5.1: the hybrid rotates the whole d_model vector instead of each head"""
    # 000 §5.1's snippet: RoPE applied to (batch, seq, d_model) with d_model frequencies.
    return _placed(HybridRotatingAcrossHeads(c.d_model, c.n_heads, c.max_len, base=c.base), c)


class ScaledPositionsNeverUsed(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = pos.to(angle_dtype(x.dtype)) * self.dynamic_scale  # noqa: F841  (computed, never passed on)
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, pos)


@mutant("dynamic")
def dynamic_scaled_positions_never_reach_rotation(c):
    """000 §5.3: the scaled positions s·p are computed but the rotation gets p"""
    # 000 §5.3's snippet: the second term rotates by p again, so the mix is plain RoPE and s learns nothing.
    return _placed(ScaledPositionsNeverUsed(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)


# ============================================================ precision


class AnglesInInputDtype(SteppedRotary):
    """``p·θ`` formed in the input's half-precision dtype instead of float32."""

    def __init__(self, head_dim, *, half: torch.dtype, **options):
        super().__init__(head_dim, **options)
        self.half = half

    def angles(self, positions, x):
        if x.dtype != self.half:
            return super().angles(positions, x)
        return positions.to(self.half).unsqueeze(-1) * self.inv_freq.to(self.half)


@mutant("rope_interleaved")
def rope_angles_in_bf16(c):
    """angles p·θ formed in bfloat16 for bfloat16 inputs"""
    # references: bug class 1 (HF PR #29285, candle #3520, Megatron-LM #535): bf16 holds integers
    # exactly only up to 256, so angles are off by ~1 rad within a few hundred positions.
    return _rope(AnglesInInputDtype, c, half=torch.bfloat16)


@mutant("rope_interleaved")
def rope_angles_in_fp16(c):
    """angles p·θ formed in float16 for float16 inputs"""
    # references: bug class 1; fp16 is exact only to 2048 and overflows past 65504.
    return _rope(AnglesInInputDtype, c, half=torch.float16)


class OutputInAngleDtype(SteppedRotary):
    def finish(self, rotated, x):
        return rotated  # float32 cos/sin promote bf16/fp16 q and k to float32


@mutant("rope_interleaved")
def rope_output_in_angle_dtype(c):
    """half-precision input comes back as float32: the output is never cast back"""
    # Type promotion against a float32 cos/sin cache; the fix in mixed-precision code is an explicit
    # cast back to the input dtype (flash-attention and TransformerEngine test the output dtype).
    return _rope(OutputInAngleDtype, c)


# ============================================================ tables and caches


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


@mutant("rope_interleaved")
def rope_cache_truncated_past_max_len(c):
    """sin/cos cache of max_len rows, later positions clamped to the last row"""
    # references: bug class 2 (vLLM #55910, flash-attn #1195, onnxruntime #27597): caches sized to
    # a length the inputs outgrow.
    return _rope(CacheTruncatedAtMaxLen, c, max_len=c.max_len)


@mutant("rope_interleaved")
def rope_cache_identity_past_max_len(c):
    """positions past the cache get angle 0: RoPE silently turns into the identity"""
    # references: bug class 2 (tables silently treated as identity, vLLM #55910).
    return _rope(CacheIdentityPastMaxLen, c, max_len=c.max_len)


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


@mutant("rope_interleaved")
def rope_cache_kept_from_first_dtype(c):
    """the sin/cos cache keeps the dtype of its first call and serves later calls in other dtypes"""
    # Caches filled once in the input dtype (cos_cached buffers) go stale when the model is cast or
    # called in another dtype; references: bug class 2 (stale tables).
    return _rope(CacheKeptFromFirstCall, c)


class TableWithoutBoundsCheck(SteppedRotary):
    """A cos/sin table of max_len rows, indexed directly."""

    def __init__(self, head_dim, *, base, max_len):
        super().__init__(head_dim, base=base)
        self.table_len = max_len

    def angles(self, positions, x):
        table = torch.arange(self.table_len, device=positions.device)
        return super().angles(table, x)[positions]  # IndexError past the end, naming no limit


@mutant("rope_interleaved", table_limited=True)
def rope_table_index_error_past_max_len(c):
    """a table of max_len positions that raises IndexError past its end, naming no limit"""
    # torchtune 0.6.1's RotaryPositionalEmbeddings past max_seq_len (its docstring promises a recomputed cache).
    return _rope(TableWithoutBoundsCheck, c, max_len=c.max_len)


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


@mutant("rope_interleaved")
def rope_cache_wraps_negative_positions(c):
    """negative positions or offsets accepted: the cache lookup wraps around to its last rows"""
    # references: bug class 5 (offsets and padding in KV-cache decoding: HF #22161, flashinfer #847);
    # a padded position of −1 reads the end of the table instead of failing.
    return _rope(CacheIndexedWithoutBoundsCheck, c, max_len=c.max_len)


# ============================================================ positions


class OffsetIgnored(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, 0)


@mutant("rope_interleaved")
def rope_offset_ignored(c):
    """the KV-cache offset is dropped: every decoding step starts again at position 0"""
    # references: bug class 5 (HF #22161, flashinfer #847, lucidrains rotary-embedding-torch #11).
    return _rope(OffsetIgnored, c)


class PerBatchPositionsIgnored(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset)[:1]  # row 0 broadcast over the batch


@mutant("rope_interleaved")
def rope_per_batch_positions_ignored(c):
    """per-sequence positions collapsed to the first sequence's"""
    # references: bug class 5; flash-attention and TransformerEngine test per-batch offsets for this.
    return _rope(PerBatchPositionsIgnored, c)


class PositionsStartAtOne(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) + 1


@mutant("rope_interleaved")
def rope_positions_start_at_one(c):
    """positions counted from 1 (position ids from attention_mask.cumsum(-1) without the − 1)"""
    # references: bug class 5 (position ids built from padding masks, HF #22161).
    return _rope(PositionsStartAtOne, c)


class PositionsTruncatedToSequence(SteppedRotary):
    def positions(self, x, positions, offset):
        if positions is not None:
            positions = positions[..., : x.shape[1]]  # the cos[:seq_len] idiom applied to position ids
        return super().positions(x, positions, offset)


@mutant("rope_interleaved")
def rope_positions_truncated_to_seq_len(c):
    """position ids longer than the sequence silently cut instead of rejected"""
    # references: bug class 5; a mismatched position tensor hides an upstream padding error.
    return _rope(PositionsTruncatedToSequence, c)


# ============================================================ q / k wiring


class PositionsPlusOne(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) + 1


class RotatesBackwards(SteppedRotary):
    def trig(self, angles):
        return angles.cos(), -angles.sin()


@mutant("rope_interleaved", protocol="pair")
def rope_k_position_off_by_one(c):
    """k encoded at p + 1 while q is at p"""
    # references: bug class 5: k written to the cache with the next step's position (HF #22161).
    return _placed(QAndK(SteppedRotary(c.head_dim, base=c.base), PositionsPlusOne(c.head_dim, base=c.base)), c)


@mutant("rope_interleaved", protocol="pair")
def rope_k_rotated_backwards(c):
    """k rotated by −p·θ (sign of sin flipped on the k path only)"""
    # references: bug class 8 (kernel wiring, Liger-Kernel #342, ColossalAI #6444): separate q and k
    # code paths that disagree.
    return _placed(QAndK(SteppedRotary(c.head_dim, base=c.base), RotatesBackwards(c.head_dim, base=c.base)), c)


@mutant("rope_interleaved", protocol="pair")
def rope_k_half_split_layout(c):
    """q in the interleaved layout, k in the half-split layout"""
    # references: bug class 4 (HF #25199, #39687; candle #3949): q and k converted with different conventions.
    return _placed(QAndK(RotaryEmbedding(c.head_dim, base=c.base, layout="interleaved"),
                          RotaryEmbedding(c.head_dim, base=c.base, layout="half_split")), c)


# ============================================================ the rotation itself


class SinCosSwapped(SteppedRotary):
    def trig(self, angles):
        return angles.sin(), angles.cos()


@mutant("rope_interleaved")
def rope_sin_cos_swapped(c):
    """sin and cos swapped when unpacking the cache"""
    # A (sin, cos) tuple unpacked as (cos, sin); position 0 then turns every pair by 90°.
    return _rope(SinCosSwapped, c)


@mutant("rope_interleaved")
def rope_base_ignores_config(c):
    """base hard-coded to 10000, the configured base ignored"""
    # TransformerEngine #849 (inv_freq hard-coded to 10k), candle #3746 (Yi's rope_theta 5e6 ignored).
    return _placed(SteppedRotary(c.head_dim, base=10000.0), c)


class LinearlySpacedFrequencies(SteppedRotary):
    def angles(self, positions, x):
        theta = 1 - torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device=positions.device) / self.rotary_dim
        return rotation_angles(positions, theta, angle_dtype(x.dtype), self.scaling_factor)


@mutant("rope_interleaved")
def rope_linear_frequency_schedule(c):
    """θ_i spaced linearly from 1 to 2/d instead of geometrically"""
    # 000 §3.2 / 004 §3.1 give θ_i = base^(−2i/d); RoFormer §3.4.3's long-term decay needs the geometric schedule.
    return _rope(LinearlySpacedFrequencies, c)


class FrequenciesFromHeadDim(SteppedRotary):
    """Partial rotary: rotates the first ``rotary_dim`` features, with θ computed from ``head_dim``."""

    def angles(self, positions, x):
        theta = posenc.inverse_frequencies(self.head_dim, self.base, dtype=torch.float64)[: self.rotary_dim // 2]
        return rotation_angles(positions, theta.to(positions.device), angle_dtype(x.dtype), self.scaling_factor)


PARTIAL_ROTARY = RotaryGeometry(rotary_fraction=0.5)


@mutant("rope_interleaved", geometry=PARTIAL_ROTARY)
def partial_rope_frequencies_from_head_dim(c):
    """partial rotary (first half of each head) with θ_i = base^(−2i/head_dim) instead of base^(−2i/rotary_dim)"""
    # references: bug class 6 (sglang #35096, maxtext #4616).
    return _rope(FrequenciesFromHeadDim, c, rotary_dim=PARTIAL_ROTARY.rotary_dim(c.head_dim))


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


@mutant("rope_interleaved")
def rope_backward_rotates_forward(c):
    """hand-written backward rotates the gradient by +p·θ instead of −p·θ"""
    # Fused kernels with their own backward (Liger-Kernel, TransformerEngine) are tested against
    # autograd for this reason (references: "How the strongest peers test RoPE").
    return _rope(BackwardRotatesForward, c)


class TrainableFrequencies(SteppedRotary):
    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.frequencies = nn.Parameter(self.inv_freq.clone())

    def angles(self, positions, x):
        return rotation_angles(positions, self.frequencies, angle_dtype(x.dtype), self.scaling_factor)


@mutant("rope_interleaved")
def rope_inv_freq_trainable(c):
    """inv_freq registered as an nn.Parameter: the optimizer moves the frequencies"""
    # A buffer turned into a parameter (or left in the optimizer's list) during a port; 004 §1.1
    # states RoPE has no trainable parameters.
    return _rope(TrainableFrequencies, c)


# ============================================================ input validation


class AcceptsIntegerInput(SteppedRotary):
    def check_input(self, x):
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        require_last_dim(x, self.head_dim, "head_dim")


@mutant("rope_interleaved")
def rope_accepts_integer_input(c):
    """integer input silently rotated in float32 and truncated back to integers"""
    # Token ids passed where embeddings belong run without error and return garbage.
    return _rope(AcceptsIntegerInput, c)


class NoRankCheck(SteppedRotary):
    def check_input(self, x):
        require_float(x)
        require_last_dim(x, self.head_dim, "head_dim")


@mutant("rope_interleaved")
def rope_without_rank_check(c):
    """input of the wrong rank broadcast instead of rejected"""
    # (batch, heads, seq, head_dim) vs (batch, seq, heads, head_dim) confusion (TransformerEngine's
    # sbhd/bshd layouts) goes unnoticed when shapes broadcast.
    return _rope(NoRankCheck, c)


class DivisibilityNotChecked(MultiHeadRotaryEmbedding):
    def __init__(self, d_model, n_heads, **rotary_options):
        nn.Module.__init__(self)
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = d_model // n_heads  # floors silently when d_model % n_heads != 0
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)


@mutant("rope_multihead")
def multihead_rope_without_divisibility_check(c):
    """d_model not divisible by the head count: head_dim floored instead of an error"""
    # 004 §8.1 asks for the check; without it the error surfaces later as a reshape failure, or never.
    return _placed(DivisibilityNotChecked(c.d_model, c.n_heads, base=c.base), c)


# ============================================================ position interpolation


class InterpolatedTwice(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) / self.scaling_factor  # the rotary divides again


@mutant("rope_linear_scaled")
def rope_linear_scaled_twice(c):
    """position interpolation applied twice: positions divided by s²"""
    # references: bug class 7 (a scaling applied twice or not at all: sglang #33558, mlx-lm #1507).
    return _rope(InterpolatedTwice, c, scaling_factor=4.0)


class AttentionFactorOnCosSin(SteppedRotary):
    def trig(self, angles):
        factor = 0.1 * math.log(self.scaling_factor) + 1  # YaRN's attention temperature
        return factor * angles.cos(), factor * angles.sin()


@mutant("rope_linear_scaled")
def rope_linear_scaled_with_attention_factor(c):
    """YaRN's attention factor 0.1·ln s + 1 folded into cos/sin of a linear-scaled RoPE"""
    # references: bug class 7 (YaRN attention scale applied where it does not belong: sglang #33558,
    # mlx-lm #1507); the rotation stops preserving norms.
    return _rope(AttentionFactorOnCosSin, c, scaling_factor=4.0)


# ============================================================ attention


class RotatesValues(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        return super().attend(q, k, self.rotary(v, positions, offset=offset), positions, offset=offset)


@mutant("attention_rope")
def attention_rotates_values(c):
    """V rotated along with q and k"""
    # 004 §3.3 rotates q and k only; flash-attention checks that V is left bit-identical.
    return _placed(RotatesValues(c.d_model, c.n_heads, base=c.base), c)


class SoftmaxOverQueries(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        return (scores.softmax(dim=-2) @ v.transpose(1, 2)).transpose(1, 2)


@mutant("attention_rope")
def attention_softmax_over_queries(c):
    """softmax taken over the query axis: columns sum to 1, rows do not"""
    # labmlai annotated_deep_learning_paper_implementations #146, PyTorch-NLP #2.
    return _placed(SoftmaxOverQueries(c.d_model, c.n_heads, base=c.base), c)


class ScaledByDModel(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        rescale = math.sqrt(self.head_dim / self.d_model)  # SDPA's 1/√d_k becomes 1/√d_model
        return super().attend(q * rescale, k, v, positions, offset=offset)


@mutant("attention_rope")
def attention_scaled_by_d_model(c):
    """scores scaled by 1/√d_model instead of 1/√d_k"""
    # brightmart/bert_language_understanding #9; 004 §4 scales by 1/√d_k.
    return _placed(ScaledByDModel(c.d_model, c.n_heads, base=c.base), c)


class CausalMaskOffByOne(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset) for t in (q, k))
        seq = q.shape[1]
        allowed = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril(diagonal=1)  # should be 0
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=allowed)
        return out.transpose(1, 2)


@mutant("attention_rope_causal")
def attention_causal_mask_off_by_one(c):
    """causal mask built with the wrong diagonal: each token also sees the next one"""
    # The tril/triu diagonal argument confused (0 vs 1); training loss looks excellent.
    return _placed(CausalMaskOffByOne(c.d_model, c.n_heads, base=c.base, causal=True), c)


class CausalFlagNotPassed(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset) for t in (q, k))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)  # self.causal is set, but is_causal never reaches the kernel


@mutant("attention_rope_causal")
def attention_declared_causal_without_mask(c):
    """a causal attention whose mask never reaches the kernel"""
    # kzl/decision-transformer #30: a padding mask taken for the causal mask; 004 §5.2 masks before softmax.
    return _placed(CausalFlagNotPassed(c.d_model, c.n_heads, base=c.base, causal=True), c)


# ============================================================ linear attention


class WithoutFeatureMap(LinearAttentionRoPE):
    """The feature map is defined but never applied: q, k enter the O(n) sums raw."""

    def __init__(self, d_model, n_heads, **rotary_options):
        super().__init__(d_model, n_heads, **rotary_options)
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)

    def attend(self, q, k, v, positions=None, *, offset=0):
        rot_q, rot_k = self.rotary(q, positions, offset=offset), self.rotary(k, positions, offset=offset)
        context = torch.einsum("bnhf,bnhe->bhfe", rot_k, v)
        numerator = torch.einsum("bnhf,bhfe->bnhe", rot_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", q, k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope")
def linear_attention_without_feature_map(c):
    """linear attention with RoPE that drops the positive feature map φ"""
    # 000 §5.2's class never defines part of its pipeline; without φ the normaliser can vanish or change sign.
    return _placed(WithoutFeatureMap(c.d_model, c.n_heads, base=c.base), c)


class KeysNotRotated(LinearAttentionRoPE):
    def attend(self, q, k, v, positions=None, *, offset=0):
        phi_q, phi_k = F.elu(self.feature_map(q)) + 1, F.elu(self.feature_map(k)) + 1
        rot_q = self.rotary(phi_q, positions, offset=offset)
        context = torch.einsum("bnhf,bnhe->bhfe", phi_k, v)  # k never rotated
        numerator = torch.einsum("bnhf,bhfe->bnhe", rot_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", phi_q, phi_k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope")
def linear_attention_k_unrotated(c):
    """linear attention that rotates φ(q) but not φ(k)"""
    # references: bug class 8 (k left unrotated: Liger-Kernel #342, ColossalAI #6444).
    return _placed(KeysNotRotated(c.d_model, c.n_heads, base=c.base), c)


# ============================================================ dynamic and hybrid


@mutant("dynamic")
def dynamic_mix_half_half(c):
    """dynamic encoding mixing base and scaled rotations 0.5 : 0.5 instead of 0.7 : 0.3"""
    # 000 §5.3 fixes the mix at 0.7 : 0.3; a default of equal weights is the usual drift.
    return _placed(DynamicPositionalEncoding(c.head_dim, c.max_len, base=c.base, mix=(0.5, 0.5),
                                             initial_scale=1.25), c)


class ScaleReadAsNumber(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = pos.to(angle_dtype(x.dtype)) * self.dynamic_scale.item()  # .item() cuts the graph
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, scaled)


class ScaledPositionsRounded(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = (pos.to(angle_dtype(x.dtype)) * self.dynamic_scale).round()  # round() has zero gradient
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, scaled)


@mutant("dynamic")
def dynamic_scaled_positions_rounded(c):
    """s·p rounded to whole positions so it can index the sin/cos cache: s gets a zero gradient"""
    # 000 §5.3 passes s·p where a cache lookup wants integers; rounding makes the learned scale a step function.
    return _placed(ScaledPositionsRounded(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)


@mutant("dynamic")
def dynamic_scale_read_with_item(c):
    """the learned scale read with .item(): s never receives a gradient"""
    # 000 §5.3 learns s; a Python float taken from a parameter detaches it from autograd.
    return _placed(ScaleReadAsNumber(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)


class TableNeverAdded(HybridPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        return self.rotary(x, pos)


@mutant("hybrid")
def hybrid_table_never_added(c):
    """the hybrid's learnable table never reaches the output"""
    # 000 §5.1's snippet refers to an attribute that does not exist; deleting that line leaves plain RoPE.
    return _placed(TableNeverAdded(c.d_model, c.n_heads, c.max_len, base=c.base), c)


# ============================================================ absolute encodings


class ClampsPastTable(LearnablePositionalEmbedding):
    def lookup(self, positions):
        return self.table[positions.long().clamp(max=self.max_len - 1)]


@mutant("learnable")
def learnable_clamps_past_max_len(c):
    """learnable table clamps positions past max_len to its last row instead of raising"""
    # references: bug class 2: the usual "fix" for "index out of range in self" (HF #5611).
    return _placed(ClampsPastTable(c.max_len, c.d_model), c)


class FrozenTable(LearnablePositionalEmbedding):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        table = self.table.detach()
        del self.table
        self.register_buffer("table", table)  # a buffer never trains


@mutant("learnable")
def learnable_table_frozen(c):
    """learnable table registered as a buffer: it never trains"""
    # 000 §2.1 trains the table; a buffer is saved and moved like a parameter, so nothing looks wrong.
    return _placed(FrozenTable(c.max_len, c.d_model), c)


class SinusoidalSinCosSwapped(SinusoidalPositionalEncoding):
    def table(self, positions, dtype=torch.float32):
        rows = super().table(positions, dtype)
        return torch.stack((rows[..., 1::2], rows[..., 0::2]), dim=-1).flatten(-2)


@mutant("sinusoidal")
def sinusoidal_sin_cos_swapped(c):
    """sinusoidal table with cos in the even columns and sin in the odd ones"""
    # 000 §2.2 puts sin at 2i and cos at 2i+1; tensor2tensor-style [sin…, cos…] ports mix the two orders.
    return _placed(SinusoidalSinCosSwapped(c.d_model, base=c.base), c)


class SinusoidalAnglesInBf16(SinusoidalPositionalEncoding):
    def table(self, positions, dtype=torch.float32):
        angles = positions.to(torch.bfloat16).unsqueeze(-1) * self.inv_freq.to(torch.bfloat16)
        angles = angles.to(angle_dtype(dtype))
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


@mutant("sinusoidal")
def sinusoidal_table_in_bf16(c):
    """sinusoidal angles p·θ formed in bfloat16"""
    # references: bug class 1, the same precision loss as in RoPE's angles (HF PR #29285).
    return _placed(SinusoidalAnglesInBf16(c.d_model, base=c.base), c)


class SinusoidalStoredTable(SinusoidalPositionalEncoding):
    """The original Transformer's buffer of max_len precomputed rows, computed past it."""

    def __init__(self, d_model, max_len, **options):
        super().__init__(d_model, **options)
        self.max_len = max_len
        self.register_buffer("pe", super().table(torch.arange(max_len), torch.float64))

    def table(self, positions, dtype=torch.float32):
        stored = self.pe[positions.clamp(max=self.max_len - 1)].to(angle_dtype(dtype))
        return torch.where((positions < self.max_len).unsqueeze(-1), stored, super().table(positions, dtype))


@mutant("sinusoidal")
def sinusoidal_precomputed_table(c):
    """sinusoidal encoding stored as a max_len × d_model buffer"""
    # The Annotated Transformer / PyTorch tutorial register_buffer("pe") pattern: memory grows with
    # max_len, against 000 §2.2's "low" memory claim.
    return _placed(SinusoidalStoredTable(c.d_model, c.max_len, base=c.base), c)


class SinusoidalOffsetIgnored(SinusoidalPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        return super().forward(x, positions)


@mutant("sinusoidal")
def sinusoidal_offset_ignored(c):
    """sinusoidal encoding that drops the decoding offset: every step is encoded at position 0"""
    # references: bug class 5 (offsets in KV-cache decoding, HF #22161).
    return _placed(SinusoidalOffsetIgnored(c.d_model, base=c.base), c)


# ============================================================ specs that once could not fail (000/004 review)


class ReadsNextRow(LearnablePositionalEmbedding):
    def lookup(self, positions):
        table = super().lookup(positions)  # validates the positions
        return self.table[(positions.long() + 1) % self.max_len].to(table.dtype)


@mutant("learnable")
def learnable_reads_next_row(c):
    """learnable table read one row late: x + E[(p + 1) mod max_len]"""
    # Passed an ABS-1 check that compared the module with itself; caught against the parameter's row E[p].
    return _placed(ReadsNextRow(c.max_len, c.d_model), c)


class LinearAttentionWithoutRotation(LinearAttentionRoPE):
    def attend(self, q, k, v, positions=None, *, offset=0):
        resolve_positions(q.shape[0], q.shape[1], positions, offset, q.device)  # validated, then unused
        phi_q, phi_k = F.elu(self.feature_map(q)) + 1, F.elu(self.feature_map(k)) + 1
        context = torch.einsum("bnhf,bnhe->bhfe", phi_k, v)
        numerator = torch.einsum("bnhf,bhfe->bnhe", phi_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", phi_q, phi_k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope")
def linear_attention_without_rotation(c):
    """linear attention with the rotation removed: shift invariant because it ignores positions"""
    # Passed LIN-2's shift-invariance spec; caught by its position-awareness check.
    return _placed(LinearAttentionWithoutRotation(c.d_model, c.n_heads, base=c.base), c)


class Identity(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.head_dim = head_dim

    def forward(self, x, positions=None, *, offset=0):
        require_float(x)
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)  # validated, then unused
        return x.clone()


@mutant("rope_interleaved")
def rope_ignoring_positions(c):
    """a "RoPE" that validates its positions and returns x unchanged"""
    # Passed ROPE-4's invariance (⟨x_m, y_n⟩ depends on no position at all) and ATT-4's; caught by the
    # position-awareness checks added to both. ROPE-3 holds: the identity keeps norms.
    return _placed(Identity(c.head_dim), c)


class WrapsEvery1024(SteppedRotary):
    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) % 1024


@mutant("rope_interleaved")
def rope_positions_wrap_every_1024(c):
    """a 1024-row table read modulo its length: positions wrap"""
    # Passed pinned shifts that are multiples of a power of two (4096); caught at strides 70 and 9001.
    return _rope(WrapsEvery1024, c)


class TurnsBackwards(SteppedRotary):
    def trig(self, angles):
        return angles.cos(), -angles.sin()


@mutant("rope_concatenated")
def rope_concatenated_turning_backwards(c):
    """004 §3.2's [even, odd] output layout with each pair turned by −p·θ"""
    # ROPE-13's subjects now are 004's code alone; this keeps its permutation spec able to fail.
    return _rope(TurnsBackwards, c, layout="concatenated")


# ============================================================ ALiBi (the length experiment's baseline)


class BiasOfQueryPosition(ALiBiBias):
    def forward(self, q_positions, k_positions=None, *, dtype=torch.float32):
        bias = super().forward(q_positions, k_positions, dtype=dtype)
        q = q_positions.to(dtype)
        return bias - 1e-3 * self.slopes.to(dtype)[:, None, None] * q[None, :, None]  # a term in m alone


@mutant("alibi")
def alibi_bias_depends_on_the_query_position(c):
    """ALiBi with a small extra term in the query's absolute position"""
    return _placed(BiasOfQueryPosition(c.n_heads), c)


@mutant("alibi")
def alibi_without_causal_mask(c):
    """ALiBi built non-causal: −m_h·|m − n| and no mask on later keys"""
    # The non-causal (encoder) variant of the authors' code used in a decoder.
    return _placed(ALiBiBias(c.n_heads, causal=False), c)


class SlopesOneOverHead(ALiBiBias):
    def __init__(self, n_heads):
        super().__init__(n_heads)
        self.slopes = 1.0 / torch.arange(1, n_heads + 1, dtype=torch.float64)

    def _apply(self, fn, *args, **kwargs):
        return nn.Module._apply(self, fn, *args, **kwargs)


@mutant("alibi")
def alibi_slopes_one_over_head(c):
    """ALiBi with slopes 1/h instead of the paper's geometric 2^(−8h/n)"""
    return _placed(SlopesOneOverHead(c.n_heads), c)


class BiasWithoutChecks(ALiBiBias):
    def forward(self, q_positions, k_positions=None, *, dtype=torch.float32):
        q = q_positions.reshape(-1).to(torch.float64)
        k = q if k_positions is None else k_positions.reshape(-1).to(torch.float64)
        distance = q[:, None] - k[None, :]
        bias = -self.slopes[:, None, None] * distance
        return bias.masked_fill(distance < 0, float("-inf")).to(dtype)


@mutant("alibi")
def alibi_positions_unchecked(c):
    """ALiBi that flattens any positions and accepts fractional and negative ones"""
    return _placed(BiasWithoutChecks(c.n_heads), c)


# ============================================================ what must kill each mutant

_VALUE_WRONG = "the rotation's value is wrong, so every claim about it fails: the formula (ROPE-1, ROPE-8)"
_RELATIVE = "logits depend on absolute positions: ROPE-4 and its consequences far out (ROPE-10a), in half precision (ROPE-11) and in attention (ATT-4)"

#: The claims each mutant fails: exactly these (tests/test_mutants.py). Where a set holds more than
#: the defect's own claim, :data:`WHY` says which other claims the mathematics forces to fail.
EXPECTED_CLAIMS: dict[str, set[str]] = {
    "rope_half_split_cache_on_interleaved_pairs": {
        "ROPE-1", "ROPE-2", "ROPE-3", "ROPE-4", "ROPE-8", "ROPE-10a", "ROPE-11", "ATT-4"},
    "rope_concatenated_on_q_only": {"ROPE-1", "ROPE-13", "ROPE-4", "ROPE-10a", "ROPE-11", "ATT-4"},
    "multihead_rope_angles_from_d_model": {"ROPE-7", "ROPE-2", "ROPE-1", "ROPE-8"},
    "hybrid_rotating_across_heads": {"ROPE-7"},
    "dynamic_scaled_positions_never_reach_rotation": {"DYN-1", "DYN-2", "DYN-3"},
    "rope_angles_in_bf16": {"ROPE-11", "ROPE-4", "ROPE-1", "ROPE-8"},
    "rope_angles_in_fp16": {"ROPE-11", "ROPE-4", "ROPE-1", "ROPE-8"},
    "rope_output_in_angle_dtype": {"contract"},
    "rope_cache_truncated_past_max_len": {"ROPE-1", "ROPE-8", "ROPE-4", "ROPE-10a", "ROPE-11", "ATT-4"},
    "rope_cache_identity_past_max_len": {"ROPE-1", "ROPE-8", "ROPE-4", "ROPE-10a", "ROPE-11", "ATT-4"},
    "rope_cache_kept_from_first_dtype": {"ROPE-9"},
    "rope_cache_wraps_negative_positions": {"contract"},
    "rope_table_index_error_past_max_len": {"contract"},
    "rope_offset_ignored": {"PATH-1", "PATH-2", "contract"},
    "rope_per_batch_positions_ignored": {"ROPE-1", "ROPE-4"},
    "rope_positions_start_at_one": {"ROPE-1", "ROPE-8"},
    "rope_positions_truncated_to_seq_len": {"contract"},
    "rope_k_position_off_by_one": {"ROPE-1"},
    "rope_k_rotated_backwards": {"ROPE-1", "ROPE-4", "ROPE-10a", "ROPE-11", "ATT-4"},
    "rope_k_half_split_layout": {"ROPE-1", "ROPE-4", "ROPE-10a", "ROPE-11", "ATT-4"},
    "rope_sin_cos_swapped": {"ROPE-1", "ROPE-2", "ROPE-8"},
    "rope_base_ignores_config": {"ROPE-2"},
    "rope_linear_frequency_schedule": {"ROPE-2", "ROPE-1", "ROPE-8"},
    "partial_rope_frequencies_from_head_dim": {"ROPE-2", "ROPE-1", "ROPE-8"},
    "rope_backward_rotates_forward": {"contract"},
    "rope_inv_freq_trainable": {"ROPE-5", "PATH-3", "ROPE-1", "ROPE-8"},
    "rope_accepts_integer_input": {"contract"},
    "rope_without_rank_check": {"contract"},
    "multihead_rope_without_divisibility_check": {"ATT-5"},
    "rope_linear_scaled_twice": {"ROPE-14", "ROPE-2", "ROPE-1", "ROPE-8"},
    "rope_linear_scaled_with_attention_factor": {
        "ROPE-3", "ROPE-10a", "ROPE-11", "ROPE-14", "ROPE-1", "ROPE-8"},
    "attention_rotates_values": {"ROPE-6", "ATT-1", "ATT-2", "ATT-4"},
    "attention_softmax_over_queries": {"ATT-2", "ATT-1"},
    "attention_scaled_by_d_model": {"ATT-2", "ATT-1"},
    "attention_causal_mask_off_by_one": {"ATT-3", "ATT-1", "ATT-2"},
    "attention_declared_causal_without_mask": {"ATT-3", "ATT-1", "ATT-2"},
    "linear_attention_without_feature_map": {"LIN-2"},
    "linear_attention_k_unrotated": {"LIN-2"},
    "dynamic_mix_half_half": {"DYN-3", "DYN-1"},
    "dynamic_scaled_positions_rounded": {"DYN-2", "DYN-1"},
    "dynamic_scale_read_with_item": {"DYN-2"},
    "hybrid_table_never_added": {"ABS-2"},
    "learnable_clamps_past_max_len": {"ABS-2"},
    "learnable_table_frozen": {"ABS-1"},
    "sinusoidal_sin_cos_swapped": {"ABS-3", "ABS-4"},
    "sinusoidal_table_in_bf16": {"ABS-3", "ABS-4"},
    "sinusoidal_precomputed_table": {"ABS-6"},
    "sinusoidal_offset_ignored": {"ABS-5", "contract"},
    "learnable_reads_next_row": {"ABS-1"},
    "linear_attention_without_rotation": {"LIN-2"},
    "rope_ignoring_positions": {"ROPE-1", "ROPE-2", "ROPE-4", "ROPE-8", "ATT-4"},
    "rope_positions_wrap_every_1024": {"ROPE-1", "ROPE-4", "ROPE-8"},
    "rope_concatenated_turning_backwards": {"ROPE-1", "ROPE-2", "ROPE-8", "ROPE-13"},
    "alibi_bias_depends_on_the_query_position": {"ALIBI-1"},
    "alibi_without_causal_mask": {"ALIBI-2"},
    "alibi_slopes_one_over_head": {"ALIBI-3"},
    "alibi_positions_unchecked": {"contract"},
}

#: Why a set holds more than one claim.
WHY: dict[str, str] = {
    "rope_half_split_cache_on_interleaved_pairs": "one angle per coordinate, not per pair: the map is not a "
    "rotation of pairs at all, so every rotary claim with a value fails (frequencies, norm, offsets, formula)",
    "rope_concatenated_on_q_only": "k is not in the declared layout (ROPE-1, ROPE-13), and q and k in two layouts "
    "make " + _RELATIVE,
    "multihead_rope_angles_from_d_model": "heads get different angles (ROPE-7) that are not base^(−2i/d) (ROPE-2); "
    + _VALUE_WRONG,
    "dynamic_scaled_positions_never_reach_rotation": "the scaled positions, the scale's gradient and the mix "
    "are three statements of 000 §5.3, and all three need s·p to reach the rotation",
    "rope_angles_in_bf16": "positions and angles rounded in bf16 break half precision (ROPE-11) and the offsets it "
    "rounds (ROPE-4 in bf16); " + _VALUE_WRONG + " in bf16",
    "rope_angles_in_fp16": "as in bf16, past fp16's 2048 exact integers",
    "rope_cache_truncated_past_max_len": "past max_len the map is not R_p: " + _VALUE_WRONG + ", and " + _RELATIVE
    + ". A fresh module is as wrong as a used one, so ROPE-9 (fresh against used) cannot see it",
    "rope_cache_identity_past_max_len": "as the truncated cache",
    "rope_offset_ignored": "decoding goes through the offset path (PATH-2), and a negative offset is silently "
    "ignored (the contract's silent garbage)",
    "rope_per_batch_positions_ignored": "rows other than the first are rotated at the wrong positions (ROPE-1), so "
    "their logits follow the first row's offsets (ROPE-4)",
    "rope_positions_start_at_one": "f(x, p) = R_(p+1) x: " + _VALUE_WRONG + "; offsets and θ (a rate) hold",
    "rope_k_rotated_backwards": "k's side is not R_n k (ROPE-1, ROPE-13), and " + _RELATIVE,
    "rope_k_half_split_layout": "k's side is not in the declared layout (ROPE-1, ROPE-13), and " + _RELATIVE,
    "rope_sin_cos_swapped": "the map turns by π/2 − pθ: backwards, at the rate −θ (ROPE-2); " + _VALUE_WRONG,
    "rope_linear_frequency_schedule": "θ is wrong (ROPE-2); " + _VALUE_WRONG,
    "partial_rope_frequencies_from_head_dim": "θ over head_dim, not the rotated width (ROPE-2); " + _VALUE_WRONG,
    "rope_inv_freq_trainable": "θ is a parameter (ROPE-5), so module.to(bfloat16) rounds it (PATH-3) and, in half "
    "precision, " + _VALUE_WRONG,
    "rope_linear_scaled_twice": "positions divided by s² (ROPE-14); indistinguishable from θ/s (ROPE-2); "
    + _VALUE_WRONG,
    "rope_linear_scaled_with_attention_factor": "an undeclared scale: norms change (ROPE-3, and where ROPE-10a and "
    "ROPE-11 check them), the map is not RoPE at p/s (ROPE-14); " + _VALUE_WRONG,
    "attention_rotates_values": "v rotated (ROPE-6): the output is not plain attention on unrotated v (ATT-1), "
    "the weights read through v = I do not sum to 1 (ATT-2), and rotated values carry absolute positions (ATT-4)",
    "attention_softmax_over_queries": "the weights are wrong (ATT-2), so the output is not plain attention (ATT-1)",
    "attention_scaled_by_d_model": "the scale is wrong (ATT-2), so the output is not plain attention (ATT-1)",
    "attention_causal_mask_off_by_one": "a later token is attended (ATT-3): the weights (ATT-2) and the output "
    "(ATT-1) are not those of masked attention",
    "attention_declared_causal_without_mask": "as the mask off by one",
    "dynamic_mix_half_half": "the 0.5 : 0.5 mix is the wrong formula (DYN-3) at any positions (DYN-1)",
    "dynamic_scaled_positions_rounded": "rounding s·p cuts the gradient (DYN-2) and moves the positions (DYN-1)",
    "sinusoidal_sin_cos_swapped": "the table is not the formula (ABS-3), near or far (ABS-4)",
    "sinusoidal_table_in_bf16": "a bf16 table is not the formula (ABS-3), near or far (ABS-4)",
    "rope_ignoring_positions": "no rotation at all: the formula (ROPE-1, ROPE-8) and θ (ROPE-2) fail, and no "
    "position reaches the logits (ROPE-4's and ATT-4's awareness checks); the far-position checks compare the "
    "encoder with itself, and an identity agrees with itself everywhere",
    "rope_concatenated_turning_backwards": "R_(−p) in the declared layout: not the formula (ROPE-1, ROPE-8), not "
    "the formula up to 004's permutation (ROPE-13), at the rate −θ (ROPE-2); offsets and norms hold",
    "rope_positions_wrap_every_1024": "past 1024 the map is R_(p mod 1024): " + _VALUE_WRONG + ", and a batch "
    "whose rows sit 9001 or 70 apart (no power of two) straddles the wrap: ROPE-4",
    "sinusoidal_offset_ignored": "the offset path ignores the offset (ABS-5's shifted logits), and a negative "
    "offset is silently ignored (the contract's silent garbage)",
}

# Mutants no spec can kill yet, and the check that is missing.
KNOWN_SURVIVORS: dict[str, str] = {}

for _record in MUTANTS:
    posenc.register(_record)
