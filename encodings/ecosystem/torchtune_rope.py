"""torchtune's ``RotaryPositionalEmbeddings`` through the single-tensor protocol.

``rope(x, input_pos=None)`` on ``(batch, seq, heads, head_dim)``; explicit positions go in as
``input_pos`` and an offset as ``input_pos = arange(offset, offset + seq)``, which is how
torchtune's own KV-cache decoding calls it. Interleaved pairs (``x.reshape(..., -1, 2)``), a
float32 cos/sin cache built at construction for ``max_seq_len`` positions.

Its docstring promises: "max_seq_len: Maximum expected sequence length for the model, if
exceeded the cached freqs will be recomputed". The record is judged inside the table
(``table_limited``); past it, the contract row judges what happens instead of a recomputation.
"""

from __future__ import annotations

import torch
from torch import nn

import posenc

from .support import ORIGIN, available, missing, version


class InputPos(nn.Module):
    """``module(x, positions=None, offset=0)`` as torchtune's ``input_pos``."""

    def __init__(self, rope: nn.Module):
        super().__init__()
        self.rope = rope

    def forward(self, x, positions=None, offset=0):
        if positions is None and offset != 0:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        return self.rope(x, input_pos=positions)


def build(config: posenc.BuildConfig):
    from torchtune.modules import RotaryPositionalEmbeddings

    rope = RotaryPositionalEmbeddings(config.head_dim, max_seq_len=config.max_len, base=config.base)
    return InputPos(rope).to(config.device)


posenc.register(posenc.EncoderRecord(
    origin=ORIGIN,
    name="torchtune_rope",
    build=build if available("torchtune") else missing("torchtune"),
    kind="rotary",
    source=f"torchtune {version('torchtune') or '(not installed)'} (torchtune/modules/position_embeddings.py)",
    geometry=posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32),
    description="RotaryPositionalEmbeddings(head_dim, max_seq_len=max_len) with input_pos, inside its table",
    table_limited=True,
    claims=posenc.rotary_claims({
        "ROPE-10a": posenc.not_applicable("judged inside its max_seq_len table"),
        "ROPE-11": posenc.not_applicable("judged inside its max_seq_len table"),
        posenc.CONTRACT: posenc.refuted("the module checks no dtype: integer x is computed with",
                                        specs=("test_rejects_non_float_input",)),
    }),
))
