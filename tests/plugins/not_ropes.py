"""Targets for ``--identify`` that are no RoPE (tests/test_identify.py): each should stop the run
with one line saying what identify measured, or what the target itself did."""

import time

import torch


def identity(x, positions):
    """Moves nothing: no pair of coordinates turns with position."""
    return x


_MIXING = torch.randn(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def random_linear(x, positions):
    """A fixed dense linear map: every coordinate mixes with every other, whatever the position."""
    return x @ _MIXING.to(x.dtype)


def all_nan(x, positions):
    return torch.full_like(x, float("nan"))


def raises(x, positions):
    raise RuntimeError("the rotary cache was never built")


def hangs(x, positions):
    while True:
        time.sleep(0.05)
