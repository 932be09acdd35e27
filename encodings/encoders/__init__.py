"""The encoders: one design per module, built on torch alone.

Nothing here knows the harness. A module imports torch, the standard library and its
siblings; ``tests/test_layout.py`` keeps it so. Records that describe these encoders to the
harness live in :mod:`posenc.harness.catalogue.builtin_records`.

* :mod:`.absolute` - learnable table and sinusoidal encoding (000 §2);
* :mod:`.rotary` - RoPE: real rotation in three layouts, complex form, per-head wrapper (000 §3, 004 §3, §7);
* :mod:`.attention` - softmax and linear attention with RoPE (000 §3.3, §5.2; 004 §4-5);
* :mod:`.alibi` - ALiBi's logit bias and attention (Press et al. 2022), the length experiment's baseline;
* :mod:`.hybrid`, :mod:`.dynamic` - the documents' variants (000 §5.1, §5.3);
* :mod:`.fused` - the interleaved rotation as one compiled kernel;
* :mod:`.qk_rotary` - RoPE on q and k together: the cos/sin and pair protocols, xPos;
* :mod:`.multiaxis` - M-RoPE and 2D RoPE (a position per axis); :mod:`.mrope_positions` - the
  papers' M-RoPE ids of text, images and videos (Qwen2-VL, Qwen2.5-VL's time in seconds);
* :mod:`.positions`, :mod:`.validation` - positions, angles and input checks shared by all;
* :mod:`.published`, :mod:`.scaling` - rooms for the documents' code as published
  (``doc000``, ``doc004``) and frequency-scaling variants.
"""

from .absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from .alibi import ALiBiAttention, ALiBiBias, alibi_slopes
from .attention import LinearAttentionRoPE, RoPEAttention
from .dynamic import DynamicPositionalEncoding
from .fused import CompiledRotaryEmbedding
from .hybrid import HybridPositionalEncoding
from .positions import angle_dtype, inverse_frequencies
from .qk_rotary import CosSinRotaryEmbedding, XPosRotaryEmbedding, apply_rotary_cos_sin, xpos_scale
from .rotary import LAYOUTS, MultiHeadRotaryEmbedding, RotaryEmbedding, RotaryEmbeddingComplex

__all__ = [
    "ALiBiAttention", "ALiBiBias", "alibi_slopes",
    "CompiledRotaryEmbedding", "CosSinRotaryEmbedding", "DynamicPositionalEncoding", "HybridPositionalEncoding", "LAYOUTS",
    "LearnablePositionalEmbedding", "LinearAttentionRoPE", "MultiHeadRotaryEmbedding", "RoPEAttention",
    "RotaryEmbedding", "RotaryEmbeddingComplex", "SinusoidalPositionalEncoding", "angle_dtype",
    "XPosRotaryEmbedding", "apply_rotary_cos_sin", "inverse_frequencies", "xpos_scale",
]
