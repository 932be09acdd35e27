"""Mutant encoders: each reproduces one known defect, so that the specs can show they catch it.

A plug-in file, loaded only on request::

    pytest specs --plugin tests/mutants.py --encoders <mutant names>

Every mutant is the record of the correct design it imitates, with a broken ``build``: it keeps
that design's declarations, so a spec that catches the defect reports the claim as
"unexpectedly failing" with a ``ClaimViolation`` (a kill). A crash is not a kill.

``EXPECTED_KILLS`` names the spec functions that must kill each mutant. ``KNOWN_SURVIVORS``
lists mutants that no spec can kill yet, with the missing check.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc import (
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


class QThenK(nn.Module):
    """q and k through different code paths: calls alternate q, k, q, k (specs encode q before k)."""

    def __init__(self, q_encoder: nn.Module, k_encoder: nn.Module):
        super().__init__()
        self.q_encoder, self.k_encoder = q_encoder, k_encoder
        self.head_dim = q_encoder.head_dim
        self.calls = 0

    def forward(self, x, positions=None, *, offset=0):
        encoder = self.k_encoder if self.calls % 2 else self.q_encoder
        self.calls += 1
        return encoder(x, positions, offset=offset)


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


@mutant("rope_concatenated")
def rope_concatenated_on_q_only(c):
    """004 §3.2: q written in the concatenated layout, k in the formula's interleaved layout"""
    # 004 §3.2's real-valued code used for one projection only; the same q/k layout split appears when
    # half of a checkpoint is converted (HF #25199).
    return _placed(QThenK(RotaryEmbedding(c.head_dim, base=c.base, layout="concatenated"),
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


@mutant("rope_interleaved")
def rope_k_position_off_by_one(c):
    """k encoded at p + 1 while q is at p"""
    # references: bug class 5: k written to the cache with the next step's position (HF #22161).
    return _placed(QThenK(SteppedRotary(c.head_dim, base=c.base), PositionsPlusOne(c.head_dim, base=c.base)), c)


@mutant("rope_interleaved")
def rope_k_rotated_backwards(c):
    """k rotated by −p·θ (sign of sin flipped on the k path only)"""
    # references: bug class 8 (kernel wiring, Liger-Kernel #342, ColossalAI #6444): separate q and k
    # code paths that disagree.
    return _placed(QThenK(SteppedRotary(c.head_dim, base=c.base), RotatesBackwards(c.head_dim, base=c.base)), c)


@mutant("rope_interleaved")
def rope_k_half_split_layout(c):
    """q in the interleaved layout, k in the half-split layout"""
    # references: bug class 4 (HF #25199, #39687; candle #3949): q and k converted with different conventions.
    return _placed(QThenK(RotaryEmbedding(c.head_dim, base=c.base, layout="interleaved"),
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


# ============================================================ what must kill each mutant

EXPECTED_KILLS: dict[str, set[str]] = {
    "rope_half_split_cache_on_interleaved_pairs": {
        "test_rotation_matches_the_formula_with_per_batch_positions", "test_rotation_preserves_norm",
        "test_equals_complex_multiplication", "test_output_is_a_fixed_permutation_of_the_formula",
    },
    "rope_concatenated_on_q_only": {
        "test_logits_depend_only_on_offset", "test_shared_layout_scores_match_the_formula",
        "test_attention_is_shift_invariant", "test_relative_offset_and_norm_hold_far_past_any_table",
    },
    "multihead_rope_angles_from_d_model": {
        "test_every_head_gets_the_same_head_dim_rotation", "test_rotation_matches_the_formula_with_per_batch_positions",
        "test_equals_complex_multiplication", "test_frequencies_follow_the_formula",
    },
    "hybrid_rotating_across_heads": {"test_hybrid_rotation_alone_is_per_head_rope"},
    "dynamic_scaled_positions_never_reach_rotation": {
        "test_non_contiguous_positions_follow_the_formula", "test_mix_weights_and_scale_one_gives_the_base",
    },
    "rope_angles_in_bf16": {"test_half_precision_keeps_relative_offset"},
    "rope_angles_in_fp16": {"test_half_precision_keeps_relative_offset"},
    "rope_output_in_angle_dtype": {"test_output_keeps_shape_dtype_device"},
    "rope_cache_truncated_past_max_len": {
        "test_cache_changes_no_result", "test_relative_offset_and_norm_hold_far_past_any_table",
        "test_logits_depend_only_on_offset", "test_rotation_matches_the_formula_with_per_batch_positions",
    },
    "rope_cache_identity_past_max_len": {
        "test_cache_changes_no_result", "test_relative_offset_and_norm_hold_far_past_any_table",
        "test_logits_depend_only_on_offset", "test_rotation_matches_the_formula_with_per_batch_positions",
        "test_half_precision_keeps_relative_offset",
    },
    "rope_cache_wraps_negative_positions": {"test_rejects_negative_positions"},
    "rope_offset_ignored": {
        "test_cache_changes_no_result", "test_output_is_a_fixed_permutation_of_the_formula",
        "test_every_head_gets_the_same_head_dim_rotation", "test_backward_is_the_inverse_rotation",
    },
    "rope_per_batch_positions_ignored": {
        "test_rotation_matches_the_formula_with_per_batch_positions", "test_cache_changes_no_result",
    },
    "rope_positions_start_at_one": {
        "test_position_zero_is_the_identity", "test_rotations_compose",
        "test_two_dimensional_rotation_is_the_explicit_matrix",
    },
    "rope_positions_truncated_to_seq_len": {"test_rejects_positions_of_wrong_shape"},
    "rope_k_position_off_by_one": {
        "test_shared_layout_scores_match_the_formula", "test_relative_offset_and_norm_hold_far_past_any_table",
        "test_half_precision_keeps_relative_offset",
    },
    "rope_k_rotated_backwards": {
        "test_logits_depend_only_on_offset", "test_attention_is_shift_invariant",
        "test_shared_layout_scores_match_the_formula", "test_relative_offset_and_norm_hold_far_past_any_table",
    },
    "rope_k_half_split_layout": {
        "test_logits_depend_only_on_offset", "test_shared_layout_scores_match_the_formula",
        "test_attention_is_shift_invariant", "test_relative_offset_and_norm_hold_far_past_any_table",
    },
    "rope_sin_cos_swapped": {
        "test_two_dimensional_rotation_is_the_explicit_matrix", "test_position_zero_is_the_identity",
        "test_rotation_matches_the_formula_with_per_batch_positions", "test_equals_complex_multiplication",
    },
    "rope_base_ignores_config": {"test_frequencies_follow_the_formula"},
    "rope_linear_frequency_schedule": {
        "test_long_term_decay_of_the_roformer_bound", "test_frequencies_follow_the_formula",
    },
    "partial_rope_frequencies_from_head_dim": {
        "test_rotation_matches_the_formula_with_per_batch_positions", "test_equals_complex_multiplication",
        "test_output_is_a_fixed_permutation_of_the_formula", "test_cache_changes_no_result",
        "test_frequencies_follow_the_formula",
    },
    "rope_cache_kept_from_first_dtype": {"test_one_module_serves_every_dtype"},
    "rope_backward_rotates_forward": {"test_gradcheck_in_float64", "test_backward_is_the_inverse_rotation"},
    "rope_inv_freq_trainable": {"test_rotary_has_no_trainable_parameters"},
    "rope_accepts_integer_input": {"test_rejects_non_float_input"},
    "rope_without_rank_check": {"test_rejects_wrong_rank"},
    "multihead_rope_without_divisibility_check": {"test_d_model_not_divisible_by_heads_is_a_clear_error"},
    "rope_linear_scaled_twice": {
        "test_scaled_position_equals_plain_rope_at_p_over_s", "test_frequencies_follow_the_formula",
        "test_rotation_matches_the_formula_with_per_batch_positions",
    },
    "rope_linear_scaled_with_attention_factor": {
        "test_rotation_preserves_norm", "test_rotation_matrix_is_orthogonal",
        "test_scaled_position_equals_plain_rope_at_p_over_s",
    },
    "attention_rotates_values": {
        "test_values_are_not_rotated", "test_equals_plain_attention_on_rotated_q_k",
        "test_attention_rows_sum_to_one", "test_attention_is_shift_invariant",
    },
    "attention_softmax_over_queries": {"test_attention_rows_sum_to_one", "test_equals_plain_attention_on_rotated_q_k"},
    "attention_scaled_by_d_model": {"test_equals_plain_attention_on_rotated_q_k"},
    "attention_causal_mask_off_by_one": {
        "test_causal_outputs_ignore_later_tokens", "test_equals_plain_attention_on_rotated_q_k",
    },
    "attention_declared_causal_without_mask": {
        "test_causal_outputs_ignore_later_tokens", "test_equals_plain_attention_on_rotated_q_k",
    },
    "linear_attention_without_feature_map": {"test_linear_form_equals_the_quadratic_formula"},
    "linear_attention_k_unrotated": {
        "test_linear_form_equals_the_quadratic_formula", "test_linear_attention_is_shift_invariant",
        "test_attention_is_shift_invariant",
    },
    "dynamic_mix_half_half": {
        "test_mix_weights_and_scale_one_gives_the_base", "test_non_contiguous_positions_follow_the_formula",
    },
    "dynamic_scaled_positions_rounded": {
        "test_scale_is_trainable_and_gets_the_right_gradient", "test_non_contiguous_positions_follow_the_formula",
    },
    "dynamic_scale_read_with_item": {"test_scale_is_trainable_and_gets_the_right_gradient"},
    "hybrid_table_never_added": {
        "test_hybrid_inherits_table_limit_and_loses_shift_invariance", "test_positions_past_the_table_raise",
    },
    "learnable_clamps_past_max_len": {"test_positions_past_the_table_raise"},
    "learnable_table_frozen": {"test_learnable_adds_a_trainable_table_row"},
    "sinusoidal_sin_cos_swapped": {
        "test_sinusoidal_formula_and_bounds", "test_sinusoidal_is_defined_far_past_any_table",
    },
    "sinusoidal_table_in_bf16": {
        "test_sinusoidal_dot_product_depends_only_on_offset", "test_sinusoidal_shift_is_a_fixed_linear_map",
        "test_sinusoidal_formula_and_bounds",
    },
    "sinusoidal_precomputed_table": {"test_table_memory_against_max_len"},
    "sinusoidal_offset_ignored": {"test_absolute_logits_are_not_translation_invariant"},
}

# Mutants no spec can kill yet, and the check that is missing.
KNOWN_SURVIVORS: dict[str, str] = {}

for _record in MUTANTS:
    posenc.register(_record)
