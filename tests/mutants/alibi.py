"""Defects of ALiBi, the length experiment's baseline."""

from __future__ import annotations

import torch
from torch import nn

from posenc import ALiBiBias

from ._scaffold import mutant, placed


class BiasOfQueryPosition(ALiBiBias):
    def forward(self, q_positions, k_positions=None, *, dtype=torch.float32):
        bias = super().forward(q_positions, k_positions, dtype=dtype)
        q = q_positions.to(dtype)
        return bias - 1e-3 * self.slopes.to(dtype)[:, None, None] * q[None, :, None]  # a term in m alone


@mutant("alibi", fails={"ALIBI-1"})
def alibi_bias_depends_on_the_query_position(c):
    """ALiBi with a small extra term in the query's absolute position"""
    return placed(BiasOfQueryPosition(c.n_heads), c)


@mutant("alibi", fails={"ALIBI-2"})
def alibi_without_causal_mask(c):
    """ALiBi built non-causal: −m_h·|m − n| and no mask on later keys"""
    # The non-causal (encoder) variant of the authors' code used in a decoder.
    return placed(ALiBiBias(c.n_heads, causal=False), c)


class SlopesOneOverHead(ALiBiBias):
    def __init__(self, n_heads):
        super().__init__(n_heads)
        self.slopes = 1.0 / torch.arange(1, n_heads + 1, dtype=torch.float64)

    def _apply(self, fn, *args, **kwargs):
        return nn.Module._apply(self, fn, *args, **kwargs)


@mutant("alibi", fails={"ALIBI-3"})
def alibi_slopes_one_over_head(c):
    """ALiBi with slopes 1/h instead of the paper's geometric 2^(−8h/n)"""
    return placed(SlopesOneOverHead(c.n_heads), c)


class BiasWithoutChecks(ALiBiBias):
    def forward(self, q_positions, k_positions=None, *, dtype=torch.float32):
        q = q_positions.reshape(-1).to(torch.float64)
        k = q if k_positions is None else k_positions.reshape(-1).to(torch.float64)
        distance = q[:, None] - k[None, :]
        bias = -self.slopes[:, None, None] * distance
        return bias.masked_fill(distance < 0, float("-inf")).to(dtype)


@mutant("alibi", fails={"contract"})
def alibi_positions_unchecked(c):
    """ALiBi that flattens any positions and accepts fractional and negative ones"""
    return placed(BiasWithoutChecks(c.n_heads), c)
