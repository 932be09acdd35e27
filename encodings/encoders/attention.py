"""Attention with RoPE.

* :class:`RoPEAttention` - 000 §3.3, 004 §4-5: ``softmax(R q (R k)ᵀ / √d_k) v``
  on :func:`torch.nn.functional.scaled_dot_product_attention`, optional causal
  mask. Only q and k are rotated (ROPE-6).
* :class:`LinearAttentionRoPE` - 000 §5.2: linear attention with RoPE in
  O(n) time and memory. Two orders:

  - ``map_then_rotate`` (RoFormer eq. 19): positive features ``φ(t) = elu(W t) + 1``,
    rotated after the map, with an unrotated normaliser::

        out_m = Σ_n ⟨R_m φ(q_m), R_n φ(k_n)⟩ v_n / Σ_n ⟨φ(q_m), φ(k_n)⟩

  - ``rotate_then_map`` (the published order): rotate q and k, apply the linear
    feature map, softmax k over the sequence, ``out_m = φ(q_m)ᵀ Σ_n k̃_n v_nᵀ``.

Both take ``x`` of shape ``(batch, seq, d_model)``; :meth:`attend` takes
already projected ``q, k, v`` of shape ``(batch, seq, heads, head_dim)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .rotary import RotaryEmbedding
from .validation import require_divisible, require_float, require_last_dim, require_rank, require_same_dtype


def _check_qkv(q, k, v, n_heads: int, head_dim: int) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_float(t, name)
        require_rank(t, 4, "(batch, seq, heads, head_dim)", name)
        require_last_dim(t, head_dim, "head_dim", name)
        if t.shape[2] != n_heads:
            raise ValueError(f"{name} must have n_heads={n_heads} heads, got {t.shape[2]}")
    if q.shape != k.shape or k.shape[:2] != v.shape[:2]:
        raise ValueError(f"q, k, v shapes disagree: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


class _ProjectedAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = require_divisible(d_model, n_heads)
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def project(self, x: torch.Tensor):
        """Split ``x`` into per-head ``q, k, v`` of shape ``(batch, seq, heads, head_dim)``."""
        require_float(x)
        require_rank(x, 3, "(batch, seq, d_model)")
        require_last_dim(x, self.d_model, "d_model")
        require_same_dtype(x, self.qkv.weight)
        shape = (*x.shape[:2], self.n_heads, self.head_dim)
        return tuple(t.reshape(shape) for t in self.qkv(x).chunk(3, dim=-1))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        q, k, v = self.project(x)
        return self.attend(q, k, v, positions, offset=offset).flatten(-2)


class RoPEAttention(_ProjectedAttention):
    """Multi-head softmax attention with RoPE on q and k (000 §3.3, 004 §4-5).

    NaN with ``causal=True``: a NaN or infinity in a later token's value reaches the outputs of
    earlier tokens (ATT-3 holds for finite input only). The causal mask gives the later token a
    weight of 0, and ``0 · NaN`` is NaN in the product with v; this comes from
    :func:`torch.nn.functional.scaled_dot_product_attention` (on the CPU every earlier output becomes
    NaN; CUDA's fused kernels, which skip masked blocks, may spread it less far). A NaN in a later key
    stays out of earlier outputs on the CPU. Check inputs for NaN first if a token may hold it.
    """

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = False, **rotary_options):
        super().__init__(d_model, n_heads)
        self.causal = causal
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)

    def attend(self, q, k, v, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_qkv(q, k, v, self.n_heads, self.head_dim)
        q = self.rotary(q, positions, offset=offset)
        k = self.rotary(k, positions, offset=offset)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=self.causal
        )
        return out.transpose(1, 2)


class LinearAttentionRoPE(_ProjectedAttention):
    """Linear attention with RoPE (000 §5.2), non-causal, O(n) in time and memory."""

    ORDERS = ("map_then_rotate", "rotate_then_map")

    def __init__(self, d_model: int, n_heads: int, *, order: str = "map_then_rotate", **rotary_options):
        super().__init__(d_model, n_heads)
        if order not in self.ORDERS:
            raise ValueError(f"order must be one of {self.ORDERS}, got {order!r}")
        self.order = order
        self.feature_dim = 2 * self.head_dim
        self.feature_map = nn.Linear(self.head_dim, self.feature_dim)
        rotated_dim = self.feature_dim if order == "map_then_rotate" else self.head_dim
        self.rotary = RotaryEmbedding(rotated_dim, **rotary_options)

    def attend(self, q, k, v, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_qkv(q, k, v, self.n_heads, self.head_dim)
        require_same_dtype(q, self.feature_map.weight, "q")
        if self.order == "rotate_then_map":
            q = self.feature_map(self.rotary(q, positions, offset=offset))
            k = self.feature_map(self.rotary(k, positions, offset=offset)).softmax(dim=1)
            context = torch.einsum("bnhf,bnhe->bhfe", k, v)
            return torch.einsum("bnhf,bhfe->bnhe", q, context)
        phi_q = F.elu(self.feature_map(q)) + 1
        phi_k = F.elu(self.feature_map(k)) + 1
        rot_q = self.rotary(phi_q, positions, offset=offset)
        rot_k = self.rotary(phi_k, positions, offset=offset)
        context = torch.einsum("bnhf,bnhe->bhfe", rot_k, v)
        numerator = torch.einsum("bnhf,bhfe->bnhe", rot_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", phi_q, phi_k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)
