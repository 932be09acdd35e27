"""RoPE applied to q and k together: the call protocols of production code.

The rotation is 000 §3.1 and 004 §3.2's; what changes is how q and k reach it.

* :class:`CosSinRotaryEmbedding` with :func:`apply_rotary_cos_sin` - ``cos, sin = rope(x, position_ids)``
  of shape ``(batch, seq, rotary_dim)``, each angle twice in the half-split convention
  ``[θ_0 … θ_{r/2−1}, θ_0 … θ_{r/2−1}]``, then ``q' = q·cos + rotate_half(q)·sin`` and the same for k
  (the transformers and vLLM convention). Pairs are ``(i, i + r/2)``.
* :class:`XPosRotaryEmbedding` - ``module(q, k, q_positions, k_positions) -> (q', k')``: RoPE with
  xPos's per-pair scale (Sun et al. 2022, §3.1): q at ``p`` is scaled by ``ζ_i^{p/B}``, k by ``ζ_i^{−p/B}``,
  ``ζ_i = (2i/r + γ)/(1 + γ)``, so ``⟨q'_m, k'_n⟩`` depends on ``m − n`` only and decays with it.

Inputs are ``(batch, seq, heads, head_dim)``; positions ``(seq,)`` or ``(batch, seq)``. Angles are
formed in fp32 (float64 for float64 input), as in :mod:`.positions`.
"""

from __future__ import annotations

import torch

from .positions import FrequencyModule, angle_dtype, resolve_positions, rotation_angles
from .rotary import _check_heads_input, rotated_width
from .validation import require_even, require_float, require_positive


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x_a, x_b] -> [−x_b, x_a]`` on the last dim: the half-split pairing's quarter turn."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class CosSinRotaryEmbedding(FrequencyModule):
    """``cos, sin = module(x, position_ids)``: the half-split angle tables for ``x``'s positions."""

    def __init__(self, head_dim: int, *, base: float = 10000.0, rotary_dim: int | None = None):
        super().__init__()
        rotary_dim = rotated_width(head_dim, rotary_dim)
        self.head_dim, self.rotary_dim, self.base = head_dim, rotary_dim, float(base)
        self._init_frequencies(rotary_dim, self.base)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        pos = resolve_positions(x.shape[0], x.shape[1], position_ids, 0, x.device, angle_dtype=adt)
        angles = rotation_angles(pos, self.inv_freq, adt)
        angles = torch.cat((angles, angles), dim=-1)  # (B|1, S, r)
        return angles.cos(), angles.sin()


def apply_rotary_cos_sin(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """``(q·cos + rotate_half(q)·sin, k·cos + rotate_half(k)·sin)`` on the first ``cos.shape[-1]``
    features of every head; the rest pass through. Computed in the tables' dtype, returned in the inputs'."""
    r = cos.shape[-1]
    for name, t in (("q", q), ("k", k)):
        require_float(t, name)
        if t.dim() != 4 or t.shape[1] != cos.shape[1] or t.shape[-1] < r:
            raise ValueError(f"{name} must be (batch, seq={cos.shape[1]}, heads, head_dim ≥ {r}) to match cos/sin "
                             f"{tuple(cos.shape)}, got {tuple(t.shape)}")
    if sin.shape != cos.shape:
        raise ValueError(f"cos and sin must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)

    def apply(t):
        rot = t[..., :r].to(c.dtype)
        out = (rot * c + rotate_half(rot) * s).to(t.dtype)
        return torch.cat((out, t[..., r:]), dim=-1) if t.shape[-1] > r else out

    return apply(q), apply(k)


class XPosRotaryEmbedding(FrequencyModule):
    """Interleaved RoPE with xPos's scale, on q and k together (the pair protocol)."""

    def __init__(self, head_dim: int, *, base: float = 10000.0, scale_base: float = 512.0, gamma: float = 0.4):
        super().__init__()
        require_even(head_dim, "head_dim")
        require_positive(scale_base, "scale_base")
        require_positive(gamma, "gamma")
        self.head_dim, self.base, self.scale_base, self.gamma = head_dim, float(base), float(scale_base), float(gamma)
        self._init_frequencies(head_dim, self.base)

    def zeta(self, device=None) -> torch.Tensor:
        """``ζ_i = (2i/d + γ)/(1 + γ)`` in float64."""
        i = torch.arange(0, self.head_dim, 2, dtype=torch.float64, device=device)
        return (i / self.head_dim + self.gamma) / (1 + self.gamma)

    def _encode(self, x: torch.Tensor, positions, sign: float) -> torch.Tensor:
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, 0, x.device, angle_dtype=adt)
        angles = rotation_angles(pos, self.inv_freq, adt).unsqueeze(-2)  # (B|1, S, 1, d/2)
        scale = self.zeta(x.device).to(adt) ** (sign * pos.to(adt).unsqueeze(-1) / self.scale_base).unsqueeze(-2)
        cos, sin = angles.cos() * scale, angles.sin() * scale
        a, b = x.to(adt)[..., 0::2], x.to(adt)[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor):
        return self._encode(q, q_positions, 1.0), self._encode(k, k_positions, -1.0)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, scale_base={self.scale_base}, gamma={self.gamma}"


def xpos_scale(scale_base: float = 512.0, gamma: float = 0.4):
    """The geometry's ``position_scale`` for xPos: ``(p, r, side) -> ζ_i^{±p/B}`` in float64."""

    def scale(positions: torch.Tensor, rotary_dim: int, side: str) -> torch.Tensor:
        i = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=positions.device)
        zeta = (i / rotary_dim + gamma) / (1 + gamma)
        sign = 1.0 if side == "q" else -1.0
        return zeta ** (sign * positions.to(torch.float64).unsqueeze(-1) / scale_base)

    return scale
