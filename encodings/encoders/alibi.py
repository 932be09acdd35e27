"""ALiBi: attention with linear biases instead of position embeddings.

Press, Smith and Lewis 2022, "Train Short, Test Long: Attention with Linear Biases Enables Input
Length Extrapolation" (ICLR 2022), §3; slopes as in the authors' code
(ofirpress/attention_with_linear_biases, ``get_slopes``).

* :func:`alibi_slopes` - one slope ``m_h`` per head: for ``n`` heads a power of two, the geometric
  sequence ``2^(-8/n), 2^(-16/n), …, 2^(-8)``; otherwise the slopes of the closest smaller power of
  two ``2^⌊log2 n⌋``, then every other slope of twice that power until there are ``n``;
* :class:`ALiBiBias` - the bias ``-m_h · (q_pos − k_pos)`` added to the attention logits, ``-inf``
  for keys after the query when causal (``-m_h · |q_pos − k_pos|`` when not). No parameters;
* :class:`ALiBiAttention` - qkv projection, ``softmax(q·kᵀ/√d_head + bias) v`` with no
  position encoding on q or k, output projection; same calling convention as
  :class:`~posenc.encoders.attention.RoPEAttention` (``forward(x, positions, offset=)`` on
  ``(batch, seq, d_model)``, ``attend(q, k, v, positions, offset=)`` on per-head tensors).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import _check_qkv, _ProjectedAttention
from .positions import angle_dtype, exact_position_limit, resolve_positions

BIAS_DTYPES = (torch.float32, torch.float64)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The ``n_heads`` slopes ``m_h`` in float64, in head order (Press et al. 2022, §3)."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive integer, got {n_heads!r}")
    closest_power = 1 << (n_heads.bit_length() - 1)
    slopes = [2.0 ** (-8.0 * (h + 1) / closest_power) for h in range(closest_power)]
    if closest_power < n_heads:
        doubled = [2.0 ** (-8.0 * (h + 1) / (2 * closest_power)) for h in range(2 * closest_power)]
        slopes += doubled[0::2][: n_heads - closest_power]
    return torch.tensor(slopes, dtype=torch.float64)


def _integer_positions(positions: torch.Tensor, what: str, limit: int) -> torch.Tensor:
    """``positions`` as int64 of rank 2 ``(1 or batch, seq)``, checked."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{what} must be integer or real floating point, got {positions.dtype}")
    if positions.device.type == "meta":
        raise ValueError(f"{what} are on the meta device, which holds no values to check; give them on cpu or cuda")
    if positions.dim() not in (1, 2):
        raise ValueError(f"{what} must have rank 1 (seq,) or 2 (batch, seq), got rank {positions.dim()} "
                         f"with shape {tuple(positions.shape)}")
    if positions.is_floating_point():
        if not bool(torch.isfinite(positions).all()):
            raise ValueError(f"{what} must be finite, got NaN or infinity")
        if not bool((positions == positions.round()).all()):
            raise ValueError(f"ALiBi's distances are whole token counts: {what} must be integers, got fractional ones")
    positions = positions.long()
    if positions.numel():
        low, high = (int(v) for v in torch.aminmax(positions))
        if low < 0:
            raise ValueError(f"{what} must be non-negative, got minimum {low}")
        if high > limit:
            raise ValueError(f"{what} must be at most {limit}, the largest distance the bias dtype holds exactly, "
                             f"got maximum {high}")
    return positions if positions.dim() == 2 else positions.unsqueeze(0)


class ALiBiBias(nn.Module):
    """The ALiBi logit bias of every head (Press et al. 2022, §3); no trainable parameters.

    The slopes are a float64 buffer that stays float64 through ``module.to(dtype)``; the bias is
    formed in float32 (or float64 with ``dtype=``) from exact int64 distances.
    """

    def __init__(self, n_heads: int, *, causal: bool = True):
        super().__init__()
        self.n_heads, self.causal = n_heads, causal
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, q_positions: torch.Tensor, k_positions: torch.Tensor | None = None, *,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Bias of shape ``(heads, q_len, k_len)``, or ``(batch, heads, q_len, k_len)`` when either
        positions tensor is ``(batch, seq)``; ``k_positions`` defaults to ``q_positions``."""
        if dtype not in BIAS_DTYPES:
            raise ValueError(f"the bias is formed in float32 or float64, got dtype={dtype}")
        limit = exact_position_limit(dtype)
        q = _integer_positions(q_positions, "q_positions", limit)
        k = q if k_positions is None else _integer_positions(k_positions, "k_positions", limit)
        if q.device != k.device:
            raise ValueError(f"q_positions are on {q.device} but k_positions are on {k.device}; "
                             "give both on one device")
        batched = q_positions.dim() == 2 or (k_positions is not None and k_positions.dim() == 2)
        if q.shape[0] != k.shape[0] and 1 not in (q.shape[0], k.shape[0]):
            raise ValueError(f"q_positions and k_positions batch sizes disagree: {q.shape[0]} and {k.shape[0]}")
        distance = q.unsqueeze(-1) - k.unsqueeze(-2)  # (B|1, q_len, k_len), exact in int64
        slopes = self.slopes.to(device=distance.device, dtype=dtype)[None, :, None, None]
        bias = slopes * (-distance if self.causal else -distance.abs()).unsqueeze(1).to(dtype)
        if self.causal:
            bias = bias.masked_fill((distance < 0).unsqueeze(1), float("-inf"))
        return bias if batched else bias[0]

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        if self.slopes.dtype != torch.float64:  # module.to(dtype) keeps the slopes exact
            self.slopes = alibi_slopes(self.n_heads).to(self.slopes.device)
        return self

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, causal={self.causal}"


class ALiBiAttention(_ProjectedAttention):
    """Multi-head softmax attention with ALiBi (Press et al. 2022): no position encoding on q, k.

    ``max_len`` (optional) limits the span a query attends to: keys more than ``max_len − 1``
    positions away are masked, so each query sees at most ``max_len`` keys when causal. ``None``
    (the default) attends to every key the mask allows; ALiBi itself has no length limit.

    NaN when causal: a NaN in a later token's key or value reaches every earlier output (``−inf +
    NaN`` is NaN in the logits, ``0 · NaN`` is NaN in the product with v), as in
    :class:`~posenc.encoders.attention.RoPEAttention`; ATT-3 holds for finite input only.
    """

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = True, max_len: int | None = None):
        super().__init__(d_model, n_heads)
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
            raise ValueError(f"max_len must be a positive integer or None, got {max_len!r}")
        self.causal, self.max_len = causal, max_len
        self.bias = ALiBiBias(n_heads, causal=causal)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        """``(batch, seq, d_model)`` in and out: projection, :meth:`attend`, output projection."""
        return self.out(super().forward(x, positions, offset=offset))

    def attend(self, q, k, v, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_qkv(q, k, v, self.n_heads, self.head_dim)
        adt = angle_dtype(q.dtype)
        pos = resolve_positions(q.shape[0], q.shape[1], positions, offset, q.device, angle_dtype=adt)
        bias = self.bias(pos, dtype=adt)  # (B|1, heads, seq, seq)
        if self.max_len is not None:
            distance = (pos.unsqueeze(-1) - pos.unsqueeze(-2)).abs().unsqueeze(1)
            bias = bias.masked_fill(distance >= self.max_len, float("-inf"))
        qh, kh, vh = (t.transpose(1, 2).to(adt) for t in (q, k, v))  # (batch, heads, seq, head_dim)
        logits = qh @ kh.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
        return (logits.softmax(dim=-1) @ vh).transpose(1, 2).to(q.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}, max_len={self.max_len}"
