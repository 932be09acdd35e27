"""Tensors the specs and summaries feed encoders, and the views they read outputs through."""

from __future__ import annotations

import torch

from .records import BuildConfig, EncoderRecord


def randn(shape, seed: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Standard normal values drawn in float64 from ``seed``, then cast (same values for every dtype)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)


def as_heads(t: torch.Tensor, config: BuildConfig) -> torch.Tensor:
    """View ``(batch, seq, d_model)`` as ``(batch, seq, heads, head_dim)``; rank-4 input is returned as is."""
    return t if t.dim() == 4 else t.reshape(*t.shape[:2], config.n_heads, t.shape[-1] // config.n_heads)


def from_heads(t: torch.Tensor, record: EncoderRecord) -> torch.Tensor:
    """Back to the record's input layout."""
    return t.flatten(-2) if record.calling.input_layout == "bsd" else t


def max_error(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |observed − expected|`` in float64."""
    return float((observed.detach().to(torch.float64) - expected.detach().to(torch.float64)).abs().max())
