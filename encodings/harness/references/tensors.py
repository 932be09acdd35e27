"""Tensors the specs and summaries feed encoders, and the views they read outputs through."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..catalogue.records import BuildConfig, EncoderRecord


#: Drawn inputs kept for reuse: a spec suite draws the same (shape, seed) for every encoder, and
#: a copy costs less than a draw. At most this many elements are kept, the least recently used
#: dropped first; an input of more than a sixteenth of them is drawn each time.
_KEPT_ELEMENTS = 2**22
_kept: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_kept_elements = 0


def randn(shape, seed: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Standard normal values drawn in float64 from ``seed``, then cast (same values for every dtype):
    a new tensor on every call, whatever the caller did with the last one."""
    global _kept_elements
    key = (tuple(int(n) for n in shape), int(seed), dtype, str(device))
    kept = _kept.get(key)
    if kept is not None:
        _kept.move_to_end(key)
        return kept.clone()
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.randn(*key[0], generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)
    if drawn.numel() <= _KEPT_ELEMENTS // 16:
        _kept[key], _kept_elements = drawn, _kept_elements + drawn.numel()
        while _kept_elements > _KEPT_ELEMENTS:
            _kept_elements -= _kept.popitem(last=False)[1].numel()
        return drawn.clone()
    return drawn


def as_heads(t: torch.Tensor, config: BuildConfig) -> torch.Tensor:
    """View ``(batch, seq, d_model)`` as ``(batch, seq, heads, head_dim)``; rank-4 input is returned as is."""
    return t if t.dim() == 4 else t.reshape(*t.shape[:2], config.n_heads, t.shape[-1] // config.n_heads)


def from_heads(t: torch.Tensor, record: EncoderRecord) -> torch.Tensor:
    """Back to the record's input layout."""
    return t.flatten(-2) if record.calling.input_layout == "bsd" else t


def max_error(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |observed − expected|`` in float64."""
    return float((observed.detach().to(torch.float64) - expected.detach().to(torch.float64)).abs().max())
