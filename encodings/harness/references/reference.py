"""Float64 references: the formulas every spec and summary compares an encoder with.

* RoPE (000 §3.1, 004 §3.2): pair ``i`` at position ``p`` turns by ``(p / s)·θ_i``,
  ``θ_i = base^(−2i/r)`` over the rotated width ``r`` (or the geometry's own schedule, and times
  its magnitude), in the record's layout;
* attention (004 §4): ``softmax(q kᵀ / √d) v``, optionally causal;
* RoFormer §3.4.3's long-term decay bound ``B(r) = (1/(d/2))·Σ_j |S_j|``, ``S_j = Σ_{k<j} e^{i r θ_k}``;
* the index maps between a layout's coordinates and the formula's interleaved pairs.
"""

from __future__ import annotations

import math

import torch

from ..catalogue.records import RotaryGeometry

#: Positions far past any table (ROPE-10a, ROPE-11): 10^2 … 10^6.
FAR_POSITIONS = (10**2, 10**3, 10**4, 10**5, 10**6)
#: Offsets m − n at which relative-position checks compare logits.
DELTAS = (0, 1, 7, 100)


def reference_frequencies(dim: int, base: float) -> torch.Tensor:
    """θ_i = base^(-2i/dim), from the formula, in float64."""
    return torch.tensor([base ** (-2.0 * i / dim) for i in range(dim // 2)], dtype=torch.float64)


def roformer_bound(theta: torch.Tensor, distances) -> torch.Tensor:
    """RoFormer §3.4.3: ``B(r) = (1/(d/2))·Σ_j |S_j|`` with ``S_j = Σ_{k<j} e^{i r θ_k}``, in float64."""
    r = torch.as_tensor(distances, dtype=torch.float64)
    theta = theta.to(torch.float64)
    phases = torch.polar(torch.ones(len(r), len(theta), dtype=torch.float64), r[:, None] * theta[None])
    return phases.cumsum(dim=-1).abs().mean(dim=-1)


def call_length(positions) -> int:
    """The length a length-dependent schedule sees for a call: its largest position + 1."""
    positions = torch.as_tensor(positions)
    return int(positions.max()) + 1 if positions.numel() else 0


def reference_rotation(x: torch.Tensor, positions: torch.Tensor, geometry: RotaryGeometry, head_dim: int,
                       side: str = "q", length: int | None = None, transpose: bool = False,
                       axis_positions: bool = False) -> torch.Tensor:
    """Float64 RoPE of per-head ``x`` (…, seq, heads, head_dim) at ``positions`` (…, seq), in the geometry's
    layout, as applied to ``side`` (q or k). ``length`` is the call's length for a length-dependent schedule
    (default: the largest of ``positions`` + 1). ``transpose`` applies the transposed map ``M_pᵀ``
    (the rotation by −p with the same scale), which is what a correct backward pass applies.
    ``axis_positions``: ``positions`` is ``(axes, …, seq)``, a position per axis of a multi-axis
    geometry, pair ``i`` turned by its axis's position (or by ``Σ_a θ_{a,i}·p_a``, RoPE-Mixed)."""
    x = x.to(torch.float64)
    r = geometry.rotary_dim(head_dim)
    length = call_length(positions) if length is None else length
    theta = geometry.inverse_frequencies(r, length=length).to(x.device)
    p = positions.to(device=x.device, dtype=torch.float64)
    if axis_positions and geometry.mixed_frequencies is not None:
        mixed = torch.as_tensor(geometry.mixed_frequencies(r), dtype=torch.float64).to(x.device)
        angle = torch.einsum("a...s,ai->...si", p, mixed).unsqueeze(-2)
    elif axis_positions:
        per_pair = p[geometry.pair_axes(r).to(x.device)].movedim(0, -1)  # (…, seq, r/2)
        angle = (per_pair / geometry.scaling_factor * theta).unsqueeze(-2)
    else:
        angle = (p.unsqueeze(-1) / geometry.scaling_factor * theta).unsqueeze(-2)  # (…, seq, 1, r/2)
    angle = -angle if transpose else angle
    p = p[0] if axis_positions else p
    scale = geometry.scale(p, r, side, length).unsqueeze(-2)
    cos, sin = torch.cos(angle) * scale, torch.sin(angle) * scale
    if geometry.layout == "half_split":
        a, b = x[..., : r // 2], x[..., r // 2 : r]
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
    ya, yb = a * cos - b * sin, a * sin + b * cos
    out = x.clone()
    if geometry.layout == "interleaved":
        out[..., 0:r:2], out[..., 1:r:2] = ya, yb
    else:
        out[..., :r] = torch.cat((ya, yb), dim=-1)
    return out


def reference_attention(q, k, v, *, causal=False) -> torch.Tensor:
    """``softmax(q kᵀ / √d) v`` in float64, per head; inputs (batch, seq, heads, d)."""
    q, k, v = (t.to(torch.float64).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(dim=-1) @ v).transpose(1, 2)


def _within_rotary_part(order: torch.Tensor, dim: int) -> torch.Tensor:
    """Extend a permutation of the rotated features by the identity on the rest."""
    return torch.cat((order, torch.arange(len(order), dim)))


def output_pair_order(geometry: RotaryGeometry, dim: int) -> torch.Tensor:
    """Index map from the formula's interleaved output to a layout's output coordinates.

    ``y_layout = y_formula[..., order]`` for interleaved and concatenated layouts; for
    half_split the input must be permuted the same way as well (pairs ``(i, i + r/2)``).
    Only the rotated part ``r = geometry.rotary_dim(dim)`` is permuted.
    """
    r = geometry.rotary_dim(dim)
    if geometry.layout == "interleaved":
        return torch.arange(dim)
    return _within_rotary_part(torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2))), dim)


def input_pair_order(geometry: RotaryGeometry, dim: int) -> torch.Tensor:
    """``x_formula = x[..., order]`` puts a layout's pairs at ``(2i, 2i+1)``."""
    r = geometry.rotary_dim(dim)
    if geometry.layout == "half_split":
        half = torch.arange(r // 2)
        return _within_rotary_part(torch.stack((half, half + r // 2), dim=-1).flatten(), dim)
    return torch.arange(dim)
