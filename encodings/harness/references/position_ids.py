"""Exact references for the code that makes position ids: ids are integers, so every reference
here is exact and a verdict needs no tolerance.

* **Multi-axis ids** (M-RoPE, Qwen2-VL §2.1; Qwen2.5-VL §2.1.3): a text token has one id on every
  axis, one more than the last; a picture's merged ``h × w`` grid sits at one time id ``s`` with
  rows ``s + i`` and columns ``s + j``; a video's frame ``f`` has time id ``s + τ(f)``, with
  ``τ(f) = f`` (frames) or ``⌊f · seconds_per_grid · tokens_per_second⌋`` (seconds); text after a
  picture or a video resumes at the block's largest id on any axis plus one. A row's delta is its
  largest id + 1 − its length (decoding continues at ``cache position + delta``).
* **Vision-tower grid ids**: a ``t × h × w`` patch grid with spatial merge ``m`` lists its patches
  block by block (``m × m`` blocks in row-major order, row-major inside each), each as ``(row, col)``,
  the same for every frame.
* **Packing**: documents concatenated in order; positions ``0 … len − 1`` in each;
  ``cu_seq_lens`` the cumulative lengths from 0; ``seq_idx`` the document's index per token.
* **Context-parallel shards**: the token indices a rank holds under contiguous, head-tail
  (zigzag: chunk ``r`` and chunk ``2W − 1 − r`` of ``2W``) and round-robin layouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TEXT, IMAGE, VIDEO = 0, 1, 2


@dataclass(frozen=True)
class Span:
    """One piece of a row: ``length`` text tokens, or a picture or video of ``grid`` (t, h, w) in patches."""

    kind: int
    length: int = 0
    grid: tuple[int, int, int] | None = None
    seconds_per_grid: float = 1.0

    def tokens(self, merge: int) -> int:
        if self.kind == TEXT:
            return self.length
        t, h, w = self.grid
        return t * (h // merge) * (w // merge)


def time_steps(frames: int, time: str, seconds_per_grid: float = 1.0, tokens_per_second: float = 1.0) -> list[int]:
    """A video's time id offsets per frame: ``f`` (frames) or ``⌊f · seconds · tokens per second⌋``."""
    if time == "seconds":
        return [math.floor(f * seconds_per_grid * tokens_per_second + 1e-9) for f in range(frames)]
    return list(range(frames))


def vision_block(start: int, grid, merge: int, steps: list[int]) -> torch.Tensor:
    """``(3, t·h'·w')`` ids of one picture or video at ``start``: time, row, column."""
    t, h, w = grid
    rows, cols = h // merge, w // merge
    ids = torch.empty(3, t * rows * cols, dtype=torch.long)
    k = 0
    for f in range(t):
        for i in range(rows):
            for j in range(cols):
                ids[:, k] = torch.tensor([start + steps[f], start + i, start + j])
                k += 1
    return ids


def mrope_row(spans: list[Span], merge: int, time: str = "frames", tokens_per_second: float = 1.0):
    """``(ids (3, L), delta)`` of one row of ``spans``, by the papers' rule."""
    pieces, current = [], 0
    for span in spans:
        if span.kind == TEXT:
            block = torch.arange(current, current + span.length).expand(3, -1)
        else:
            frames = span.grid[0]
            steps = time_steps(frames, time, span.seconds_per_grid, tokens_per_second) if span.kind == VIDEO \
                else [0] * frames
            block = vision_block(current, span.grid, merge, steps)
        pieces.append(block)
        if block.numel():
            current = int(block.max()) + 1
    ids = torch.cat(pieces, dim=1) if pieces else torch.zeros(3, 0, dtype=torch.long)
    return ids, (int(ids.max()) + 1 - ids.shape[1]) if ids.numel() else 0


def grid_ids(grid, merge: int) -> torch.Tensor:
    """``(t·h·w, 2)`` (row, col) of a vision tower's patches in merge-block order."""
    t, h, w = grid
    out = []
    for _ in range(t):
        for bi in range(h // merge):
            for bj in range(w // merge):
                for r in range(merge):
                    for c in range(merge):
                        out.append((bi * merge + r, bj * merge + c))
    return torch.tensor(out, dtype=torch.long).reshape(-1, 2)


def packed(lengths: list[int]) -> dict[str, torch.Tensor]:
    """The positions and boundaries of documents of ``lengths`` packed in one row."""
    positions = torch.cat([torch.arange(n) for n in lengths]) if lengths else torch.zeros(0, dtype=torch.long)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.long)
    seq_idx = torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)]) if lengths else positions
    return {"position_ids": positions, "cu_seq_lens": cu, "seq_idx": seq_idx}


LAYOUTS = ("contiguous", "head_tail", "round_robin")


def shard_indices(length: int, world: int, rank: int, layout: str) -> torch.Tensor:
    """The token indices rank ``rank`` of ``world`` holds under ``layout``."""
    if layout == "contiguous":
        size = length // world
        return torch.arange(rank * size, (rank + 1) * size)
    if layout == "head_tail":
        size = length // (2 * world)
        head = torch.arange(rank * size, (rank + 1) * size)
        tail = torch.arange((2 * world - 1 - rank) * size, (2 * world - rank) * size)
        return torch.cat([head, tail])
    if layout == "round_robin":
        return torch.arange(rank, length, world)
    raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


# ---------------------------------------------------------------- calling an id builder

@dataclass(frozen=True)
class Token:
    """What one token of a row is: its block (a text run or one picture, video or frame), its kind,
    and within a vision block its frame, row and column (merged grid)."""

    block: int
    kind: int
    frame: int = 0
    row: int = 0
    col: int = 0


def as_called(spans: list[Span], split: bool) -> list[Span]:
    """The spans as a builder of ``split`` time sees them: each video frame a block of its own,
    framed by one text token (a timestamp)."""
    if not split:
        return list(spans)
    out = []
    for span in spans:
        if span.kind == VIDEO:
            t, h, w = span.grid
            for f in range(t):
                out += ([Span(TEXT, 1)] if f else []) + [Span(VIDEO, grid=(1, h, w), seconds_per_grid=span.seconds_per_grid)]
        else:
            out.append(span)
    return out


def tokens_of(spans: list[Span], merge: int) -> list[Token]:
    out = []
    for b, span in enumerate(spans):
        if span.kind == TEXT:
            out += [Token(b, TEXT)] * span.length
            continue
        t, h, w = span.grid
        out += [Token(b, span.kind, f, i, j) for f in range(t) for i in range(h // merge) for j in range(w // merge)]
    return out


def builder_inputs(rows: list[list[Span]], traits, pad_to: int | None = None, text_seed: int = 0) -> dict:
    """The keyword arguments of an ``mrope_ids`` call on ``rows`` (each a list of spans; a split
    builder gets its videos' frames framed by text, and each video whole in ``video_grid_thw``),
    left-padded to ``pad_to`` tokens, with an attention mask where rows are padded. The text token
    before each picture or video is the vision-start token (for builders that read token ids)."""
    generator = torch.Generator().manual_seed(text_seed)
    ids, types, images, videos, seconds = [], [], [], [], []
    for spans in rows:
        called = as_called(spans, traits.time == "split")
        row_ids, row_types = [], []
        for k, span in enumerate(called):
            if span.kind == TEXT:
                text = torch.randint(10, 1000, (span.length,), generator=generator).tolist()
                if k + 1 < len(called) and called[k + 1].kind != TEXT and text:
                    text[-1] = traits.vision_start_token_id
                row_ids += text
                row_types += [TEXT] * span.length
                continue
            n = span.tokens(traits.merge)
            row_ids += [traits.image_token_id if span.kind == IMAGE else traits.video_token_id] * n
            row_types += [span.kind] * n
        for span in spans:
            if span.kind == IMAGE:
                images.append(span.grid)
            elif span.kind == VIDEO:
                videos.append(span.grid)
                seconds.append(span.seconds_per_grid)
        ids.append(row_ids)
        types.append(row_types)
    width = max(pad_to or 0, *(len(r) for r in ids))
    padded = pad_to is not None or len({len(r) for r in ids}) > 1
    return {
        "input_ids": torch.tensor([[0] * (width - len(r)) + r for r in ids]),
        "mm_token_type_ids": torch.tensor([[0] * (width - len(r)) + r for r in types]),
        "image_grid_thw": torch.tensor(images, dtype=torch.long) if images else None,
        "video_grid_thw": torch.tensor(videos, dtype=torch.long) if videos else None,
        "attention_mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids]) if padded else None,
        "second_per_grid_ts": torch.tensor(seconds, dtype=torch.float32) if seconds else None,
    }
