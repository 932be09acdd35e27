"""The built-in encoders: a correct implementation of every design in the documents.

Each record declares a verdict for every claim. Refutations are observed by
the specs (strict expected failures), never asserted by hand.
"""

from __future__ import annotations

from .absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from .attention import LinearAttentionRoPE, RoPEAttention
from .claims import CLAIMS
from .dynamic import DynamicPositionalEncoding
from .fused import fused_records
from .hybrid import HybridPositionalEncoding
from .perf_claims import PERF_DECLARATIONS
from .registry import (
    HOLDS,
    BuildConfig,
    EncoderRecord,
    RotaryGeometry,
    not_applicable,
    refuted,
    register,
    with_defaults,
)
from .rotary import MultiHeadRotaryEmbedding, RotaryEmbedding, RotaryEmbeddingComplex

# A trained dynamic scale: at its initial value 1 the 0.7 : 0.3 mix is plain RoPE.
TRAINED_DYNAMIC_SCALE = 1.25


def _family(prefixes: tuple[str, ...], reason: str) -> dict:
    return {c: not_applicable(reason) for c in CLAIMS if c.startswith(prefixes)}


_NOT_PERF = {
    "PERF-1": not_applicable("the documents' timing table covers learnable, sinusoidal and RoPE only"),
    "PERF-2": not_applicable("the documents' memory table covers learnable, sinusoidal and RoPE only"),
    "ROPE-12": not_applicable("RoPE overhead is measured inside softmax attention"),
    "ROPE-10b": not_applicable("the length-extrapolation experiment trains softmax attention with RoPE"),
}
_NOT_ATTENTION_MODULE = {
    "ATT-1": not_applicable("not an attention module"),
    "ATT-2": not_applicable("not an attention module"),
    "ATT-3": not_applicable("not a causal attention module"),
    "ATT-5": not_applicable("takes no head count"),
    "ROPE-6": not_applicable("applied to q and k only; the V path is checked on attention modules"),
}

# A correct RoPE on (batch, seq, heads, head_dim): every rotary claim holds.
ROTARY_DEFAULTS = {
    **{c: HOLDS for c in CLAIMS},
    **_family(("ABS-", "LIN-", "HYB-", "DYN-"), "not a claim about this design"),
    **_NOT_ATTENTION_MODULE,
    **_NOT_PERF,
    "ROPE-13": HOLDS,
    "ROPE-14": not_applicable("no position scaling"),
}

ADDITIVE_DEFAULTS = {
    **{c: not_applicable("not a claim about absolute encodings") for c in CLAIMS},
    "ATT-4": refuted("x + pe[p] logits carry absolute positions (ABS-5)"),
}

ATTENTION_DEFAULTS = {
    **{c: not_applicable("checked on the rotary encoder this module uses") for c in CLAIMS},
    **_NOT_PERF,
    "ATT-1": HOLDS,
    "ATT-2": HOLDS,
    "ATT-3": not_applicable("no causal mask"),
    "ATT-4": HOLDS,
    "ATT-5": HOLDS,
    "ROPE-6": HOLDS,
}


def rotary_claims(overrides=None) -> dict:
    """Declarations for a correct per-head RoPE; pass overrides for what differs."""
    return with_defaults(ROTARY_DEFAULTS, overrides)


def _module(module, config: BuildConfig):
    return module.to(device=config.device, dtype=config.dtype)


def _rope(layout: str, scaling_factor: float = 1.0):
    def build(c: BuildConfig):
        return _module(RotaryEmbedding(c.head_dim, base=c.base, layout=layout, scaling_factor=scaling_factor), c)

    return build


def _register_builtin(**fields):
    """Register a built-in, with its performance verdicts from :mod:`posenc.perf_claims`."""
    fields["claims"] = with_defaults(fields["claims"], PERF_DECLARATIONS.get(fields["name"]))
    return register(EncoderRecord(**fields))


_register_builtin(
    name="learnable",
    build=lambda c: _module(LearnablePositionalEmbedding(c.max_len, c.d_model), c),
    kind="additive",
    input_layout="bsd",
    table_limited=True,
    source="000 §2.1",
    description="BERT-style learned absolute table",
    claims=with_defaults(ADDITIVE_DEFAULTS, {
        "ABS-1": HOLDS,
        "ABS-2": HOLDS,
        "ABS-5": refuted(
            "a learned table has no relative structure: pe[m]·pe[n] and pe[p+k] are not functions of the offset",
            specs=("test_sinusoidal_dot_product_depends_only_on_offset", "test_sinusoidal_shift_is_a_fixed_linear_map"),
        ),
        "ABS-6": HOLDS,
    }),
)

_register_builtin(
    name="sinusoidal",
    build=lambda c: _module(SinusoidalPositionalEncoding(c.d_model, base=c.base), c),
    kind="additive",
    input_layout="bsd",
    source="000 §2.2",
    description="fixed sin/cos table of the original Transformer",
    claims=with_defaults(ADDITIVE_DEFAULTS, {
        "ABS-3": HOLDS,
        "ABS-4": HOLDS,
        "ABS-5": HOLDS,
        "ABS-6": HOLDS,
    }),
)

_register_builtin(
    name="rope_complex",
    build=lambda c: _module(RotaryEmbeddingComplex(c.head_dim, c.max_len, base=c.base), c),
    kind="rotary",
    source="000 §3.2",
    geometry=RotaryGeometry(layout="interleaved"),
    description="complex multiplication with a sin/cos cache that grows on demand",
    claims=rotary_claims(),
)

_register_builtin(
    name="rope_interleaved",
    build=_rope("interleaved"),
    kind="rotary",
    source="000 §3.1, 004 §3.2 (formula)",
    geometry=RotaryGeometry(layout="interleaved"),
    description="real rotation of pairs (2i, 2i+1)",
    claims=rotary_claims(),
)

_NOT_THE_FORMULA = ("test_output_equals_formula_elementwise",)

_register_builtin(
    name="rope_concatenated",
    build=_rope("concatenated"),
    kind="rotary",
    source="004 §3.2 (code)",
    geometry=RotaryGeometry(layout="concatenated"),
    description="004 §3.2's output layout [all even outputs, all odd outputs]",
    claims=rotary_claims({
        "ROPE-13": refuted("the output is a fixed permutation of the formula's, not equal to it", specs=_NOT_THE_FORMULA),
    }),
)

_register_builtin(
    name="rope_half_split",
    build=_rope("half_split"),
    kind="rotary",
    source="GPT-NeoX / Hugging Face convention (for comparison)",
    geometry=RotaryGeometry(layout="half_split"),
    description="pairs (i, i + d/2)",
    claims=rotary_claims({
        "ROPE-13": refuted("pairs (i, i+d/2) permute the formula's coordinates", specs=_NOT_THE_FORMULA),
    }),
)

_register_builtin(
    name="rope_multihead",
    build=lambda c: _module(MultiHeadRotaryEmbedding(c.d_model, c.n_heads, base=c.base), c),
    kind="rotary",
    input_layout="bsd",
    source="004 §7",
    geometry=RotaryGeometry(layout="interleaved"),
    description="(batch, seq, d_model) split into heads, angles from head_dim",
    claims=rotary_claims({"ATT-5": HOLDS}),
)

_register_builtin(
    name="rope_linear_scaled",
    build=_rope("interleaved", scaling_factor=4.0),
    kind="rotary",
    source="004 §10.3",
    geometry=RotaryGeometry(layout="interleaved", scaling_factor=4.0),
    description="position interpolation: positions divided by 4",
    claims=rotary_claims({"ROPE-14": HOLDS}),
)

_ATTENTION_SOURCES = "000 §3.3, 004 §4-5"

_register_builtin(
    name="attention_rope",
    build=lambda c: _module(RoPEAttention(c.d_model, c.n_heads, base=c.base), c),
    kind="attention",
    input_layout="bsd",
    source=_ATTENTION_SOURCES,
    geometry=RotaryGeometry(layout="interleaved"),
    description="softmax attention (SDPA) with RoPE on q, k",
    claims=with_defaults(ATTENTION_DEFAULTS),
)

_register_builtin(
    name="attention_rope_causal",
    build=lambda c: _module(RoPEAttention(c.d_model, c.n_heads, base=c.base, causal=True), c),
    kind="attention",
    input_layout="bsd",
    source=_ATTENTION_SOURCES,
    geometry=RotaryGeometry(layout="interleaved"),
    description="causal softmax attention (SDPA) with RoPE on q, k",
    claims=with_defaults(ATTENTION_DEFAULTS, {
        "ATT-3": HOLDS,
        "ROPE-10b": refuted("trained at L on a lag task, the loss at 2L … 8L rises far above its trained value"),
    }),
)

_LINEAR = {
    "ATT-1": not_applicable("linear attention is not softmax attention by design"),
    "ATT-2": refuted("weights φ(q)ᵀφ(k) over an unrotated (or no) normaliser do not sum to 1"),
    "LIN-1": HOLDS,
    "LIN-2": HOLDS,
}

_register_builtin(
    name="linear_attention_rope",
    build=lambda c: _module(LinearAttentionRoPE(c.d_model, c.n_heads, base=c.base), c),
    kind="attention",
    input_layout="bsd",
    source="000 §5.2 (RoFormer eq. 19 order)",
    geometry=RotaryGeometry(layout="interleaved"),
    description="φ = elu(W·)+1, rotate features, unrotated normaliser",
    claims=with_defaults(ATTENTION_DEFAULTS, _LINEAR),
)

_ROTATE_THEN_MAP = "a learned map and a softmax over the sequence after the rotation destroy the relative structure"

_register_builtin(
    name="linear_attention_rope_published",
    build=lambda c: _module(LinearAttentionRoPE(c.d_model, c.n_heads, base=c.base, order="rotate_then_map"), c),
    kind="attention",
    input_layout="bsd",
    source="000 §5.2 (published order)",
    geometry=RotaryGeometry(layout="interleaved"),
    description="rotate, linear feature map, softmax of k over the sequence",
    claims=with_defaults(ATTENTION_DEFAULTS, {
        **_LINEAR,
        "ATT-4": refuted(_ROTATE_THEN_MAP),
        "LIN-2": refuted(_ROTATE_THEN_MAP, specs=("test_linear_attention_is_shift_invariant",)),
    }),
)

_ADDS_BEFORE_ROTATING = "E[p] is added before rotating, so rotation claims are checked on rope_multihead"

_register_builtin(
    name="hybrid",
    build=lambda c: _module(HybridPositionalEncoding(c.d_model, c.n_heads, c.max_len, base=c.base), c),
    kind="rotary",
    input_layout="bsd",
    table_limited=True,
    source="000 §5.1",
    geometry=RotaryGeometry(layout="interleaved"),
    description="learnable table, then RoPE per head",
    claims=rotary_claims({
        **{c: not_applicable(_ADDS_BEFORE_ROTATING)
           for c in ("ROPE-1", "ROPE-2", "ROPE-7", "ROPE-8", "ROPE-9", "ROPE-10a", "ROPE-11", "ROPE-13")},
        "ABS-2": HOLDS,
        "ATT-5": HOLDS,
        "HYB-1": HOLDS,
        "ROPE-3": refuted("‖R(x + E[p])‖ = ‖x + E[p]‖ ≠ ‖x‖"),
        "ROPE-4": refuted("⟨R_m(q + E_m), R_n(k + E_n)⟩ has terms in E_m and E_n"),
        "ROPE-5": refuted("the learnable table is trainable"),
        "ATT-4": refuted("the learned table makes logits depend on absolute positions"),
    }),
)

_MIX = "0.7·R_p x + 0.3·R_{s·p} x with s ≠ 1 is not a rotation"

_register_builtin(
    name="dynamic",
    build=lambda c: _module(
        DynamicPositionalEncoding(c.head_dim, c.max_len, base=c.base, initial_scale=TRAINED_DYNAMIC_SCALE), c
    ),
    kind="rotary",
    source="000 §5.3",
    geometry=RotaryGeometry(layout="interleaved"),
    description=f"0.7 : 0.3 mix of RoPE at p and at s·p, learned s (built at s = {TRAINED_DYNAMIC_SCALE})",
    claims=rotary_claims({
        **{c: not_applicable("the mix is checked against its own formula by DYN-1…3")
           for c in ("ROPE-1", "ROPE-2", "ROPE-7", "ROPE-8", "ROPE-9", "ROPE-10a", "ROPE-11", "ROPE-13")},
        "DYN-1": HOLDS,
        "DYN-2": HOLDS,
        "DYN-3": HOLDS,
        "ROPE-3": refuted(_MIX + ": the norm shrinks"),
        "ROPE-4": refuted(_MIX + ": cross terms depend on s·n − m"),
        "ROPE-5": refuted("the scale is a trainable parameter"),
        "ATT-4": refuted(_MIX + ": attention depends on absolute positions"),
    }),
)

for _record in fused_records(rotary_claims):
    _register_builtin(**_record)
