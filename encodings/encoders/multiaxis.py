"""Multi-axis RoPE: a position per axis (time, height, width), each axis turning its own pairs.

Pair ``i`` of a head is turned by ``p_{a(i)} · θ_i``, where ``a(i)`` is the axis that owns pair ``i``:

* **M-RoPE** (Qwen2-VL, arXiv 2409.12191 §2.1): ``θ_i = base^(−2i/d)`` over the whole head, as
  in 1D RoPE; the axes own ``sections`` of the pairs, **contiguous** (Qwen2-VL, Qwen2.5-VL: axis
  0's ``sections[0]`` pairs first) or **interleaved** (Qwen3-VL, Qwen3.5: pair ``i`` belongs to
  axis ``a = i mod A`` while ``i < A·sections[a]``, to axis 0 otherwise) or **spatial_interleaved**
  (Ernie 4.5 VL: axes ``1…A−1``, of equal sections, take turns over the first pairs, H W H W …, and
  axis 0 owns the last ``sections[0]``). With equal ids on every axis (text) it is 1D RoPE with the
  same base and pairing: the paper's claim.
* **Axial 2D RoPE** (Heo et al., "Rotary Position Embedding for Vision Transformer", ECCV 2024,
  §3.2): each axis has a schedule of its own over its own pairs, ``θ_j = base^(−2j/(2·n_a))`` for
  axis ``a``'s ``n_a`` pairs (``schedule="per_axis"``).
* **RoPE-Mixed** (Heo et al. §3.3): pair ``i`` turns by ``Σ_a θ_{a,i}·p_a`` with learnable
  ``θ_{a,i}`` (:class:`MixedRotaryEmbedding`).

Positions: ``None`` (``offset + j``), ``(seq,)`` or ``(batch, seq)`` are text, the same id on every
axis; ``(axes, batch, seq)`` gives each axis its own, as transformers passes M-RoPE
``position_ids``. Angles are formed in float32 (float64 for float64 input), as for 1D RoPE.
"""

from __future__ import annotations

import torch
from torch import nn

from .positions import angle_dtype, resolve_positions
from .rotary import LAYOUTS, _check_heads_input, rotate, rotated_width
from .validation import require_base, require_positive_int

ORDERS = ("contiguous", "interleaved", "spatial_interleaved")
SCHEDULES = ("shared", "per_axis")


def pair_axes(sections: tuple[int, ...], order: str = "contiguous") -> torch.Tensor:
    """The axis that owns each pair (int64, one entry per pair), for ``sections`` pairs per axis."""
    sections = tuple(int(n) for n in sections)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if not sections or any(n < 1 for n in sections):
        raise ValueError(f"sections must give at least one pair to each axis, got {sections}")
    pairs, axes = sum(sections), len(sections)
    if order == "contiguous":
        return torch.repeat_interleave(torch.arange(axes), torch.tensor(sections))
    if order == "spatial_interleaved":  # H W H W … then T: the spatial axes in turn, axis 0 last
        if axes < 2 or len(set(sections[1:])) != 1:
            raise ValueError(f"spatial_interleaved needs at least 2 axes and equal sections on axes 1…, got {sections}")
        turns = torch.arange(1, axes).repeat(sections[1])
        return torch.cat((turns, torch.zeros(sections[0], dtype=torch.long)))
    owner = torch.zeros(pairs, dtype=torch.long)
    for axis in range(1, axes):
        owner[torch.arange(axis, min(axes * sections[axis], pairs), axes)] = axis
    counts = torch.bincount(owner, minlength=axes).tolist()
    if counts != list(sections):
        raise ValueError(f"interleaved sections {sections} do not fit {pairs} pairs: the axes would own {counts}")
    return owner


def axis_frequencies(sections: tuple[int, ...], order: str = "contiguous", schedule: str = "shared",
                     base: float = 10000.0) -> torch.Tensor:
    """θ per pair in float64: ``base^(−2i/d)`` over the head (``shared``), or each axis's own
    ``base^(−2j/(2·n_a))`` over its ``n_a`` pairs, in the order the axes own them (``per_axis``)."""
    require_base(base)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    owner = pair_axes(sections, order)
    pairs = len(owner)
    if schedule == "shared":
        return float(base) ** -(torch.arange(pairs, dtype=torch.float64) * 2 / (2 * pairs))
    theta = torch.empty(pairs, dtype=torch.float64)
    for axis, n in enumerate(sections):
        theta[owner == axis] = float(base) ** -(torch.arange(n, dtype=torch.float64) * 2 / (2 * n))
    return theta


def axis_positions(x: torch.Tensor, positions: torch.Tensor | None, offset: int, axes: int) -> torch.Tensor:
    """Positions of shape ``(axes, batch or 1, seq)``: text positions repeated on every axis."""
    batch, seq = x.shape[0], x.shape[1]
    adt = angle_dtype(x.dtype)
    if positions is None or positions.dim() < 3:
        text = resolve_positions(batch, seq, positions, offset, x.device, angle_dtype=adt)
        return text.unsqueeze(0).expand(axes, *text.shape)
    if positions.dim() != 3 or positions.shape[0] != axes:
        raise ValueError(f"positions with an axis dimension must have shape (axes={axes}, batch, seq), "
                         f"got {tuple(positions.shape)}")
    if offset != 0:
        raise ValueError("give either positions or offset, not both")
    return torch.stack([resolve_positions(batch, seq, p, 0, x.device, angle_dtype=adt) for p in positions])


class MultiAxisRotaryEmbedding(nn.Module):
    """M-RoPE and axial 2D RoPE: ``sections`` pairs per axis, ``order`` contiguous or interleaved,
    ``schedule`` shared (M-RoPE) or per axis (axial 2D)."""

    def __init__(self, head_dim: int, sections, *, base: float = 10000.0, order: str = "contiguous",
                 schedule: str = "shared", layout: str = "half_split", rotary_dim: int | None = None):
        super().__init__()
        require_positive_int(head_dim, "head_dim")
        self.sections = tuple(int(n) for n in sections)
        self.rotary_dim = rotated_width(head_dim, rotary_dim)
        if 2 * sum(self.sections) != self.rotary_dim:
            raise ValueError(f"sections {self.sections} give {sum(self.sections)} pairs; rotary_dim={self.rotary_dim} "
                             f"has {self.rotary_dim // 2}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.head_dim, self.base, self.order, self.schedule, self.layout = head_dim, float(base), order, schedule, layout
        self.register_buffer("pair_axis", pair_axes(self.sections, order), persistent=False)
        self.register_buffer("inv_freq", axis_frequencies(self.sections, order, schedule, base), persistent=False)

    @property
    def axes(self) -> int:
        return len(self.sections)

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float64:  # θ stays float64 through .to(dtype)
            self.inv_freq = axis_frequencies(self.sections, self.order, self.schedule, self.base).to(
                self.inv_freq.device)
        return self

    def angles(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``p_{a(i)}·θ_i`` of shape ``(batch or 1, seq, pairs)`` for ``(axes, batch or 1, seq)`` positions."""
        per_pair = positions.to(dtype)[self.pair_axis]  # (pairs, batch, seq)
        return per_pair.movedim(0, -1) * self.inv_freq.to(device=per_pair.device, dtype=dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        angles = self.angles(axis_positions(x, positions, offset, self.axes), adt).unsqueeze(-2)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        out = rotate(rot.to(adt), angles.cos(), angles.sin(), self.layout).to(x.dtype)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, sections={self.sections}, base={self.base}, "
                f"order={self.order!r}, schedule={self.schedule!r}, layout={self.layout!r}")


def mixed_frequencies(head_dim: int, theta: float = 10.0, seed: int = 0) -> torch.Tensor:
    """RoPE-Mixed's initial ``θ_{a,i}`` for 2 axes (Heo et al. §3.3, as their reference code draws it),
    ``(2, head_dim/2)`` float64: magnitudes ``theta^(−4j/d)`` for ``j < d/4``, pair ``j`` along a random
    direction ``φ`` and pair ``j + d/4`` along ``φ + π/2``, ``φ`` drawn from ``seed``."""
    if head_dim % 4:
        raise ValueError(f"RoPE-Mixed needs head_dim divisible by 4, got {head_dim}")
    quarter = head_dim // 4
    magnitude = float(theta) ** -(torch.arange(quarter, dtype=torch.float64) * 4 / head_dim)
    phi = torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 * torch.pi
    directions = torch.cat([phi.expand(quarter), (phi + torch.pi / 2).expand(quarter)])
    return torch.stack([directions.cos(), directions.sin()]) * magnitude.repeat(2)


class MixedRotaryEmbedding(nn.Module):
    """RoPE-Mixed on 2 axes: pair ``i`` turns by ``θ_{x,i}·p_x + θ_{y,i}·p_y``, ``θ`` a trainable
    ``(2, pairs)`` parameter (initialised by :func:`mixed_frequencies`)."""

    def __init__(self, head_dim: int, *, theta: float = 10.0, seed: int = 0, layout: str = "interleaved"):
        super().__init__()
        require_positive_int(head_dim, "head_dim")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.head_dim, self.layout, self.axes = head_dim, layout, 2
        self.theta = nn.Parameter(mixed_frequencies(head_dim, theta, seed))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        p = axis_positions(x, positions, offset, self.axes).to(adt)  # (axes, batch, seq)
        angles = torch.einsum("abs,ai->bsi", p, self.theta.to(adt)).unsqueeze(-2)
        return rotate(x.to(adt), angles.cos(), angles.sin(), self.layout).to(x.dtype)
