"""Explicit token positions and rotation angles, shared by every encoder.

Positions are given either as a start ``offset`` (KV-cache decoding: token ``j``
sits at ``offset + j``) or as an explicit tensor of shape ``(seq,)`` or
``(batch, seq)``. Angles ``p · θ_i`` are always formed in float32 or wider:
float64 inputs get float64 angles, every other float dtype gets float32.
"""

from __future__ import annotations

import torch
from torch import nn

from .validation import require_base


def angle_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """The dtype in which angles are formed for an input of ``input_dtype``."""
    return torch.float64 if input_dtype == torch.float64 else torch.float32


def inverse_frequencies(
    rotary_dim: int, base: float = 10000.0, *, dtype=torch.float32, device=None
) -> torch.Tensor:
    """``θ_i = base^(-2i/rotary_dim)`` for ``i = 0 … rotary_dim/2 - 1``, computed in float64."""
    require_base(base)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
    return (base ** -exponents).to(dtype=dtype, device=device)


def exact_position_limit(dtype: torch.dtype | None) -> int:
    """The largest position whose angles ``p·θ`` a dtype forms from an exact ``p``: 2^24 for
    float32 angles, 2^53 for float64 (and for integer tables, which form no angle)."""
    return int(2 / torch.finfo(torch.float64 if dtype is None else dtype).eps)


def resolve_positions(
    batch: int,
    seq_len: int,
    positions: torch.Tensor | None,
    offset: int,
    device: torch.device,
    *,
    angle_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Return positions of shape ``(1 or batch, seq_len)`` on ``device``.

    Integer positions stay int64; float positions (a learned scale) keep their
    dtype and their autograd graph. Positions past :func:`exact_position_limit` of
    ``angle_dtype`` are refused: their angles could not be formed exactly. Positions
    are on ``device`` or on the CPU (then moved); any other device is refused.
    """
    limit = exact_position_limit(angle_dtype)
    where = f"{angle_dtype} angles represent" if angle_dtype is not None else "float64 holds"
    if positions is None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0:
            raise ValueError(f"offset must be non-negative, got {offset}")
        if offset + seq_len - 1 > limit:
            raise ValueError(f"offset={offset} with {seq_len} tokens reaches position {offset + seq_len - 1}, "
                             f"past {limit}, the largest position {where} exactly")
        return torch.arange(offset, offset + seq_len, device=device).unsqueeze(0)
    if offset != 0:
        raise ValueError("give either positions or offset, not both")
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or real floating point, got {positions.dtype}")
    target = torch.device(device)
    if positions.device.type not in ("cpu", target.type) or positions.device.index not in (None, target.index):
        raise ValueError(f"positions are on {positions.device} but the input is on {target}; "
                         f"give positions on {target}{'' if target.type == 'cpu' else ' (or on the CPU)'}")
    given_shape = tuple(positions.shape)
    if positions.dim() == 1:
        positions = positions.unsqueeze(0)
    if positions.dim() != 2 or positions.shape[1] != seq_len or positions.shape[0] not in (1, batch):
        raise ValueError(
            f"positions must have shape (seq,)=({seq_len},) or (batch, seq)=({batch}, {seq_len}), got {given_shape}"
        )
    if positions.device.type == "meta":  # meta input and positions: no values to check
        return positions
    if positions.is_floating_point() and not bool(torch.isfinite(positions).all()):
        raise ValueError("positions must be finite, got NaN or infinity")
    if positions.numel():
        # int64 positions compared as integers: past 2^53 a float64 copy would round them onto the limit
        low, high = (v.item() for v in torch.aminmax(positions.detach() if positions.is_floating_point()
                                                    else positions.long()))
        if low < 0:
            raise ValueError(f"positions must be non-negative, got minimum {low!r}")
        if high > limit:
            raise ValueError(f"positions must be at most {limit}, the largest position {where} exactly, "
                             f"got maximum {high!r}")
    return positions.to(device)


def rotation_angles(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, scaling_factor: float = 1.0
) -> torch.Tensor:
    """Angles ``(p / scaling_factor) · θ_i`` of shape ``positions.shape + (len(θ),)``, in ``dtype``."""
    p = positions.to(dtype)
    if scaling_factor != 1.0:
        p = p / scaling_factor
    return p.unsqueeze(-1) * inv_freq.to(device=p.device, dtype=dtype)


class FrequencyModule(nn.Module):
    """Base for modules with an ``inv_freq`` buffer that stays float64 through ``.to(dtype)``.

    ``frequencies(dim, base)`` gives θ in float64 (default: ``base^(-2i/dim)``; the schedules of
    :mod:`.scaling.frequencies` for long context).
    """

    def _init_frequencies(self, dim: int, base: float, frequencies=None) -> None:
        self._frequency_args = (dim, base, frequencies)
        self.register_buffer("inv_freq", self._frequencies(), persistent=False)

    def _frequencies(self, device=None) -> torch.Tensor:
        dim, base, frequencies = self._frequency_args
        if frequencies is None:
            return inverse_frequencies(dim, base, dtype=torch.float64, device=device)
        theta = torch.as_tensor(frequencies(dim, base), dtype=torch.float64)
        if theta.shape != (dim // 2,) or not bool(torch.isfinite(theta).all()) or not bool((theta > 0).all()):
            raise ValueError(f"frequencies({dim}, {base}) must give {dim // 2} finite positive values, got {theta}")
        return theta.to(device)

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float64:
            self.inv_freq = self._frequencies(self.inv_freq.device)
        return self
