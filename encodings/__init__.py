"""posenc: positional encoders, and the harness that checks claims about them.

The folder is ``encodings/`` in the repository; it installs as the import package ``posenc``
(the standard library owns the name ``encodings``). Three rooms:

* :mod:`posenc.encoders` - the designs, on torch alone;
* :mod:`posenc.harness` - records, registry, claims, verdict matrix, profiling, pytest plug-in;
* :mod:`posenc.tools` - README generators and tables, run from the repository root.

This module is the public face: the names plug-in files and users import.
"""

from .encoders import (
    LAYOUTS,
    CompiledRotaryEmbedding,
    DynamicPositionalEncoding,
    HybridPositionalEncoding,
    LearnablePositionalEmbedding,
    LinearAttentionRoPE,
    MultiHeadRotaryEmbedding,
    RoPEAttention,
    RotaryEmbedding,
    RotaryEmbeddingComplex,
    SinusoidalPositionalEncoding,
    angle_dtype,
    inverse_frequencies,
)
from .harness.claims import CLAIMS, ClaimViolation
from .harness.declarations import rotary_claims
from .harness.records import (
    DEFAULT_TOLERANCES,
    HOLDS,
    BuildConfig,
    Declared,
    EncoderRecord,
    RotaryGeometry,
    Tolerance,
    not_applicable,
    refuted,
    with_defaults,
)
from .harness.registry import get, load_plugin, records, register, unregister

__all__ = [
    "CLAIMS", "ClaimViolation", "CompiledRotaryEmbedding", "DEFAULT_TOLERANCES", "HOLDS", "LAYOUTS",
    "BuildConfig", "Declared", "DynamicPositionalEncoding", "EncoderRecord", "HybridPositionalEncoding",
    "LearnablePositionalEmbedding", "LinearAttentionRoPE", "MultiHeadRotaryEmbedding", "RoPEAttention",
    "RotaryEmbedding", "RotaryEmbeddingComplex", "RotaryGeometry", "SinusoidalPositionalEncoding", "Tolerance",
    "angle_dtype", "get", "inverse_frequencies", "load_plugin", "not_applicable", "records", "refuted",
    "register", "rotary_claims", "unregister", "with_defaults",
]
