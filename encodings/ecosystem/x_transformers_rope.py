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

from .support import ORIGIN, available, missing, validates_no_input, version


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


def xpos_scale(positions, rotary_dim, side, *, length):
    """x-transformers' xPos: ζ_i^(±(p − c)/512), ζ_i = (2i + 0.4·d)/(1.4·d), centred at ``c = length // 2``
    of the call (its ``max_pos // 2``)."""
    i = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=positions.device)
    zeta = (i + 0.4 * rotary_dim) / (1.4 * rotary_dim)
    sign = 1.0 if side == "q" else -1.0
    return zeta ** (sign * (positions.to(torch.float64).unsqueeze(-1) - length // 2) / 512)


_SOURCE = "x-transformers {} (x_transformers/x_transformers.py: RotaryEmbedding, apply_rotary_pos_emb)"
_COMMON = {
    "PATH-1": posenc.not_applicable("positions are passed explicitly"),
    posenc.CONTRACT: validates_no_input("RotaryEmbedding and apply_rotary_pos_emb validate no input"),
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

_FP16 = "in float16, the factor ζ^(±(p − c)/512) passes 65504 at |p − c| ≈ 4500: q' or k' overflows to ∞"
_RANGE = "ζ^(±(p − c)/512), centred on the call, leaves the float range far out (and fp16's past p ≈ 9000)"
posenc.register(posenc.EncoderRecord(
    origin=ORIGIN,
    name="xtf_xpos",
    build=_build(True) if _INSTALLED else missing("x-transformers"),
    kind="rotary", protocol="pair",
    source=_SOURCE.format(version("x-transformers") or "(not installed)") + ", use_xpos=True",
    geometry=posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32, position_scale=xpos_scale,
                                   scale_length_dependent=True),
    description="RotaryEmbedding(head_dim, use_xpos=True): q scaled by ζ^((p − c)/512), k by its inverse",
    claims=posenc.rotary_claims({
        **_COMMON,
        "ROPE-3": posenc.refuted("xPos scales q and k by ζ^(±(p − c)/512) on purpose"),
        "ROPE-4": posenc.refuted(_FP16, dtypes=(torch.float16,)),
        "ROPE-8": posenc.refuted(_FP16, dtypes=(torch.float16,)),
        "ROPE-10a": posenc.refuted(_RANGE),
        # bfloat16 has float32's range: what it shows far out, float32 shows too (ROPE-10a's)
        "ROPE-11": posenc.refuted(_FP16, dtypes=(torch.float16,)),
    }),
    min_head_dim=4,
))
