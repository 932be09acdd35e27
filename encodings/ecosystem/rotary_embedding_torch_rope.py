"""rotary-embedding-torch's ``RotaryEmbedding``, through its own offset path.

``rope.rotate_queries_or_keys(x, offset=o)`` on ``(batch, seq, heads, head_dim)``
(``seq_before_head_dim=True``, the library's option for that layout). It takes a start offset,
not positions (``positions="offset"``): the harness reaches explicit positions through the same
call, row by row or token by token. Interleaved pairs; positions ``arange(seq, dtype=x.dtype) +
offset`` over ``interpolate_factor``; a cos/sin-angle cache written by calls from offset 0 and
read by later calls that fit in it.
"""

from __future__ import annotations

import torch
from torch import nn

import posenc

from .support import ORIGIN, available, missing, validates_no_input, version


class OffsetAdapter(nn.Module):
    def __init__(self, rope: nn.Module):
        super().__init__()
        self.rope = rope

    def forward(self, x, offset=0):
        return self.rope.rotate_queries_or_keys(x, offset=offset)


def _build(**options):
    def build(config: posenc.BuildConfig):
        from rotary_embedding_torch import RotaryEmbedding

        rope = RotaryEmbedding(config.head_dim, theta=config.base, seq_before_head_dim=True, **options)
        return OffsetAdapter(rope).to(config.device)

    return build


_INSTALLED = available("rotary-embedding-torch")
_SOURCE = "rotary-embedding-torch {} (rotary_embedding_torch/rotary_embedding_torch.py)"
_COMMON = {
    "PATH-1": posenc.not_applicable("an offset only: explicit positions go through the offset path"),
    posenc.CONTRACT: validates_no_input("rotate_queries_or_keys validates no input"),
}

for name, options, geometry, extra in (
    ("ret_rope", {}, posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32), {}),
    ("ret_interpolate", {"interpolate_factor": 4.0},
     posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32, scaling_factor=4.0),
     {"ROPE-14": posenc.HOLDS}),
):
    posenc.register(posenc.EncoderRecord(
        origin=ORIGIN,
        name=name,
        build=_build(**options) if _INSTALLED else missing("rotary-embedding-torch"),
        kind="rotary",
        positions="offset",
        source=_SOURCE.format(version("rotary-embedding-torch") or "(not installed)"),
        geometry=geometry,
        description=f"RotaryEmbedding(head_dim, {', '.join(f'{k}={v}' for k, v in options.items()) or 'defaults'})"
                    ".rotate_queries_or_keys with an offset",
        claims=posenc.rotary_claims({**_COMMON, **extra}),
        min_head_dim=4,  # theta_rescale_factor's exponent divides by d − 2
    ))


class XPosPair(nn.Module):
    """The pair protocol over the library's two xPos calls, on its default ``(batch, heads, seq, head_dim)``: ``rotate_queries_and_keys(q, k)`` for q and k
    at ``0 … n−1``, and ``rotate_queries_with_cached_keys(q, k)`` for the last queries against all keys.
    Neither takes positions: any other positions are a configuration the library cannot express."""

    def __init__(self, rope: nn.Module):
        super().__init__()
        self.rope = rope

    def forward(self, q, k, q_positions, k_positions):
        from posenc.harness.references.contract import Excluded

        n_q, n_k = q.shape[1], k.shape[1]
        keys = torch.arange(n_k, device=k_positions.device).expand_as(k_positions)
        queries = torch.arange(n_k - n_q, n_k, device=q_positions.device).expand_as(q_positions)
        if not (torch.equal(k_positions, keys) and torch.equal(q_positions, queries)):
            raise Excluded("rotary-embedding-torch's xPos takes no positions: only q and k at 0 … n−1, or the "
                           "last queries against all keys")
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # the library's default (batch, heads, seq, head_dim)
        if n_q == n_k:
            fq, fk = self.rope.rotate_queries_and_keys(q, k)
        else:
            fq, fk = self.rope.rotate_queries_with_cached_keys(q, k)
        return fq.transpose(1, 2), fk.transpose(1, 2)


def _build_xpos(config: posenc.BuildConfig):
    from rotary_embedding_torch import RotaryEmbedding

    rope = RotaryEmbedding(config.head_dim, theta=config.base, use_xpos=True)
    return XPosPair(rope).to(config.device)


_XPOS = "xPos scales q and k by ζ^(±(p − n/2)/512) on purpose"
posenc.register(posenc.EncoderRecord(
    origin=ORIGIN,
    name="ret_xpos",
    build=_build_xpos if _INSTALLED else missing("rotary-embedding-torch"),
    kind="rotary",
    protocol="pair",
    source=_SOURCE.format(version("rotary-embedding-torch") or "(not installed)") + ", use_xpos=True",
    # The scale is centred on each call's middle, which no fixed geometry states; the specs that
    # need one are excluded by the positions this record accepts, and the rest compare it with itself.
    geometry=posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32),
    description="RotaryEmbedding(head_dim, use_xpos=True): rotate_queries_and_keys, rotate_queries_with_cached_keys",
    claims=posenc.rotary_claims({
        **_COMMON,
        "ROPE-3": posenc.refuted(_XPOS),
        "ROPE-10a": posenc.not_applicable("positions 0 … n−1 only"),
        "ROPE-11": posenc.not_applicable("positions 0 … n−1 only"),
        "PATH-1": posenc.not_applicable("the pair protocol takes explicit positions only"),
    }),
    min_head_dim=4,
))
