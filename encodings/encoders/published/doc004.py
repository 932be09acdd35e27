"""004's code as published ("RoPE in the Transformer"), §3.1-3.3, §4-5.1 and §7.

004 writes a script, not modules: the classes here hold its tensors (``W_Q``, ``W_K``, ``W_V``)
and run its lines in order. §3.1's ``get_rope_angles`` and §3.2's ``apply_rope`` are transcribed
line for line. §7's multi-head step raises for every shape but ``seq_len == num_heads``; its
``FIX`` lines (``fixed=False`` restores the published ones) are the smallest that make it run.
§10.3 names a "linear scaling variant" but gives no code.

Harness adapter: the attention's start offset is reached with §3.1's own function, by computing
the angles for ``offset + seq_len`` positions and keeping the last ``seq_len`` rows.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .doc000 import offset_of

FIXES = (
    ("004 §7", "MultiHeadRoPE", "angles from `head_dim` (the text computes them from `d_k = d_model`)",
     "RuntimeError: the size of tensor a (head_dim/2) must match the size of tensor b (d_model/2)"),
    ("004 §7", "MultiHeadRoPE", "sin/cos get a heads axis (`[:, :, None, :]`)",
     "RuntimeError: the size of tensor a (num_heads) must match the size of tensor b (seq_len): "
     "(1, seq, d/2) broadcasts seq against the heads axis; where seq_len = num_heads (004 §7's own "
     "example: seq 4, 4 heads) nothing is raised and the output comes back wrongly shaped "
     "((1, 4, 4, 2) in, (1, 4, 4, 8) out)"),
)


# §3.1
def get_rope_angles(seq_len, dim):
    pos = torch.arange(seq_len).float()
    i = torch.arange(0, dim, 2).float()
    inv_freq = 1.0 / (10000 ** (i / dim))
    theta = torch.outer(pos, inv_freq)
    return theta


# §3.2
def apply_rope(x, sin, cos):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    x_rot = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return x_rot


def _sin_cos(seq_len, dim, offset=0):
    """§3.2's ``sin = theta.sin()[None, :, :]`` and ``cos``, for positions ``offset … offset + seq_len − 1``."""
    theta = get_rope_angles(offset + seq_len, dim)[offset:]
    return theta.sin()[None, :, :], theta.cos()[None, :, :]


class RoPE004(nn.Module):
    """§3.3: ``Q_rot = apply_rope(Q, sin, cos)`` on one head's ``(batch, seq_len, d_k)`` tensor.

    The harness's per-head input ``(batch, seq, heads, head_dim)`` is given to it one head at a
    time, each head a ``(batch, seq, d_k)`` tensor as in the document (harness adapter)."""

    def forward(self, x):
        sin, cos = _sin_cos(x.shape[1], x.shape[-1])
        sin, cos = sin.to(x.device), cos.to(x.device)
        return torch.stack([apply_rope(x[:, :, h], sin, cos) for h in range(x.shape[2])], dim=2)


class Attention004(nn.Module):
    """§2.2, §4 and §5.1: bias-free Q, K, V projections; RoPE on Q and K; ``softmax(Q'K'ᵀ / √d_k) V``;
    no mask, no output projection. The document runs one head with ``d_k = d_model`` and notes that
    usually ``d_k = d_model / num_heads``: here every head runs §5.1's lines with ``d_k = head_dim``
    (harness adapter: the heads are concatenated, as §7 says)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)

    def project(self, E):
        return tuple(w(E).view(*E.shape[:2], self.num_heads, self.d_k) for w in (self.W_Q, self.W_K, self.W_V))

    def attend(self, Q, K, V, positions=None, *, offset=0):
        """Per-head q, k, v ``(batch, seq, heads, d_k)``; ``offset`` shifts §3.1's positions (harness adapter)."""
        sin, cos = _sin_cos(Q.shape[1], self.d_k, offset_of(positions, offset, Q.shape[1]))
        sin, cos = sin.to(Q.device), cos.to(Q.device)
        heads = []
        for h in range(Q.shape[2]):
            Q_rot = apply_rope(Q[:, :, h], sin, cos)
            K_rot = apply_rope(K[:, :, h], sin, cos)
            scores = torch.matmul(Q_rot, K_rot.transpose(-2, -1)) / (self.d_k ** 0.5)
            attn = torch.softmax(scores, dim=-1)
            heads.append(torch.matmul(attn, V[:, :, h]))
        return torch.stack(heads, dim=2)

    def forward(self, E, positions=None, *, offset=0):
        return self.attend(*self.project(E), positions, offset=offset).flatten(-2)


class MultiHeadRoPE(nn.Module):
    """§7: Q of shape ``(batch, seq, d_model)`` viewed as ``(batch, seq, num_heads, head_dim)``, then
    ``apply_rope(Q, sin, cos)`` with §3.1's angles. Takes the viewed ``(batch, seq, heads, head_dim)``."""

    def __init__(self, d_model, num_heads, fixed=True):
        super().__init__()
        self.d_k, self.num_heads, self.fixed = d_model, num_heads, fixed

    def forward(self, Q):
        head_dim = Q.shape[-1]
        dim = head_dim if self.fixed else self.d_k  # FIX: the text's sin/cos are for d_k = d_model
        sin, cos = _sin_cos(Q.shape[1], dim)
        if self.fixed:
            sin, cos = sin[:, :, None, :], cos[:, :, None, :]  # FIX: (1, seq, d/2) lines seq up with the heads axis
        return apply_rope(Q, sin.to(Q.device), cos.to(Q.device))
