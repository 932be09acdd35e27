"""What the specs of the code that makes position ids call and compare with. Ids are integers,
so every comparison is exact.

* **Rows of text, pictures and videos** (:class:`Span`), handed to an id builder as the ecosystem
  calls one (:func:`builder_inputs`), with what each token is (:func:`tokens_of`); the papers' ids
  of a row (M-RoPE, Qwen2-VL §2.1; Qwen2.5-VL §2.1.3) come from
  ``posenc.encoders.mrope_positions``, the harness's reference for the vision-language relations
  too (:func:`row_ids`, :func:`time_steps`).
* **Vision-tower grid ids** (:func:`grid_ids`): a ``t × h × w`` patch grid with spatial merge ``m``
  lists its patches block by block (``m × m`` blocks in row-major order, row-major inside each),
  each as ``(row, col)``, the same for every frame; written as loops, apart from the built-in
  producer's reshapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...encoders.mrope_positions import Text, Vision, mrope_positions

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


def row_ids(spans: list[Span], merge: int, time: str = "frames", tokens_per_second: float = 1.0):
    """``(ids (3, L), delta)`` of one row of ``spans``, by the papers' rule."""
    segments = [Text(sp.length) if sp.kind == TEXT else
                Vision(sp.grid[0], sp.grid[1] // merge, sp.grid[2] // merge, sp.seconds_per_grid) for sp in spans]
    return mrope_positions(segments, time=time, ids_per_second=tokens_per_second)


def time_steps(frames: int, time: str, seconds_per_grid: float = 1.0, tokens_per_second: float = 1.0) -> list[int]:
    """A video's time id offsets per frame: ``f`` (frames) or ``⌊f · seconds · tokens per second⌋``."""
    ids, _ = mrope_positions([Vision(frames, 1, 1, seconds_per_grid)], time=time, ids_per_second=tokens_per_second)
    return ids[0].tolist()


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
