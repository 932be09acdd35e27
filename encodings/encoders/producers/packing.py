"""A packing collator: documents in one row, positions restarting in each (the ``packing``
protocol; transformers' flattened format, Krell et al. 2021's packing without cross-contamination)."""

from __future__ import annotations

import itertools

import torch


class PackingCollator:
    """Documents packed in one row: positions restart in each (1D), or each document's own
    ``(3, len)`` ids (``axes=3``); ``cu_seq_lens`` and ``seq_idx``; padded with ``pad_token_id`` to
    a multiple of ``pad_to_multiple_of``, the padding a document of its own on every axis."""

    def __init__(self, axes: int = 1, pad_to_multiple_of: int = 1, pad_token_id: int = 0):
        self.axes, self.multiple, self.pad = axes, pad_to_multiple_of, pad_token_id

    def __call__(self, examples: list[dict]) -> dict:
        tokens = [torch.as_tensor(e["input_ids"], dtype=torch.long) for e in examples]
        lengths = [len(t) for t in tokens]
        padding = (-sum(lengths)) % self.multiple
        if padding:
            tokens.append(torch.full((padding,), self.pad, dtype=torch.long))
            lengths.append(padding)
        if self.axes == 3:
            own = [torch.as_tensor(e["position_ids"], dtype=torch.long) for e in examples]
            own += [torch.arange(padding).expand(3, -1)] if padding else []
            positions = torch.cat(own, dim=1).unsqueeze(1)
        else:
            positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
        cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
        seq_idx = torch.cat([torch.full((n,), d, dtype=torch.int32) for d, n in enumerate(lengths)]).unsqueeze(0)
        return {"input_ids": torch.cat(tokens).unsqueeze(0), "position_ids": positions, "cu_seq_lens": cu,
                "seq_idx": seq_idx}
