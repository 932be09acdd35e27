"""Defects that specs once could not see (the 000/004 review): each keeps a spec able to fail."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc import LearnablePositionalEmbedding, LinearAttentionRoPE
from posenc import angle_dtype
from posenc.encoders.positions import resolve_positions, rotation_angles
from posenc.encoders.validation import require_float, require_rank

from ._scaffold import mutant, placed, QAndK, rope, SteppedRotary, VALUE_WRONG


class ReadsNextRow(LearnablePositionalEmbedding):
    def lookup(self, positions):
        table = super().lookup(positions)  # validates the positions
        return self.table[(positions.long() + 1) % self.max_len].to(table.dtype)


@mutant("learnable", fails={"ABS-1"})
def learnable_reads_next_row(c):
    """learnable table read one row late: x + E[(p + 1) mod max_len]"""
    # Passed an ABS-1 check that compared the module with itself; caught against the parameter's row E[p].
    return placed(ReadsNextRow(c.max_len, c.d_model), c)


class WrongRowAtEvenPositions(LearnablePositionalEmbedding):
    def lookup(self, positions):
        table = super().lookup(positions)  # validates the positions
        late = (positions % 2 == 0) & (positions > 0)
        shifted = torch.where(late, positions + 1, positions).clamp_max(self.max_len - 1)
        return self.table[shifted.long()].to(table.dtype)


@mutant("learnable", fails={"ABS-1"})
def learnable_wrong_row_at_even_positions(c):
    """learnable table read one row late at every even position after 0"""
    # Passed an ABS-1 check that read rows 0, 5, 37 and 127 only; caught now that every row is read.
    return placed(WrongRowAtEvenPositions(c.max_len, c.d_model), c)


class LinearAttentionWithoutRotation(LinearAttentionRoPE):
    def attend(self, q, k, v, positions=None, *, offset=0):
        resolve_positions(q.shape[0], q.shape[1], positions, offset, q.device)  # validated, then unused
        phi_q, phi_k = F.elu(self.feature_map(q)) + 1, F.elu(self.feature_map(k)) + 1
        context = torch.einsum("bnhf,bnhe->bhfe", phi_k, v)
        numerator = torch.einsum("bnhf,bhfe->bnhe", phi_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", phi_q, phi_k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope", fails={"LIN-2"})
def linear_attention_without_rotation(c):
    """linear attention with the rotation removed: shift invariant because it ignores positions"""
    # Passed LIN-2's shift-invariance spec; caught by its position-awareness check.
    return placed(LinearAttentionWithoutRotation(c.d_model, c.n_heads, base=c.base), c)


class Identity(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.head_dim = head_dim

    def forward(self, x, positions=None, *, offset=0):
        require_float(x)
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)  # validated, then unused
        return x.clone()


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-2", "ROPE-4", "ATT-4"},
    why="no rotation at all: the formula (ROPE-1) and θ (ROPE-2) fail (the complex form at its own θ, 0, holds: "
    "ROPE-8), and no "
    "position reaches the logits (ROPE-4's and ATT-4's awareness checks); the far-position checks compare the "
    "encoder with itself, and an identity agrees with itself everywhere",
)
def rope_ignoring_positions(c):
    """a "RoPE" that validates its positions and returns x unchanged"""
    # Passed ROPE-4's invariance (⟨x_m, y_n⟩ depends on no position at all) and ATT-4's; caught by the
    # position-awareness checks added to both. ROPE-3 holds: the identity keeps norms.
    return placed(Identity(c.head_dim), c)


class WrapsEvery(SteppedRotary):
    """Positions read modulo a table's length ``period``."""

    def __init__(self, head_dim, *, period: int, **options):
        super().__init__(head_dim, **options)
        self.period = period

    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset) % self.period


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-4", "ROPE-8"},
    why="past 1024 the map is R_(p mod 1024): " + VALUE_WRONG + ", and a batch "
    "whose rows sit 9001 or 70 apart (no power of two) straddles the wrap: ROPE-4",
)
def rope_positions_wrap_every_1024(c):
    """a 1024-row table read modulo its length: positions wrap"""
    # Passed pinned shifts that are multiples of a power of two (4096); caught at strides 70 and 9001.
    return rope(WrapsEvery, c, period=1024)


@mutant(
    "rope_interleaved",
    fails={"ROPE-1", "ROPE-4", "ROPE-8"},
    why="past 4096 the map is R_(p mod 4096): " + VALUE_WRONG + ", and pinned pairs of one row on both "
    "sides of 4096 see the wrap: ROPE-4",
)
def rope_positions_wrap_every_4096(c):
    """a 4096-row table read modulo its length: positions wrap"""
    # Passed ROPE-4 but on lucky draws: no pinned example crossed a multiple of 4096 (ROPE-8 caught it).
    return rope(WrapsEvery, c, period=4096)


class TurnsBackwards(SteppedRotary):
    def trig(self, angles):
        return angles.cos(), -angles.sin()


@mutant(
    "rope_concatenated",
    fails={"ROPE-1", "ROPE-8", "ROPE-13"},
    # ROPE-2 left the set: the rate's magnitude is θ; the direction is ROPE-1's and ROPE-13's.
    why="R_(−p) in the declared layout: not the formula (ROPE-1, ROPE-8), not "
    "the formula up to 004's permutation (ROPE-13); θ in magnitude, offsets and norms hold",
)
def rope_concatenated_turning_backwards(c):
    """004 §3.2's [even, odd] output layout with each pair turned by −p·θ"""
    # ROPE-13's subjects now are 004's code alone; this keeps its permutation spec able to fail.
    return rope(TurnsBackwards, c, layout="concatenated")


class ThetaSnapshotAtFirstCall(SteppedRotary):
    """θ kept in a float buffer that ``.to()`` casts; the first call takes the table's θ from it."""

    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.register_buffer("theta_buffer", self.inv_freq.clone(), persistent=False)
        self.table_theta = None  # not a buffer: what the first call saw

    def angles(self, positions, x):
        if self.table_theta is None:
            self.table_theta = self.theta_buffer.clone()
        return rotation_angles(positions, self.table_theta, angle_dtype(x.dtype), self.scaling_factor)


@mutant("rope_interleaved", fails={"PATH-3"})
def rope_cast_rounds_theta_before_the_table_grows(c):
    """θ in a cast float buffer, the table grown from it at the first call: cast first, θ is rounded"""
    # Passed a PATH-3 that called the module before casting it (the table grown in float32 first).
    return ThetaSnapshotAtFirstCall(c.head_dim, base=c.base).to(c.device)


class Fp32InputReadsCastBuffer(SteppedRotary):
    """Half-precision input: θ recomputed in float32; float32 input: θ read from a cast float buffer."""

    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.register_buffer("theta_buffer", self.inv_freq.clone(), persistent=False)

    def angles(self, positions, x):
        theta = self.inv_freq if x.dtype in (torch.float16, torch.bfloat16) else self.theta_buffer
        return rotation_angles(positions, theta, angle_dtype(x.dtype), self.scaling_factor)


@mutant("rope_interleaved", fails={"PATH-3"})
def rope_fp32_input_reads_the_cast_buffer(c):
    """module.to(bf16) rounds a θ buffer that only float32 input reads, as mixed precision feeds it"""
    # Passed a PATH-3 that fed the cast module input of its own dtype only.
    return Fp32InputReadsCastBuffer(c.head_dim, base=c.base).to(c.device)


class CacheKeyedByLength(SteppedRotary):
    """cos/sin cached per call length, whatever positions the call had: the first call of a length
    decides the angles of every later call of that length."""

    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.by_length = {}

    def trig(self, angles):
        key = (angles.shape[-2], angles.dtype)
        if key not in self.by_length:
            self.by_length[key] = super().trig(angles[:1])
        cos, sin = self.by_length[key]
        return cos.expand_as(angles), sin.expand_as(angles)


# ROPE-9 finds it by a call at later positions of the same length; every other spec that calls twice
# at one length with other positions reads 'depends on ROPE-9' (a fresh module would hold them).
@mutant("rope_interleaved", fails={"ROPE-9"})
def rope_cache_keyed_by_length(c):
    """cos/sin cached by the call's length alone: a later call of that length gets the first one's angles"""
    # Not ROPE-11 (once blamed): its error is the same in float32, so half precision is not what is broken.
    # Passed a ROPE-9 whose histories and probes all started at offset 0 (its PATH-2 and ROPE-4 cells failed);
    # then blamed on ROPE-1, ROPE-4, ROPE-10a and PATH-2 as well, until the history check called later positions.
    return rope(CacheKeyedByLength, c)


@mutant("rope_interleaved", fails={"ROPE-1", "ROPE-8"}, why="pairs (i, i + d/2) where (2i, 2i+1) are declared: "
        "the rotation's value (ROPE-1, ROPE-8); each pair turns at the formula's θ_i (ROPE-2 holds)")
def rope_half_split_pairs_declared_interleaved(c):
    """rotate_half pairing in a RoPE whose record says interleaved"""
    # Blamed on ROPE-2 too by a spec that read θ on the declared pairs, where a half-split map has none.
    return rope(SteppedRotary, c, layout="half_split")


class KeysOffByOneInOneTokenCalls(QAndK):
    """q and k together; a call of one query and one key (a decode step) counts the key one further."""

    def forward(self, q, k, q_positions, k_positions):
        if q.shape[1] == 1 and k.shape[1] == 1:
            k_positions = k_positions + 1
        return super().forward(q, k, q_positions, k_positions)


@mutant("rope_interleaved", protocol="pair", fails={"PATH-2"})
def rope_pair_keys_off_by_one_when_decoding(c):
    """a pair RoPE whose one-token calls (decode steps) rotate the key one position too far"""
    # Passed a PATH-2 that decoded a pair encoder with one query-against-all-keys call, never step by step.
    return placed(KeysOffByOneInOneTokenCalls(SteppedRotary(c.head_dim, base=c.base),
                                              SteppedRotary(c.head_dim, base=c.base)), c)


class RescalesItsCacheEveryCall(SteppedRotary):
    """cos/sin of the first call kept, and rescaled in place on every call after (a decay meant for
    something else): each call's output differs from the one before."""

    DRIFT = 1e-3

    def __init__(self, head_dim, **options):
        super().__init__(head_dim, **options)
        self.calls = 0

    def trig(self, angles):
        scale = (1 - self.DRIFT) ** self.calls
        self.calls += 1
        return angles.cos() * scale, angles.sin() * scale


@mutant("rope_interleaved", fails={"ROPE-9"})
def rope_rescales_its_cache_every_call(c):
    """cos/sin rescaled in place by 1 − 10⁻³ on every call: the second identical call differs from the first"""
    # Failed nine rows before the history check: every spec that calls twice saw the drift.
    return rope(RescalesItsCacheEveryCall, c)


class ClampsPositions(SteppedRotary):
    """Positions clamped to a last one, as a table of that many rows read with ``clamp``."""

    LAST = 65535

    def positions(self, x, positions, offset):
        return super().positions(x, positions, offset).clamp(max=self.LAST)


@mutant("rope_interleaved", fails={"ROPE-10a"})
def rope_positions_clamped_at_65535(c):
    """positions past 65535 read as 65535: far offsets collapse to zero in every dtype"""
    # Blamed on ROPE-11 too by a spec that took the whole far error for precision's, though float32 has it.
    return rope(ClampsPositions, c)
