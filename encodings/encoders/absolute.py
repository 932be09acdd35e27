"""Absolute position encodings added to the token embeddings: ``y = x + pe[p]``.

* :class:`LearnablePositionalEmbedding` - 000 §2.1: a trainable table of
  ``max_len × d_model`` parameters (ABS-1). Positions past the table raise
  (ABS-2).
* :class:`SinusoidalPositionalEncoding` - 000 §2.2: ``pe[p, 2i] = sin(p·θ_i)``,
  ``pe[p, 2i+1] = cos(p·θ_i)``, ``θ_i = base^(-2i/d)``, no parameters, any
  position (ABS-3, ABS-4).

Both take ``x`` of shape ``(batch, seq, d_model)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .positions import FrequencyModule, angle_dtype, resolve_positions, rotation_angles
from .validation import require_even, require_float, require_last_dim, require_positive_int, require_rank


def _check_tokens(x: torch.Tensor, d_model: int) -> None:
    require_float(x)
    require_rank(x, 3, "(batch, seq, d_model)")
    require_last_dim(x, d_model, "d_model")


class LearnablePositionalEmbedding(nn.Module):
    """BERT-style learned absolute positions (000 §2.1)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        require_positive_int(max_len, "max_len", "the learnable table's rows: positions 0 … max_len − 1")
        require_positive_int(d_model, "d_model")
        self.max_len, self.d_model = max_len, d_model
        self.table = nn.Parameter(torch.randn(max_len, d_model))  # nn.Embedding's N(0, 1) init, as in 000 §2.1

    def lookup(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.is_floating_point():
            if not bool((positions == positions.round()).all()):
                raise ValueError("a learnable table needs integer positions, got fractional ones")
            positions = positions.long()
        if positions.numel() and int(positions.max()) >= self.max_len:
            raise ValueError(
                f"position {int(positions.max())} is past the learnable table of max_len={self.max_len} "
                f"(valid positions are 0 … {self.max_len - 1})"
            )
        return self.table[positions]

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_tokens(x, self.d_model)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        return x + self.lookup(pos).to(x.dtype)


class SinusoidalPositionalEncoding(FrequencyModule):
    """Fixed sinusoidal table of the original Transformer (000 §2.2), computed for any position."""

    def __init__(self, d_model: int, *, base: float = 10000.0):
        super().__init__()
        require_even(d_model, "d_model")
        self.d_model, self.base = d_model, float(base)
        self._init_frequencies(d_model, self.base)

    def table(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``pe`` rows for ``positions``: shape ``positions.shape + (d_model,)``."""
        angles = rotation_angles(positions, self.inv_freq, angle_dtype(dtype))
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_tokens(x, self.d_model)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        return (x.to(angle_dtype(x.dtype)) + self.table(pos, x.dtype)).to(x.dtype)
