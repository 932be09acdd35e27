"""posenc: positional encoders, and the harness that checks claims about them.

The folder is ``encodings/`` in the repository; it installs as the import package ``posenc``
(the standard library owns the name ``encodings``). Three rooms:

* :mod:`posenc.encoders` - the designs, on torch alone;
* :mod:`posenc.harness` - records, registry, claims, verdict matrix, profiling, pytest plug-in;
* :mod:`posenc.tools` - the docs' generators and the command-line tools, run from the repository root;
* :mod:`posenc.ecosystem` - other libraries' RoPEs as plug-ins (``--plugin posenc.ecosystem``).

This module is the public face: the names plug-in files and users import.
"""

from .encoders import (
    ALiBiAttention,
    ALiBiBias,
    LAYOUTS,
    CompiledRotaryEmbedding,
    CosSinRotaryEmbedding,
    DynamicPositionalEncoding,
    HybridPositionalEncoding,
    LearnablePositionalEmbedding,
    LinearAttentionRoPE,
    MultiHeadRotaryEmbedding,
    RoPEAttention,
    RotaryEmbedding,
    RotaryEmbeddingComplex,
    SinusoidalPositionalEncoding,
    XPosRotaryEmbedding,
    angle_dtype,
    apply_rotary_cos_sin,
    inverse_frequencies,
    xpos_scale,
)
from .harness.catalogue.claims import CLAIMS, CONTRACT, ClaimViolation
from .harness.catalogue.declarations import multiaxis_claims, producer_claims, rotary_claims
from .harness.catalogue.producer_records import producer_record
from .harness.catalogue.records import (
    Calling,
    Limits,
    DEFAULT_TOLERANCES,
    PRODUCER_PROTOCOLS,
    ProducerTraits,
    HOLDS,
    FLOAT64_THROUGH_FP32_ANGLES,
    BuildConfig,
    Declared,
    EncoderRecord,
    RotaryGeometry,
    Tolerance,
    not_applicable,
    refuted,
    tolerances_for_angles,
    with_defaults,
)
from .harness.catalogue.registry import get, load_plugin, records, register, unregister
from .harness.catalogue.states import State

__all__ = [
    "ALiBiAttention", "ALiBiBias",
    "CLAIMS", "CONTRACT", "ClaimViolation", "CompiledRotaryEmbedding", "CosSinRotaryEmbedding", "DEFAULT_TOLERANCES",
    "FLOAT64_THROUGH_FP32_ANGLES", "HOLDS", "LAYOUTS", "XPosRotaryEmbedding", "apply_rotary_cos_sin",
    "tolerances_for_angles", "xpos_scale",
    "BuildConfig", "Calling", "Declared", "DynamicPositionalEncoding", "EncoderRecord", "HybridPositionalEncoding",
    "LearnablePositionalEmbedding", "Limits", "LinearAttentionRoPE", "MultiHeadRotaryEmbedding", "RoPEAttention",
    "RotaryEmbedding", "RotaryEmbeddingComplex", "RotaryGeometry", "SinusoidalPositionalEncoding", "State", "Tolerance",
    "angle_dtype", "get", "inverse_frequencies", "load_plugin", "not_applicable", "records", "refuted",
    "register", "rotary_claims", "unregister", "with_defaults",
    "multiaxis_claims", "PRODUCER_PROTOCOLS", "ProducerTraits", "producer_claims", "producer_record",
]
