"""Hybrid encoding (000 §5.1): a learnable absolute embedding, then RoPE per head.

``y = R_p (x + E[p])`` on ``(batch, seq, d_model)``, each head rotated with
angles from ``head_dim``. It inherits the learnable table's length limit
(ABS-2) and, because ``E[p]`` is added before rotating, loses translation
invariance of attention (HYB-1, ATT-4).
"""

from __future__ import annotations

import torch
from torch import nn

from .absolute import LearnablePositionalEmbedding
from .positions import angle_dtype, resolve_positions
from .rotary import MultiHeadRotaryEmbedding
from .validation import require_float, require_last_dim, require_rank


class HybridPositionalEncoding(nn.Module):
    """Learnable absolute table, then per-head RoPE (000 §5.1) on ``(batch, seq, d_model)``."""

    def __init__(self, d_model: int, n_heads: int, max_len: int, **rotary_options):
        super().__init__()
        self.rotary = MultiHeadRotaryEmbedding(d_model, n_heads, **rotary_options)
        self.learnable = LearnablePositionalEmbedding(max_len, d_model)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, self.rotary.head_dim

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        require_float(x)
        require_rank(x, 3, "(batch, seq, d_model)")
        require_last_dim(x, self.d_model, "d_model")
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        return self.rotary(self.learnable(x, pos), pos)
