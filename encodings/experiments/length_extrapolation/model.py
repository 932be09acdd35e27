"""The models: small pre-LN causal LMs, one positional encoding each, and RoPE's re-scoring variants."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ...encoders.absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from ...encoders.alibi import ALiBiBias
from ...encoders.rotary import RotaryEmbedding
from ...encoders.scaling.frequencies import dynamic_ntk, ntk_aware, yarn, yarn_attention_factor
from .config import ExperimentConfig, ROPE_VARIANTS


class Block(nn.Module):
    """Pre-LN transformer layer: ``x + attn(LN x)``, then ``x + MLP(LN x)``, MLP 4× with ReLU
    (the original Transformer's; GELU costs a fifth of a training step on CPU)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.attention_norm, self.mlp_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, rotary: nn.Module | None, mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).view(batch, seq, 3, self.n_heads, self.head_dim).unbind(2)
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  attn_mask=mask, is_causal=mask is None)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, d_model))
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    """The experiment's causal LM; ``encoding`` is one of :data:`ENCODINGS`.

    ``rotary`` is one module shared by every layer, so an evaluation can swap its frequencies
    (:func:`rope_variant`) without retraining."""

    def __init__(self, encoding: str, config: ExperimentConfig):
        super().__init__()
        self.encoding = encoding
        d_model, n_heads = config.d_model, config.n_heads
        self.embed = nn.Embedding(config.vocab, d_model)
        self.absolute = None  # added to the token embeddings
        if encoding in ("learnable", "hybrid"):
            self.absolute = LearnablePositionalEmbedding(config.train_length, d_model)
        elif encoding == "sinusoidal":
            self.absolute = SinusoidalPositionalEncoding(d_model)
        self.rotary = RotaryEmbedding(d_model // n_heads) if encoding in ("rope", "hybrid") else None
        self.alibi = ALiBiBias(n_heads) if encoding == "alibi" else None
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, config.vocab)

    def attention_mask(self, seq: int, window: int | None) -> torch.Tensor | None:
        """Additive mask ``(heads or 1, seq, seq)``: causal, ALiBi's bias, keys ≥ ``window`` back
        masked; ``None`` for a plain causal mask (SDPA's own)."""
        if self.alibi is None and window is None:
            return None
        positions = torch.arange(seq)
        distance = positions[:, None] - positions[None, :]
        mask = self.alibi(positions) if self.alibi is not None else torch.zeros(1, seq, seq)
        masked = distance < 0 if window is None else (distance < 0) | (distance >= window)
        return mask.masked_fill(masked, float("-inf"))

    def forward(self, tokens: torch.Tensor, window: int | None = None) -> torch.Tensor:
        x = self.embed(tokens)
        if self.absolute is not None:
            x = self.absolute(x)
        mask = self.attention_mask(tokens.shape[1], window)
        if mask is not None:  # SDPA on CPU is faster with a full (batch, heads, q, k) mask than a broadcast one
            mask = mask.expand(tokens.shape[0], self.blocks[0].n_heads, -1, -1).contiguous()
        for block in self.blocks:
            x = block(x, self.rotary, mask)
        return self.readout(self.norm(x))


def rope_variant(name: str, head_dim: int, multiplier: int, train_length: int,
                 dynamic_factor: float) -> RotaryEmbedding:
    """Rotary frequencies for scoring a RoPE model trained at ``train_length`` on ``multiplier`` × that length.

    * ``position_interpolation`` - positions divided by k (Chen et al. 2023);
    * ``ntk_aware`` - base grown for factor k;
    * ``dynamic_ntk`` - the factor follows the call's length (factor ``dynamic_factor``, max position L);
    * ``yarn`` - NTK-by-parts with factor k, original length L, and its attention factor on q and k.
    """
    if name == "position_interpolation":
        return RotaryEmbedding(head_dim, scaling_factor=multiplier)
    if name == "ntk_aware":
        return RotaryEmbedding(head_dim, frequencies=partial(ntk_aware, factor=multiplier))
    if name == "dynamic_ntk":
        schedule = partial(dynamic_ntk, factor=dynamic_factor, max_position=train_length)
        return RotaryEmbedding(head_dim, frequencies=schedule, length_dependent=True)
    if name == "yarn":
        schedule = partial(yarn, factor=multiplier, original_max_position=train_length)
        return RotaryEmbedding(head_dim, frequencies=schedule, magnitude=yarn_attention_factor(multiplier))
    raise ValueError(f"unknown RoPE variant {name!r}; choose from {ROPE_VARIANTS}")
