"""The documents' own code as encoders: one record per published snippet (000 and 004).

The modules are in :mod:`posenc.encoders.published`, transcribed with only the fixes without
which they raise on every input. Every refutation here was observed by the specs on the
published code; the corrected designs are the built-in records named in ``corrects``.
"""

from __future__ import annotations

import torch

from ...encoders.published import doc000, doc004
from .declarations import rotary_claims
from .perf_rules import PERF2_FACTOR
from .record_builders import additive_record, attention_record, placed, rotary_record
from .records import (HOLDS, EncoderRecord, RotaryGeometry, holds_only, not_applicable, refuted,
                      tolerances_for_angles)

FP32_ANGLES = tolerances_for_angles(torch.float32)  # every snippet forms its angles in float32
INTERLEAVED_FP32 = RotaryGeometry(layout="interleaved", angle_dtype=torch.float32)
CONCATENATED_FP32 = RotaryGeometry(layout="concatenated", angle_dtype=torch.float32)
EXACT = (torch.float32, torch.float64)
CACHE_ROWS = 2048  # 000 §3.2's max_seq_len default
#: What every encoder built on 000 §3.2's RoPE shares: its 2048-row cache, base 10000, float32 angles.
ON_000_ROPE_LIMITS = dict(max_position=CACHE_ROWS, fixed_base=True, dtypes=EXACT)
ON_000_ROPE = dict(ON_000_ROPE_LIMITS, geometry=INTERLEAVED_FP32)


_NO_OFFSET_PATH = not_applicable("the published code takes no positions: no offset path to compare")
_UNCHECKED = "the published code checks no input: bad input fails deep inside torch with a message naming no limit"


def _no_validation(*specs: str, garbage: bool = False):
    """The contract specs the published code fails (observed), by name."""
    return refuted(_UNCHECKED + (", or is answered with garbage" if garbage else ""), specs=specs, garbage=garbage)


_NON_FLOAT, _RANK = "test_rejects_non_float_input", "test_rejects_wrong_rank"
_POSITIONS = ("test_rejects_positions_of_wrong_shape", "test_rejects_negative_positions")
_PERF1_CPU = ("decided on CPU (-m perf; a CUDA run shows its own): the published RoPE on q and k is not "
              "slower than building the sinusoidal table per call by the 10% margin")
_TROUBLESHOOTING = ("004 §8.1 is troubleshooting: it names a dimension error at run time as the symptom of "
                    "d_model % heads ≠ 0, and this code raises just that (a RuntimeError from view()); it describes "
                    "the code, so it is no claim the code can break")
_CACHE_END = "the published sin/cos cache has 2048 rows: past them the published `view` raises"
_HEADS_AXIS = "the published attention multiplies (batch, seq, heads, d) tensors: it attends across heads at each position"

#: 004 §3.2's apply_rope, alone (§3.3) or in §7: a correct rotation written as [even, odd], no input checks.
#: Its sin/cos are float32, so float16 input comes back float32 (tests/test_published.py): the records
#: declare float32 and float64, and the half dtypes are ROPE-11's alone.
_APPLY_ROPE_004 = {
    "PATH-1": _NO_OFFSET_PATH,
    "contract": refuted(_UNCHECKED + "; float16 input comes back float32 (its sin/cos are float32; half "
                        "dtypes are not declared, so only ROPE-11 runs them)", specs=(_NON_FLOAT, _RANK)),
    "ROPE-13": refuted("the output is a fixed permutation of the formula's, not equal to it",
                       specs=("test_output_equals_formula_elementwise",)),
}

#: What every encoder built on 004 §3.1-3.2's get_rope_angles and apply_rope shares.
ON_004_ROPE = dict(fixed_base=True, geometry=CONCATENATED_FP32, dtypes=EXACT)


def _apply_rope_004(name: str, build, *, corrects: str, source: str, description: str, claims=None) -> EncoderRecord:
    """004 §3.2's apply_rope on (batch, seq, heads, head_dim), positions 0 … seq − 1."""
    return rotary_record(name, CONCATENATED_FP32, build=build, positions="none", designs=("rope", "rope_004_real"),
                         fixed_base=True, dtypes=EXACT, corrects=corrects, source=source, description=description,
                         claims={**_APPLY_ROPE_004, **(claims or {})})


PUBLISHED_RECORDS: tuple[EncoderRecord, ...] = (
    additive_record(
        "published_learnable", "learnable", lambda c: placed(doc000.LearnablePositionalEmbedding(c.max_len, c.d_model), c),
        positions="none", table_limited=True, corrects="learnable", source="000 §2.1 (as published)",
        description="nn.Embedding(max_seq_len, d) added at arange(seq)",
        holds=("ABS-1", "ABS-2", "ABS-5", "ABS-6"),
        claims={
            "contract": _no_validation(_NON_FLOAT, _RANK),
            "PERF-1": holds_only("decided on CPU (-m perf; a CUDA run shows its own): the fastest of the three"),
            "PERF-2": holds_only(f"by rank, and within PERF-2's factor-{PERF2_FACTOR:g} window of 3.8 MB; each run's "
                                 "note gives the measured MB and its ratio to the claim"),
        },
    ),
    additive_record(
        "published_sinusoidal", "sinusoidal", lambda c: placed(doc000.SinusoidalAdded(), c),
        positions="none", corrects="sinusoidal", tolerances=FP32_ANGLES, dtypes=EXACT,
        source="000 §2.2 (as published, added to x)",
        description="sinusoidal_position_encoding(seq_len, d), a float32 table built per call",
        holds=("ABS-3", "ABS-4", "ABS-5", "ABS-6"),
        claims={
            "contract": _no_validation(_NON_FLOAT),
            "PERF-1": refuted(_PERF1_CPU),
            "PERF-2": refuted("the float32 table of 512 × 768 is built on every call: 3.2 MB, not 0.2 MB (measured)"),
        },
    ),
    rotary_record(
        "published_rope", INTERLEAVED_FP32, build=lambda c: placed(doc000.RotaryPositionEmbedding(c.head_dim), c),
        **ON_000_ROPE_LIMITS,
        positions="none",
        source="000 §3.2 (as published, cache width fixed)",
        corrects="rope_complex",
        description="complex multiplication with a fixed 2048-row float32 sin/cos cache",
        claims={
            "PATH-1": _NO_OFFSET_PATH,
            "contract": _no_validation(_RANK),
            "ROPE-10a": refuted(_CACHE_END),
            "ROPE-11": refuted("view_as_complex has no bfloat16 kernel: every bfloat16 call raises",
                               dtypes=(torch.bfloat16,)),
            "PERF-1": refuted(_PERF1_CPU),
            "PERF-2": refuted("on q and k: a 0.5 MB cache and 3.3 MB per call, 3.8 MB, not 1.5 MB (measured)"),
        },
    ),
    attention_record(
        "published_attention", lambda c: placed(doc000.AttentionWithRoPEAdapter(c.d_model, c.n_heads), c),
        **ON_000_ROPE, corrects="attention_rope", source="000 §3.3 (as published, with 000 §3.2's RoPE)",
        description="q @ kᵀ on (batch, seq, heads, d): softmax over heads, not over the sequence",
        claims={
            "contract": _no_validation(_RANK, *_POSITIONS),
            "ATT-1": refuted(_HEADS_AXIS),
            "ATT-2": refuted(_HEADS_AXIS + ": its softmax rows run over heads, so they are not the sequence's weights"),
            "ATT-5": not_applicable(_TROUBLESHOOTING),
            "ATT-4": refuted("RoPE has no effect in this code: q and k of one token, rotated by the same angle, "
                             "are multiplied across heads, so the rotation cancels; its shift invariance says "
                             "nothing about positions"),
        },  # ROPE-6 holds: v is never rotated (the heads it mixes are ATT-1's defect)
    ),
    rotary_record(
        "published_hybrid", INTERLEAVED_FP32, build=lambda c: placed(doc000.HybridPositionEncoding(c.d_model, c.max_len), c),
        **ON_000_ROPE_LIMITS,
        input_layout="bsd",
        positions="none",
        table_limited=True,
        designs=("hybrid",),
        source="000 §5.1 (as published, RoPE's head_dim defined)",
        corrects="hybrid",
        description="learnable table, then one RoPE across all of d_model (no heads)",
        claims={
            **{c: not_applicable("the hybrid's rotation spans d_model: per-head rotary checks do not apply")
               for c in rotary_claims()},
            "contract": _no_validation(_NON_FLOAT, _RANK),
            "ABS-2": HOLDS,
            "HYB-1": not_applicable("not decidable by a spec: see HYB-1 in specs/claims.md"),
        },
    ),
    attention_record(
        "published_linear_attention", lambda c: placed(doc000.LinearAttentionWithRoPEAdapter(c.d_model, c.n_heads), c),
        **ON_000_ROPE,
        designs=("linear_attention",),
        source="000 §5.2 (as published, to_qkv defined)",
        corrects="linear_attention_rope",
        description="rotate, Linear(d, 2d) feature map, softmax of k over the sequence, no normaliser",
        claims={
            "contract": _no_validation(_RANK, *_POSITIONS),
            "ATT-1": not_applicable("linear attention is not softmax attention by design"),
            "ATT-2": not_applicable("linear attention is not softmax attention by design"),
            "ATT-4": not_applicable("judged as LIN-2"),
            "ATT-5": not_applicable("judged on softmax attention"),
            "ROPE-6": not_applicable("judged on softmax attention"),
            "LIN-1": HOLDS,
            "LIN-2": refuted("a learned map and a softmax over the sequence after the rotation destroy the relative structure"),
        },
    ),
    rotary_record(
        "published_dynamic", INTERLEAVED_FP32, build=lambda c: placed(doc000.DynamicPositionEncodingAdapter(c.head_dim), c),
        **ON_000_ROPE_LIMITS,
        designs=("dynamic",),
        source="000 §5.3 (as published, input shape read as x.shape[:2])",
        corrects="dynamic",
        description="0.7·RoPE(x) + 0.3·RoPE(x): positions and scale never reach the rotation",
        claims={
            **{c: not_applicable("cross-checked on the corrected dynamic encoder") for c in rotary_claims()},
            "contract": _no_validation(_RANK, *_POSITIONS, garbage=True),
            "DYN-1": refuted("positions are multiplied by the scale, then only their maximum reaches a seq_len "
                             "argument the RoPE ignores: the output is RoPE at 0 … seq − 1"),
            "DYN-2": refuted("the scale enters only through .int() and an ignored argument: it gets no gradient"),
            "DYN-3": refuted("both terms are RoPE(x): at every scale the output is the base encoding"),
            "ROPE-4": refuted("positions never reach the rotation: moving q away from k leaves the logits unchanged"),
        },
    ),
    _apply_rope_004(
        "published_rope_004", lambda c: placed(doc004.RoPE004(), c), corrects="rope_interleaved",
        source="004 §3.1-3.3 (as published, applied to each head)",
        description="get_rope_angles + apply_rope: outputs written as [even pairs' x′, odd pairs' x′]",
    ),
    attention_record(
        "published_attention_004", lambda c: placed(doc004.Attention004(c.d_model, c.n_heads), c),
        **ON_004_ROPE, corrects="attention_rope",
        source="004 §2.2, §4-5.1 (as published, run per head with d_k = head_dim)",
        description="one head: bias-free W_Q, W_K, W_V; RoPE on Q, K; softmax(QKᵀ/√d_k) V",
        claims={
            "contract": _no_validation(*_POSITIONS),
            "ATT-5": not_applicable(_TROUBLESHOOTING),
        },
    ),
    _apply_rope_004(
        "published_multihead_004", lambda c: placed(doc004.MultiHeadRoPE(c.d_model, c.n_heads), c),
        corrects="rope_multihead", source="004 §7 (as published, two fixes to run)",
        description="apply_rope on (batch, seq, heads, head_dim), angles from head_dim",
        claims={"ROPE-7": holds_only("only with §7's two fixes, which are this claim: as printed, the angles are "
                                     "formed for d_k = d_model and sin/cos (1, seq, d/2) line seq up with the heads "
                                     "axis, so the call raises on every shape but seq_len = num_heads, where it "
                                     "returns a wrongly shaped tensor (the fixes table)")},
    ),
)
