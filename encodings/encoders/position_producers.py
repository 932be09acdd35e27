"""The code that makes position ids, as training and inference stacks need it: M-RoPE id builders,
a vision tower's grid ids, a packing collator and context-parallel sharders. Each is called as its
protocol says (``posenc.harness.catalogue.records.PRODUCER_PROTOCOLS``).

* :class:`MRopeIdBuilder`: a batch's ``(3, batch, seq)`` ids and per-row deltas from the token
  types and grids (Qwen2-VL §2.1, Qwen2.5-VL §2.1.3), by :func:`~.mrope_positions.mrope_positions`;
* :func:`vision_grid_ids`: ``(row, col)`` of a tower's patches in merge-block order;
* :class:`PackingCollator`: documents in one row, positions restarting in each, ``cu_seq_lens`` and
  ``seq_idx``, padded to a multiple with the tokens on every axis;
* :class:`ContextParallelSharder`: a rank's tokens and global ids under a contiguous, head-tail
  (zigzag) or round-robin layout, and ``restore``.
"""

from __future__ import annotations

import itertools

import torch

from .mrope_positions import Text, Vision, mrope_positions

TEXT, IMAGE, VIDEO = 0, 1, 2


class MRopeIdBuilder:
    """``(position_ids (3, batch, seq), deltas (batch, 1))`` of a batch of text, pictures and videos."""

    def __init__(self, merge: int = 2, time: str = "frames", tokens_per_second: float = 2.0):
        if time not in ("frames", "seconds", "split"):
            raise ValueError(f"time must be frames, seconds or split, got {time!r}")
        self.merge, self.time, self.tokens_per_second = merge, time, tokens_per_second

    def _videos(self, video_grid_thw, second_per_grid_ts):
        grids = [] if video_grid_thw is None else [tuple(map(int, g)) for g in video_grid_thw]
        seconds = [1.0] * len(grids) if second_per_grid_ts is None else [float(s) for s in second_per_grid_ts]
        if self.time == "split":  # each frame its own block, framed by text
            return [((1, h, w), s) for (t, h, w), s in zip(grids, seconds) for _ in range(t)]
        return list(zip(grids, seconds))

    def __call__(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                 attention_mask=None, second_per_grid_ts=None):
        batch, seq = input_ids.shape
        ids = torch.zeros(3, batch, seq, dtype=torch.long, device=input_ids.device)
        deltas = torch.zeros(batch, 1, dtype=torch.long, device=input_ids.device)
        images = iter([] if image_grid_thw is None else [tuple(map(int, g)) for g in image_grid_thw])
        videos = iter(self._videos(video_grid_thw, second_per_grid_ts))
        time = "seconds" if self.time == "seconds" else "frames"
        for b in range(batch):
            kept = torch.ones(seq, dtype=torch.bool) if attention_mask is None else attention_mask[b].bool().cpu()
            types = mm_token_type_ids[b].cpu()[kept].tolist()
            segments = []
            for kind, run in itertools.groupby(types):
                count = len(list(run))
                if kind == TEXT:
                    segments.append(Text(count))
                    continue
                while count > 0:  # pictures back to back share a run of their type
                    if kind == IMAGE:
                        (t, h, w), seconds = next(images), 1.0
                    else:
                        (t, h, w), seconds = next(videos)
                    vision = Vision(t, h // self.merge, w // self.merge, seconds)
                    segments.append(vision)
                    count -= vision.tokens
            row, delta = mrope_positions(segments, time=time, ids_per_second=self.tokens_per_second)
            ids[:, b, kept.to(ids.device)] = row.to(ids.device)
            deltas[b, 0] = delta
        return ids, deltas


def vision_grid_ids(grid_thw, merge: int = 2) -> torch.Tensor:
    """``(patches, 2)`` (row, col) ids of every picture or video in ``grid_thw`` (n, 3), in
    merge-block order, the same for every frame."""
    out = []
    for t, h, w in torch.as_tensor(grid_thw).tolist():
        rows = torch.arange(h).unsqueeze(1).expand(h, w)
        cols = torch.arange(w).unsqueeze(0).expand(h, w)
        blocks = [a.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten() for a in (rows, cols)]
        out.append(torch.stack(blocks, dim=-1).repeat(t, 1))
    return torch.cat(out) if out else torch.zeros(0, 2, dtype=torch.long)


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


class ContextParallelSharder:
    """A rank's share of a sequence (tokens and their global ids, on the sequence axis) under a
    ``layout``; :meth:`restore` puts the ranks' shards back in order."""

    def __init__(self, layout: str = "head_tail"):
        if layout not in ("contiguous", "head_tail", "round_robin"):
            raise ValueError(f"layout must be contiguous, head_tail or round_robin, got {layout!r}")
        self.layout = layout

    def order(self, length: int, world: int) -> torch.Tensor:
        """The token indices in rank order: rank r holds the r-th of ``world`` equal pieces."""
        if length % (2 * world if self.layout == "head_tail" else world):
            raise ValueError(f"a sequence of {length} tokens does not divide into {world} ranks' equal shards "
                             f"({self.layout})")
        if self.layout == "contiguous":
            return torch.arange(length)
        if self.layout == "round_robin":
            return torch.arange(length).reshape(-1, world).T.flatten()
        chunks = torch.arange(length).chunk(2 * world)
        return torch.cat([torch.cat([chunks[r], chunks[2 * world - 1 - r]]) for r in range(world)])

    def __call__(self, batch: dict, rank: int, world: int) -> dict:
        length = batch["input_ids"].shape[-1]
        mine = self.order(length, world).chunk(world)[rank]
        return {name: value[..., mine] for name, value in batch.items()}

    def restore(self, shards: list[torch.Tensor]) -> torch.Tensor:
        joined = torch.cat(shards, dim=-1)
        return joined[..., torch.argsort(self.order(joined.shape[-1], len(shards)))]
