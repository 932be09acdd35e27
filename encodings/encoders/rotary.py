"""Rotary position embedding (RoPE).

Implements 000 §3.1-3.2 and 004 §3.1-3.2, §6-7, §10.3: each coordinate pair
``(x_a, x_b)`` at position ``m`` is rotated by ``m · θ_i`` with
``θ_i = base^(-2i/d)``::

    [y_a]   [cos mθ_i  -sin mθ_i] [x_a]
    [y_b] = [sin mθ_i   cos mθ_i] [x_b]

Pair layouts (which coordinates form pair ``i`` of a ``d``-vector):

* ``interleaved``  - pair ``(2i, 2i+1)``, the formula's layout (000 §3.1, 004 §3.2 maths);
* ``half_split``   - pair ``(i, i + d/2)``, the GPT-NeoX / Hugging Face convention;
* ``concatenated`` - input pairs interleaved, output written as
  ``[all first components, all second components]`` (004 §3.2's published code).
  It is a fixed permutation of ``interleaved`` (ROPE-13).

Rotary encoders take ``x`` of shape ``(batch, seq, heads, head_dim)`` except
:class:`MultiHeadRotaryEmbedding`, which takes ``(batch, seq, d_model)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .positions import FrequencyModule, angle_dtype, resolve_positions, rotation_angles
from .validation import (
    require_divisible,
    require_even,
    require_float,
    require_last_dim,
    require_positive,
    require_positive_int,
    require_rank,
)

LAYOUTS = ("interleaved", "half_split", "concatenated")


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate the pairs of ``x`` (last dim ``d``) by angles with ``cos``/``sin`` of last dim ``d/2``."""
    if layout == "half_split":
        half = x.shape[-1] // 2
        first, second = x[..., :half], x[..., half:]
    elif layout in ("interleaved", "concatenated"):
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    out_first = first * cos - second * sin
    out_second = first * sin + second * cos
    if layout == "interleaved":
        return torch.stack((out_first, out_second), dim=-1).flatten(-2)
    return torch.cat((out_first, out_second), dim=-1)


def rotated_width(head_dim: int, rotary_dim: int | None) -> int:
    """The rotated features of a head (partial rotary), checked: both even, ``rotary_dim ≤ head_dim``."""
    require_even(head_dim, "head_dim")
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    require_even(rotary_dim, "rotary_dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim={rotary_dim} must not exceed head_dim={head_dim}")
    return rotary_dim


def _check_heads_input(x: torch.Tensor, head_dim: int) -> None:
    require_float(x)
    require_rank(x, 4, "(batch, seq, heads, head_dim)")
    require_last_dim(x, head_dim, "head_dim")


class RotaryEmbedding(FrequencyModule):
    """RoPE in real arithmetic (000 §3.1, 004 §3.2), with a choice of pair layout.

    Options:
      * ``layout``: ``interleaved`` | ``half_split`` | ``concatenated``;
      * ``rotary_dim``: rotate only the first ``rotary_dim`` features (partial
        rotary); frequencies use ``rotary_dim``, the rest pass through;
      * ``scaling_factor``: linear position interpolation (004 §10.3), positions
        are divided by this factor;
      * ``frequencies``: a schedule ``(rotary_dim, base) -> θ`` in float64, such as
        :func:`.scaling.frequencies.yarn` (default ``base^(-2i/d)``);
      * ``length_dependent``: the schedule takes ``length=`` too, the call's largest position
        + 1, and is evaluated per call (dynamic NTK); nothing is kept between calls;
      * ``magnitude``: a factor on the rotated features (YaRN's attention factor).
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        rotary_dim: int | None = None,
        scaling_factor: float = 1.0,
        frequencies=None,
        magnitude: float = 1.0,
        length_dependent: bool = False,
    ):
        super().__init__()
        rotary_dim = rotated_width(head_dim, rotary_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        require_positive(scaling_factor, "scaling_factor")
        require_positive(magnitude, "magnitude")
        self.head_dim, self.rotary_dim, self.base = head_dim, rotary_dim, float(base)
        self.layout, self.scaling_factor, self.magnitude = layout, float(scaling_factor), float(magnitude)
        if length_dependent and frequencies is None:
            raise ValueError("length_dependent needs a frequencies schedule that takes length=")
        self.length_dependent = length_dependent
        self._schedule = frequencies
        self._init_frequencies(rotary_dim, self.base, None if length_dependent else frequencies)

    def frequencies_for(self, positions: torch.Tensor) -> torch.Tensor:
        """θ for this call: the stored schedule, or a length-dependent one at the call's length."""
        if not self.length_dependent:
            return self.inv_freq
        length = int(positions.max()) + 1 if positions.numel() else 0
        theta = torch.as_tensor(self._schedule(self.rotary_dim, self.base, length=length), dtype=torch.float64)
        return theta.to(positions.device)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype):
        angles = rotation_angles(positions, self.frequencies_for(positions), dtype, self.scaling_factor)
        return angles.cos(), angles.sin()

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        adt = angle_dtype(x.dtype)
        cos, sin = (t.unsqueeze(-2) for t in self.cos_sin(pos, adt))  # (B|1, S, 1, r/2)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        out = rotate(rot.to(adt), cos, sin, self.layout)
        out = (out * self.magnitude if self.magnitude != 1.0 else out).to(x.dtype)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, "
            f"layout={self.layout!r}, scaling_factor={self.scaling_factor}, magnitude={self.magnitude}"
        )


class RotaryEmbeddingComplex(FrequencyModule):
    """RoPE as complex multiplication ``(x_2i + i·x_2i+1) · e^{i m θ_i}`` (000 §3.2).

    Phasors ``e^{i p θ}`` are cached per angle dtype and device for positions
    ``[0, L)``. The cache starts at ``max_seq_len`` and grows on demand
    (to the next power of two) when a call reaches past it, up to
    ``max_cache_len`` (raised to ``max_seq_len`` if below it); positions past
    that, and fractional positions, are computed directly. Cached and uncached
    results are identical (ROPE-9).
    """

    def __init__(
        self,
        head_dim: int,
        max_seq_len: int = 2048,
        *,
        base: float = 10000.0,
        max_cache_len: int = 1 << 16,
    ):
        super().__init__()
        require_even(head_dim, "head_dim")
        require_positive_int(max_seq_len, "max_seq_len", "the phasor cache's first length")
        require_positive_int(max_cache_len, "max_cache_len", "the longest phasor cache")
        self.head_dim, self.base = head_dim, float(base)
        self.initial_len, self.max_cache_len = max_seq_len, max(max_cache_len, max_seq_len)
        self._init_frequencies(head_dim, self.base)
        self._phasor_cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        #: (batch, seq, offset, dtype, device) of a call without positions -> its phasors, a view of
        #: the table: a repeated call skips building and checking positions it has checked before
        self._slices: dict[tuple, torch.Tensor] = {}

    def _direct(self, positions: torch.Tensor, adt: torch.dtype) -> torch.Tensor:
        angles = rotation_angles(positions, self.inv_freq, adt)
        return torch.polar(torch.ones_like(angles), angles)

    def _table(self, needed: int, adt: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """Phasors of positions ``[0, L)``, ``L ≥ needed`` (None past ``max_cache_len``)."""
        key = (adt, device)
        cache = self._phasor_cache.get(key)
        if cache is None or cache.shape[0] < needed:
            if needed > self.max_cache_len:
                return None
            length = max(self.initial_len, 1 << max(needed - 1, 0).bit_length())
            length = min(length, self.max_cache_len)
            with torch.no_grad():
                cache = self._direct(torch.arange(length, device=device), adt)
            self._phasor_cache[key] = cache
            self._slices.clear()  # views of the table it replaces
        return cache

    def phasors(self, positions: torch.Tensor, adt: torch.dtype) -> torch.Tensor:
        if positions.is_floating_point():
            return self._direct(positions, adt)
        needed = int(positions.max()) + 1 if positions.numel() else 0
        table = self._table(needed, adt, positions.device)
        return self._direct(positions, adt) if table is None else table[positions]

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        key = (x.shape[0], x.shape[1], offset, adt, x.device) if positions is None and type(offset) is int else None
        ph = self._slices.get(key) if key is not None else None
        if ph is None:
            pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device, angle_dtype=adt)
            table = self._table(offset + x.shape[1], adt, x.device) if positions is None else None
            # consecutive positions read a slice of the table (no gather): the same phasors, fewer kernels
            ph = (table[offset:offset + x.shape[1]] if table is not None else self.phasors(pos, adt)).unsqueeze(-2)
            if key is not None and table is not None and not ph.requires_grad:
                if len(self._slices) >= 64:
                    self._slices.clear()
                self._slices[key] = ph
        # (…, d) floats seen as (…, d/2) complex, no copy; a dtype view has no autograd formula
        if x.dtype == adt and x.is_contiguous() and x.storage_offset() % 2 == 0 \
                and not ((x.requires_grad or ph.requires_grad) and torch.is_grad_enabled()):
            return (x.view(ph.dtype) * ph).view(adt)
        pairs = x.to(adt).reshape(*x.shape[:-1], self.head_dim // 2, 2)
        if not pairs.is_contiguous() or pairs.storage_offset() % 2:  # complex needs aligned pairs
            pairs = pairs.clone(memory_format=torch.contiguous_format)
        out = torch.view_as_real(torch.view_as_complex(pairs) * ph)
        return out.flatten(-2).to(x.dtype)

    def _apply(self, fn, *args, **kwargs):
        self._phasor_cache.clear()
        self._slices.clear()
        return super()._apply(fn, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, initial_len={self.initial_len}"


class MultiHeadRotaryEmbedding(nn.Module):
    """RoPE applied per head to ``(batch, seq, d_model)`` input (004 §7).

    ``d_model`` is split into ``n_heads`` heads of ``head_dim = d_model / n_heads``;
    every head is rotated with the same angles, computed from ``head_dim``.
    """

    def __init__(self, d_model: int, n_heads: int, **rotary_options):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = require_divisible(d_model, n_heads)
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        require_float(x)
        require_rank(x, 3, "(batch, seq, d_model)")
        require_last_dim(x, self.d_model, "d_model")
        heads = x.reshape(*x.shape[:2], self.n_heads, self.head_dim)
        return self.rotary(heads, positions, offset=offset).reshape(x.shape)
