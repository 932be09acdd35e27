"""The built-in records: a correct implementation of every design in the documents.

A plain tuple, :data:`BUILTIN_RECORDS`, read by the registry. Each record declares a verdict
for every claim. Refutations are observed by the specs (strict expected failures), never
asserted by hand; the performance verdicts follow the rules in :mod:`.perf_rules`.
"""

from __future__ import annotations

from functools import partial

import torch

from ...encoders.absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from ...encoders.alibi import ALiBiBias
from ...encoders.attention import LinearAttentionRoPE, RoPEAttention
from ...encoders.dynamic import DynamicPositionalEncoding
from ...encoders.fused import CompiledRotaryEmbedding
from ...encoders.hybrid import HybridPositionalEncoding
from ...encoders.native import InPlaceRotaryEmbedding
from ...encoders.qk_rotary import CosSinRotaryEmbedding, XPosRotaryEmbedding, apply_rotary_cos_sin, xpos_scale
from ...encoders.rotary import MultiHeadRotaryEmbedding, RotaryEmbeddingComplex
from ...encoders.scaling import frequencies as schedules

from .declarations import BIAS_DEFAULTS
from .multiaxis_records import MULTIAXIS_RECORDS
from .producer_records import PRODUCER_RECORDS
from .record_builders import additive_record, attention_record, placed, rotary_record
from .records import HOLDS, EncoderRecord, RotaryGeometry, not_applicable, refuted

# A trained dynamic scale: at its initial value 1 the 0.7 : 0.3 mix is plain RoPE.
TRAINED_DYNAMIC_SCALE = 1.25

INTERLEAVED = RotaryGeometry(layout="interleaved")


# Long-context schedules at published settings: NTK-aware ×4; YaRN ×4 over a 2048 context (its
# ramp spans pairs 2…6 of a 16-dim head); Llama 3.1's ×8 over 8192 (all three bands at head_dim 16).
NTK = partial(schedules.ntk_aware, factor=4.0)
YARN = partial(schedules.yarn, factor=4.0, original_max_position=2048)
YARN_MAGNITUDE = schedules.yarn_attention_factor(4.0)
LLAMA3 = partial(schedules.llama3, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)
DYNAMIC_TRAINED_LENGTH = 128  # the specs' max_len (SPEC_CONFIG)
DYNAMIC_NTK = partial(schedules.dynamic_ntk, factor=2.0, max_position=DYNAMIC_TRAINED_LENGTH)
LONGROPE = partial(schedules.longrope, factors=lambda pairs: [4.0 ** (i / max(pairs - 1, 1)) for i in range(pairs)])
LONGROPE_MAGNITUDE = schedules.longrope_attention_factor(4.0, 2048)
_LENGTH_DEPENDENT = "θ follows each call's length past the trained 128 positions on purpose"
_XPOS_RANGE = ("ζ_i^(±p/512) leaves the float range far out (fp32 at p ≈ 10^5, fp16 at p ≈ 10^4): "
               "the logits become 0·∞ there, as xPos's authors note for long inputs")
_XPOS_FP16 = "in float16, k's factor ζ_i^(−p/512) passes 65504 from p ≈ 4500: k' overflows to ∞"
_NOT_THE_SCHEDULE = refuted("θ_i is changed on purpose for long context, so it is not base^(-2i/d)",
                            specs=("test_frequencies_follow_the_formula",))
_SCALED = "the attention factor scales the rotated features by {:.4f}: a scaled rotation, not a rotation"


_NOT_THE_FORMULA = ("test_output_equals_formula_elementwise",)


def long_context_record(name: str, geometry: RotaryGeometry, *, source: str, description: str):
    """A long-context schedule, compared with 004 §10.3: θ is not base^(-2i/d) on purpose (ROPE-2),
    and an attention factor other than 1 scales the rotation, so norms grow by it (ROPE-3)."""
    claims = {"ROPE-2": _NOT_THE_SCHEDULE}
    if geometry.magnitude != 1.0:
        claims["ROPE-3"] = refuted(_SCALED.format(geometry.magnitude) + ": norms grow by that factor")
    return rotary_record(name, geometry, designs=(), source=f"{source}, compared with 004 §10.3",
                         description=description, claims=claims)
_TABLE_ON_PUBLISHED = {c: not_applicable("000 §4.1's table is measured on the documents' own code (published_*)")
                       for c in ("PERF-1", "PERF-2")}
_ATTENTION_SOURCES = "000 §3.3, 004 §4-5"
_LINEAR = {
    "ATT-1": not_applicable("linear attention is not softmax attention by design"),
    "ATT-2": not_applicable("linear attention is not softmax attention by design"),
    "ATT-4": not_applicable("judged as LIN-2"),
    "ROPE-6": not_applicable("judged on softmax attention, whose weights sum to 1 (a linear attention's need not)"),
    "LIN-1": HOLDS,
    "LIN-2": HOLDS,
}
_ROTATE_THEN_MAP = "a learned map and a softmax over the sequence after the rotation destroy the relative structure"
_ADDS_BEFORE_ROTATING = "E[p] is added before rotating, so rotation claims are checked on rope_multihead"
_OWN_FORMULA = "the mix is checked against its own formula by DYN-1…3"
_MIX = "0.7·R_p x + 0.3·R_{s·p} x with s ≠ 1 is not a rotation"
_ROTATION_CLAIMS = ("ROPE-1", "ROPE-2", "ROPE-7", "ROPE-8", "ROPE-9", "ROPE-10a", "ROPE-11", "ROPE-13")

BUILTIN_RECORDS: tuple[EncoderRecord, ...] = (
    additive_record(
        "learnable", "learnable", lambda c: placed(LearnablePositionalEmbedding(c.max_len, c.d_model), c),
        table_limited=True, source="000 §2.1", description="BERT-style learned absolute table",
        holds=("ABS-1", "ABS-2", "ABS-5", "ABS-6", "EXT-2"), claims=_TABLE_ON_PUBLISHED,
    ),
    additive_record(
        "sinusoidal", "sinusoidal", lambda c: placed(SinusoidalPositionalEncoding(c.d_model, base=c.base), c),
        source="000 §2.2", description="fixed sin/cos table of the original Transformer",
        holds=("ABS-3", "ABS-4", "ABS-5", "ABS-6"), claims={
            **_TABLE_ON_PUBLISHED,
            "EXT-3": refuted("trained at L, on the positions L…2L−1 its loss is above NoPE's (a model with no "
                             "positions) for every seed: it does not handle even slightly longer sequences"),
        },
    ),
    rotary_record(
        "rope_complex", INTERLEAVED, build=lambda c: placed(RotaryEmbeddingComplex(c.head_dim, c.max_len, base=c.base), c),
        source="000 §3.2", description="complex multiplication with a sin/cos cache that grows on demand",
    ),
    rotary_record(
        "rope_interleaved", INTERLEAVED, source="000 §3.1, 004 §3.2 (formula)",
        description="real rotation of pairs (2i, 2i+1)",
    ),
    rotary_record(
        "rope_concatenated", RotaryGeometry(layout="concatenated"), designs=("rope", "rope_004_real"),
        source="004 §3.2 (code)", description="004 §3.2's output layout [all even outputs, all odd outputs]",
        claims={"ROPE-13": refuted("the output is a fixed permutation of the formula's, not equal to it",
                                   specs=_NOT_THE_FORMULA)},
    ),
    rotary_record(
        "rope_half_split", RotaryGeometry(layout="half_split"),
        source="GPT-NeoX / Hugging Face convention (for comparison)", description="pairs (i, i + d/2)",
    ),
    rotary_record(
        "rope_multihead", INTERLEAVED, input_layout="bsd",
        build=lambda c: placed(MultiHeadRotaryEmbedding(c.d_model, c.n_heads, base=c.base), c),
        source="004 §7", description="(batch, seq, d_model) split into heads, angles from head_dim",
        claims={"ATT-5": HOLDS},
    ),
    rotary_record(
        "rope_linear_scaled", RotaryGeometry(scaling_factor=4.0), designs=("rope", "rope_linear_scaling"),
        source="004 §10.3", description="position interpolation: positions divided by 4",
        claims={"ROPE-14": refuted("as advice for long sequences, without fine-tuning: the trained RoPE model "
                                   "scored with positions / k is worse than unscaled RoPE past L at 2L, every seed",
                                   specs=("test_linear_scaling_beats_plain_rope_past_the_training_length",))},
    ),
    long_context_record(
        "rope_ntk_aware", RotaryGeometry(frequencies=NTK), source="NTK-aware scaled RoPE (bloc97, 2023)",
        description="θ_i = (b·s^(d/(d-2)))^(-2i/d), s = 4",
    ),
    long_context_record(
        "rope_yarn", RotaryGeometry(frequencies=YARN, magnitude=YARN_MAGNITUDE),
        source="YaRN (Peng et al. 2023, §3.2-3.4)",
        description="NTK-by-parts ramp (s = 4, L = 2048) and attention factor 0.1·ln s + 1",
    ),
    rotary_record(
        "rope_dynamic_ntk", RotaryGeometry(frequencies=DYNAMIC_NTK, length_dependent=True), designs=(),
        source="dynamic NTK scaling (emozilla, 2023; transformers' rope_type='dynamic'), compared with 004 §10.3",
        description=f"NTK-aware base grown with the call's own length past {DYNAMIC_TRAINED_LENGTH}, s = 2, no state",
        claims={
            "ROPE-1": refuted(_LENGTH_DEPENDENT + ": R_m (at length m+1) · R_n ≠ R_(m+n) (at length m+n+1)",
                              specs=("test_rotations_compose",)),
            "ROPE-4": refuted(_LENGTH_DEPENDENT + ": q and k in calls of different length turn at different rates"),
            "ROPE-10a": refuted(_LENGTH_DEPENDENT + ": far positions are long calls"),
            "ATT-4": refuted(_LENGTH_DEPENDENT + ": a shift past the trained length changes every angle"),
            "PATH-2": refuted(_LENGTH_DEPENDENT + ": a key cached at step j was rotated at length j + 1, "
                              "not at the full sequence's length"),
        },
    ),
    long_context_record(
        "rope_longrope", RotaryGeometry(frequencies=LONGROPE, magnitude=LONGROPE_MAGNITUDE),
        source="LongRoPE (Ding et al. 2024, §3), per-pair factors",
        description="θ_i / λ_i with λ rising geometrically from 1 to 4 over the pairs, attention factor √(1 + ln 4 / ln 2048)",
    ),
    rotary_record(
        "rope_xpos", RotaryGeometry(position_scale=xpos_scale()), designs=(), protocol="pair",
        build=lambda c: placed(XPosRotaryEmbedding(c.head_dim, base=c.base), c),
        source="xPos (Sun et al. 2022, §3.1), a RoPE variant applied to q and k together",
        description="interleaved RoPE, q scaled by ζ_i^(p/512) and k by ζ_i^(−p/512): the pair protocol",
        claims={
            "ROPE-3": refuted("q at p is scaled by ζ_i^(p/512) and k by its inverse: norms change on purpose"),
            "ROPE-4": refuted(_XPOS_FP16, dtypes=(torch.float16,)),
            "ROPE-10a": refuted(_XPOS_RANGE),
            # bfloat16 has float32's range: what it shows far out, float32 shows too (ROPE-10a's)
            "ROPE-11": refuted("in float16, ζ_i^(±p/512) leaves the float range from p ≈ 10^4, where float32 "
                               "still holds", dtypes=(torch.float16,)),
            "PATH-1": not_applicable("the pair protocol takes explicit positions only"),
        },
    ),
    rotary_record(
        "rope_cos_sin", RotaryGeometry(layout="half_split"), protocol="cos_sin", apply=apply_rotary_cos_sin,
        build=lambda c: placed(CosSinRotaryEmbedding(c.head_dim, base=c.base), c),
        source="the transformers / vLLM convention: cos, sin = rope(x, position_ids); apply(q, k, cos, sin)",
        description="half-split cos/sin tables, then q·cos + rotate_half(q)·sin: the cos/sin protocol",
        claims={"PATH-1": not_applicable("the cos/sin protocol takes explicit positions only")},
    ),
    rotary_record(
        "rope_partial", RotaryGeometry(layout="half_split", rotary_fraction=0.25),
        source="partial rotary (GPT-NeoX, rotary_pct = 0.25), compared with 004 §3.2",
        description="the first quarter of each head rotated in half-split pairs, the rest passed through",
    ),
    long_context_record(
        "rope_llama3", RotaryGeometry(frequencies=LLAMA3),
        source="Llama 3.1 rope_scaling (factor 8, low 1, high 4, original 8192)",
        description="short wavelengths kept, long ones divided by 8, a smooth band between",
    ),
    attention_record(
        "attention_rope", lambda c: placed(RoPEAttention(c.d_model, c.n_heads, base=c.base), c),
        source=_ATTENTION_SOURCES,
        geometry=INTERLEAVED,
        description="softmax attention (SDPA) with RoPE on q, k",
        claims={"ROPE-12": HOLDS},
    ),
    attention_record(
        "attention_rope_causal", lambda c: placed(RoPEAttention(c.d_model, c.n_heads, base=c.base, causal=True), c),
        source=_ATTENTION_SOURCES,
        geometry=INTERLEAVED,
        description="causal softmax attention (SDPA) with RoPE on q, k",
        claims={
            "ATT-3": HOLDS,
            "ROPE-10b": refuted("trained at L on an order-2 Markov language, R(2), R(4), R(8) exceed 1.10 for every seed"),
            "EXT-1": HOLDS,
            "ROPE-12": HOLDS,
        },
    ),
    attention_record(
        "linear_attention_rope", lambda c: placed(LinearAttentionRoPE(c.d_model, c.n_heads, base=c.base), c),
        designs=("linear_attention",),
        source="000 §5.2 (RoFormer eq. 19 order)",
        geometry=INTERLEAVED,
        description="φ = elu(W·)+1, rotate features, unrotated normaliser",
        claims=_LINEAR,
    ),
    attention_record(
        "linear_attention_rope_published", lambda c: placed(LinearAttentionRoPE(c.d_model, c.n_heads, base=c.base, order="rotate_then_map"), c),
        designs=("linear_attention",),
        source="000 §5.2 (published order)",
        geometry=INTERLEAVED,
        description="rotate, linear feature map, softmax of k over the sequence",
        claims={
            **_LINEAR,
            "LIN-2": refuted(_ROTATE_THEN_MAP, specs=("test_linear_attention_is_shift_invariant",)),
        },
    ),
    rotary_record(
        "hybrid", INTERLEAVED, build=lambda c: placed(HybridPositionalEncoding(c.d_model, c.n_heads, c.max_len, base=c.base), c),
        designs=("hybrid",),
        input_layout="bsd",
        table_limited=True,
        source="000 §5.1",
        description="learnable table, then RoPE per head",
        claims={
            **{c: not_applicable(_ADDS_BEFORE_ROTATING) for c in _ROTATION_CLAIMS},
            "ABS-2": HOLDS,
            "ATT-5": HOLDS,
            "HYB-1": not_applicable("not decidable by a spec: see HYB-1 in specs/claims.md"),
            "ROPE-7": HOLDS,
            "ROPE-3": refuted("‖R(x + E[p])‖ = ‖x + E[p]‖ ≠ ‖x‖"),
            "ROPE-4": refuted("⟨R_m(q + E_m), R_n(k + E_n)⟩ has terms in E_m and E_n"),
            "ROPE-5": refuted("the learnable table is trainable"),
            "ATT-4": refuted("the learned table makes logits depend on absolute positions"),
        },
    ),
    rotary_record(
        "dynamic", INTERLEAVED, designs=("dynamic",),
        build=lambda c: placed(DynamicPositionalEncoding(c.head_dim, c.max_len, base=c.base,
                                                         initial_scale=TRAINED_DYNAMIC_SCALE), c),
        source="000 §5.3",
        description=f"0.7 : 0.3 mix of RoPE at p and at s·p, learned s (built at s = {TRAINED_DYNAMIC_SCALE})",
        claims={
            **{c: not_applicable(_OWN_FORMULA) for c in _ROTATION_CLAIMS},
            "DYN-1": HOLDS,
            "DYN-2": HOLDS,
            "DYN-3": HOLDS,
            "ROPE-3": refuted(_MIX + ": the norm shrinks"),
            "ROPE-4": refuted(_MIX + ": cross terms depend on s·n − m"),
            "ROPE-5": refuted("the scale is a trainable parameter"),
            "ATT-4": refuted(_MIX + ": attention depends on absolute positions"),
        },
    ),
    rotary_record(
        "rope_compiled", INTERLEAVED, build=lambda c: placed(CompiledRotaryEmbedding(c.head_dim, base=c.base), c),
        source="000 §3.1, 004 §3.2",
        description="interleaved RoPE fused into one torch.compile kernel (C++ on CPU, Triton on CUDA)",
    ),
    rotary_record(
        "rope_inplace", INTERLEAVED, build=lambda c: placed(InPlaceRotaryEmbedding(c.head_dim, base=c.base), c),
        source="000 §3.1, 004 §3.2",
        description="interleaved RoPE by a vectorised C kernel that can rotate q and k where they lie",
    ),
    EncoderRecord(
        name="alibi",
        build=lambda c: placed(ALiBiBias(c.n_heads), c),
        kind="bias",
        input_layout="bsd",
        designs=("alibi",),
        source="ALiBi (Press et al. 2022, §3), the length experiment's baseline (not in the documents)",
        description="−m_h·(q − k) added to the logits, −∞ after the query; slopes 2^(−8h/n)",
        claims=BIAS_DEFAULTS,
    ),
    *MULTIAXIS_RECORDS,
    *PRODUCER_RECORDS,
)
