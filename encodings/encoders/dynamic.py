"""Dynamic position encoding (000 §5.3), a working version.

``y = 0.7 · R_p x + 0.3 · R_{s·p} x`` with a learnable scale ``s`` and explicit,
possibly non-contiguous positions ``p``. At ``s = 1`` it equals plain RoPE
(DYN-3). For ``s ≠ 1`` the mix of two rotations is no rotation: the norm
is not preserved and ``⟨y_m, y_n⟩`` has cross terms in ``s·n − m``, so it no
longer depends on ``m − n`` alone (ROPE-3, ROPE-4 refuted).

Input ``(batch, seq, heads, head_dim)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .positions import angle_dtype, resolve_positions
from .rotary import RotaryEmbeddingComplex, _check_heads_input


class DynamicPositionalEncoding(nn.Module):
    """``0.7 · R_p x + 0.3 · R_{s·p} x`` with a learnable scale ``s`` (000 §5.3)."""

    def __init__(
        self,
        head_dim: int,
        max_seq_len: int = 2048,
        *,
        base: float = 10000.0,
        mix: tuple[float, float] = (0.7, 0.3),
        initial_scale: float = 1.0,
    ):
        super().__init__()
        weights = tuple(mix)
        if len(weights) != 2 or not all(isinstance(w, (int, float)) and math.isfinite(w) and w >= 0 for w in weights):
            raise ValueError(f"mix must be two finite non-negative weights (base, scaled), got {mix!r}")
        if not (isinstance(initial_scale, (int, float)) and math.isfinite(initial_scale) and initial_scale > 0):
            raise ValueError(f"initial_scale must be a finite positive number, got {initial_scale!r}")
        self.base_encoder = RotaryEmbeddingComplex(head_dim, max_seq_len, base=base)
        self.head_dim, self.mix = head_dim, tuple(float(w) for w in weights)
        self.dynamic_scale = nn.Parameter(torch.full((1,), float(initial_scale)))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        scale = float(self.dynamic_scale.detach())
        if not (math.isfinite(scale) and scale >= 0):  # training moved it: s·p would be no positions at all
            raise ValueError(f"dynamic_scale must be finite and non-negative (it scales the positions p to s·p), "
                             f"got {scale!r}")
        adt = angle_dtype(x.dtype)  # s·p is an angle factor: never form it in half precision
        scaled = pos.to(adt) * self.dynamic_scale.to(adt)
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, scaled)
