"""M-RoPE position ids of a sequence of text and vision, by the papers' rule.

For a row of segments (text runs, images, videos), the ``(3, n)`` ids on the time, height and width
axes (Qwen2-VL, arXiv 2409.12191 §2.1; Qwen2.5-VL, arXiv 2502.13923 §2.1):

* text: the same id on every axis, counting on from the largest id so far plus one;
* an image or a video of ``t × h × w`` tokens (after the vision tower's merges), starting at ``s``
  (the largest id so far plus one): height ``s + i``, width ``s + j``, and time ``s + k`` by frame
  index (Qwen2-VL, ``time="frames"``) or ``s + ⌊k · Δ · r⌋`` by absolute time (Qwen2.5-VL,
  ``time="seconds"``: ``Δ`` seconds between temporal tokens, ``r`` ids per second), truncated after
  the product (a step of 0.5 ids still advances), as the models' code does;
* after the row, the next token continues at ``max + 1``: ``delta = max + 1 − n`` is what a
  decode adds to its cache length (transformers' ``rope_deltas``).

:func:`mrope_positions` is the harness's reference for the model relations of vision-language
models (``specs/test_vision_language.py``): the positions a model builds for itself are compared
with these through its logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TIMES = ("frames", "seconds")


@dataclass(frozen=True)
class Text:
    """``length`` text tokens."""

    length: int


@dataclass(frozen=True)
class Vision:
    """An image (``frames == 1``) or a video of ``frames × height × width`` tokens, row-major, as
    the language model sees it (after the vision tower's merges); ``seconds`` between temporal
    tokens (videos)."""

    frames: int
    height: int
    width: int
    seconds: float = 1.0

    @property
    def tokens(self) -> int:
        return self.frames * self.height * self.width


def segment_length(segment: Text | Vision) -> int:
    return segment.length if isinstance(segment, Text) else segment.tokens


def _time_ids(segment: Vision, time: str, ids_per_second: float) -> torch.Tensor:
    k = torch.arange(segment.frames, dtype=torch.float64)
    if time == "frames":
        return k.long()
    return (k * segment.seconds * ids_per_second).long()


def mrope_positions(segments, time: str = "frames", ids_per_second: float = 1.0,
                    start: int = 0) -> tuple[torch.Tensor, int]:
    """The ``(3, n)`` int64 ids of ``segments`` (a sequence of :class:`Text` and :class:`Vision`)
    from ``start``, and the row's ``delta`` (``max + 1 − n − start``: what a decode after it adds to
    its token count)."""
    if time not in TIMES:
        raise ValueError(f"time must be one of {TIMES}, got {time!r}")
    if not math.isfinite(ids_per_second) or ids_per_second <= 0:
        raise ValueError(f"ids_per_second must be a positive finite number, got {ids_per_second}")
    parts, following = [], int(start)
    for segment in segments:
        if isinstance(segment, Text):
            if segment.length < 0:
                raise ValueError(f"a text segment's length must be >= 0, got {segment.length}")
            parts.append(torch.arange(following, following + segment.length).expand(3, -1))
        elif isinstance(segment, Vision):
            if min(segment.frames, segment.height, segment.width) < 1:
                raise ValueError(f"a vision segment needs at least one token per axis, got {segment}")
            t, h, w = torch.meshgrid(_time_ids(segment, time, ids_per_second), torch.arange(segment.height),
                                     torch.arange(segment.width), indexing="ij")
            parts.append(torch.stack((t, h, w)).reshape(3, -1) + following)
        else:
            raise TypeError(f"a segment is Text or Vision, got {type(segment).__name__}")
        if parts[-1].numel():
            following = int(parts[-1].max()) + 1
    ids = torch.cat(parts, dim=1) if parts else torch.zeros(3, 0, dtype=torch.long)
    n = ids.shape[1]
    return ids.long(), following - n - int(start)
