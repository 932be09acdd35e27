"""M-RoPE id builders and a vision tower's grid ids (Qwen2-VL §2.1, Qwen2.5-VL §2.1.3): the
``mrope_ids`` and ``vision_grid`` protocols."""

from __future__ import annotations

import itertools

import torch

from ..mrope_positions import Text, Vision, mrope_positions

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
