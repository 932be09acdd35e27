"""x-transformers' ``RotaryEmbedding`` with ``apply_rotary_pos_emb``, through the pair protocol.

``freqs, scale = rope(t)`` for positions ``t``, then ``apply_rotary_pos_emb(q, freqs, scale)`` and
``apply_rotary_pos_emb(k, freqs, scale ** -1)`` on ``(batch, heads, seq, head_dim)``; the adapter
transposes ``(batch, seq, heads, head_dim)`` to that and back. As in the library's attention, one
``rope`` call covers the positions of both q and k (here ``cat(q_positions, k_positions)``), so
xPos's scale is centred once, at ``max position // 2``. Interleaved pairs (``rotate_half`` over
``(d r)`` with ``r = 2``); positions ``t.type_as(inv_freq)``, float32 unless the module is cast.
"""

from __future__ import annotations

import torch
from torch import nn

import posenc

from .support import ORIGIN, available, missing, version


class PairAdapter(nn.Module):
    def __init__(self, rope: nn.Module):
        super().__init__()
        self.rope = rope

    def forward(self, q, k, q_positions, k_positions):
        from x_transformers.x_transformers import apply_rotary_pos_emb

        for name, x, p in (("q", q, q_positions), ("k", k, k_positions)):  # the protocol's shape, before any call
            if p.shape[-1] != x.shape[1]:
                raise ValueError(f"{name}_positions shape {tuple(p.shape)} does not match {name}'s seq {x.shape[1]}")
        freqs, scale = self.rope(torch.cat((q_positions, k_positions), dim=-1))
        n = q.shape[1]
        q_freqs, k_freqs = freqs[:, :n], freqs[:, n:]
        q_scale, k_scale = (scale[:, :n], scale[:, n:] ** -1) if torch.is_tensor(scale) else (scale, scale)
        heads_first = (lambda t: t.transpose(1, 2))
        fq = apply_rotary_pos_emb(heads_first(q), q_freqs, q_scale)
        fk = apply_rotary_pos_emb(heads_first(k), k_freqs, k_scale)
        return heads_first(fq), heads_first(fk)


def _build(use_xpos: bool):
    def build(config: posenc.BuildConfig):
        from x_transformers.x_transformers import RotaryEmbedding

        rope = RotaryEmbedding(config.head_dim, use_xpos=use_xpos, base=config.base)
        return PairAdapter(rope).to(config.device)

    return build


def _xpos_scale(positions, rotary_dim, side, *, centre):
    """x-transformers' xPos: ζ_i^(±(p − c)/512), ζ_i = (2i + 0.4·d)/(1.4·d), centred at c."""
    i = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=positions.device)
    zeta = (i + 0.4 * rotary_dim) / (1.4 * rotary_dim)
    sign = 1.0 if side == "q" else -1.0
    return zeta ** (sign * (positions.to(torch.float64).unsqueeze(-1) - centre) / 512)


_SOURCE = "x-transformers {} (x_transformers/x_transformers.py: RotaryEmbedding, apply_rotary_pos_emb)"
_COMMON = {
    "PATH-1": posenc.not_applicable("positions are passed explicitly"),
    "PATH-3": posenc.refuted("inv_freq is a float buffer and positions take its dtype (t.type_as(inv_freq)): "
                             "module.to(bfloat16) rounds both", dtypes=(torch.bfloat16, torch.float16)),
    posenc.CONTRACT: posenc.refuted("RotaryEmbedding and apply_rotary_pos_emb validate no input",
                                    specs=("test_rejects_non_float_input", "test_rejects_wrong_rank",
                                           "test_rejects_negative_positions")),
}

_INSTALLED = available("x-transformers")
posenc.register(posenc.EncoderRecord(
    origin=ORIGIN,
    name="xtf_rope",
    build=_build(False) if _INSTALLED else missing("x-transformers"),
    kind="rotary", protocol="pair",
    source=_SOURCE.format(version("x-transformers") or "(not installed)"),
    geometry=posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32),
    description="RotaryEmbedding(head_dim) and apply_rotary_pos_emb on q and k",
    claims=posenc.rotary_claims(_COMMON),
    min_head_dim=4,  # its base rescaling divides by d − 2
))
