"""posenc: correct positional encoders and the registry that the harness's specs run against.

The folder is ``encodings/`` in the repository; it installs as the import
package ``posenc`` (the standard library owns the name ``encodings``).
"""

from .absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from .attention import LinearAttentionRoPE, RoPEAttention
from .claims import CLAIMS, ClaimViolation
from .dynamic import DynamicPositionalEncoding
from .hybrid import HybridPositionalEncoding
from .positions import angle_dtype, inverse_frequencies
from .registry import (
    DEFAULT_TOLERANCES,
    HOLDS,
    BuildConfig,
    Declared,
    EncoderRecord,
    RotaryGeometry,
    Tolerance,
    get,
    load_plugin,
    not_applicable,
    records,
    refuted,
    register,
    unregister,
    with_defaults,
)
from .rotary import LAYOUTS, MultiHeadRotaryEmbedding, RotaryEmbedding, RotaryEmbeddingComplex

__all__ = [
    "CLAIMS", "ClaimViolation", "DEFAULT_TOLERANCES", "HOLDS", "LAYOUTS", "BuildConfig", "Declared",
    "DynamicPositionalEncoding", "EncoderRecord", "HybridPositionalEncoding", "LearnablePositionalEmbedding",
    "LinearAttentionRoPE", "MultiHeadRotaryEmbedding", "RoPEAttention", "RotaryEmbedding",
    "RotaryEmbeddingComplex", "RotaryGeometry", "SinusoidalPositionalEncoding", "Tolerance",
    "angle_dtype", "get", "inverse_frequencies", "load_plugin", "not_applicable", "records", "refuted",
    "register", "rotary_claims", "unregister", "with_defaults",
]


def rotary_claims(overrides=None):
    """Declarations for a correct per-head RoPE plug-in; ``overrides`` maps claim IDs to what differs."""
    from .builtin_records import rotary_claims as _rotary_claims

    return _rotary_claims(overrides)
