"""A vision-language model as the VLM relations call it (``specs/test_vision_language.py``).

The relations describe each row as segments (:class:`~posenc.encoders.mrope_positions.Text` and
:class:`~posenc.encoders.mrope_positions.Vision`); the adapter turns a batch of rows into the
model's inputs: token ids with the model's placeholders where images and videos go, and the
vision tensors (random pixels, the grids, the token types) the model needs::

    prompt = subject.prompt(rows, seed)          # a VisionPrompt: ids and every image of the batch
    logits, cache = subject(prompt.ids, vision=prompt.inputs(), cache=None)

``vision=`` travels beside the harness's model convention (:mod:`.models`); with
``position_ids=None`` the model builds its M-RoPE ids itself, from its ``rope_deltas`` while
continuing. :class:`HFVisionLanguageLM` adapts transformers' Qwen2-VL family
(``*ForConditionalGeneration``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...encoders.mrope_positions import Text, Vision, segment_length
from .models import HFCausalLM, NotInConvention
from ..catalogue.records import ModelTraits

IMAGE, VIDEO = 1, 2  # transformers' token types (0: text)


@dataclass(frozen=True)
class Pad:
    """``length`` pad tokens at the start of a row (left padding), masked out."""

    length: int


def _length(segment) -> int:
    return segment.length if isinstance(segment, Pad) else segment_length(segment)


@dataclass(frozen=True)
class Picture:
    """One image or video of a prompt: its row, its first token, its segment and its pixels."""

    row: int
    start: int
    segment: Vision
    kind: int  # IMAGE or VIDEO
    pixels: torch.Tensor
    grid: tuple[int, int, int]  # the vision tower's (t, h, w) in patches

    @property
    def end(self) -> int:
        return self.start + self.segment.tokens


@dataclass(frozen=True)
class VisionPrompt:
    """A batch of rows of equal length: ids ``(batch, n)``, each row's segments, its pictures, the
    attention mask (0 at a row's left pads)."""

    ids: torch.Tensor
    rows: tuple[tuple, ...]
    pictures: tuple[Picture, ...]
    types: torch.Tensor  # (batch, n): 0 text, IMAGE, VIDEO
    mask: torch.Tensor  # (batch, n): 1 a token, 0 a pad

    @property
    def padded(self) -> bool:
        return not bool(self.mask.bool().all())

    def alone(self, row: int) -> "VisionPrompt":
        """Row ``row`` alone, without its pads."""
        pads = sum(s.length for s in self.rows[row] if isinstance(s, Pad))
        one = self.select([row])
        pictures = tuple(Picture(0, p.start - pads, p.segment, p.kind, p.pixels, p.grid) for p in one.pictures)
        return VisionPrompt(one.ids[:, pads:], (tuple(s for s in self.rows[row] if not isinstance(s, Pad)),),
                            pictures, one.types[:, pads:], one.mask[:, pads:])

    def select(self, rows) -> "VisionPrompt":
        """The prompt of ``rows`` alone, in that order."""
        rows = list(rows)
        order = {old: new for new, old in enumerate(rows)}
        pictures = tuple(Picture(order[p.row], p.start, p.segment, p.kind, p.pixels, p.grid)
                         for p in sorted((p for p in self.pictures if p.row in order),
                                         key=lambda p: (order[p.row], p.start)))
        return VisionPrompt(self.ids[rows], tuple(self.rows[r] for r in rows), pictures, self.types[rows],
                            self.mask[rows])

    def inputs(self, start: int = 0, end: int | None = None) -> dict:
        """The vision keywords for tokens ``start … end − 1`` of every row: the pictures wholly
        inside them; a picture cut by either end is an error (a model takes a picture whole)."""
        end = self.ids.shape[1] if end is None else end
        inside = []
        for p in self.pictures:
            if p.start < end and p.end > start:
                if p.start < start or p.end > end:
                    raise NotInConvention(f"tokens {start}…{end - 1} cut a picture at {p.start}…{p.end - 1} "
                                          "(a model takes a picture's tokens in one call)")
                inside.append(p)
        found = {"mm_token_type_ids": self.types[:, start:end]}
        for kind, pixels, grids in ((IMAGE, "pixel_values", "image_grid_thw"),
                                    (VIDEO, "pixel_values_videos", "video_grid_thw")):
            chosen = [p for p in inside if p.kind == kind]
            if chosen:
                found[pixels] = torch.cat([p.pixels for p in chosen])
                found[grids] = torch.tensor([p.grid for p in chosen], device=self.ids.device)
                if kind == VIDEO:
                    found["second_per_grid_ts"] = torch.tensor([p.segment.seconds for p in chosen],
                                                               device=self.ids.device)
        return found


class HFVisionLanguageLM(HFCausalLM):
    """transformers' Qwen2-VL family: ``model(input_ids, pixel_values=, image_grid_thw=,
    mm_token_type_ids=, position_ids=, cache=)``, M-RoPE ids of shape ``(3, batch, seq)``."""

    def __init__(self, model, traits: ModelTraits):
        super().__init__(model, traits)
        config = model.config
        self.vision_config = config.vision_config
        self.merge = int(self.vision_config.spatial_merge_size)
        self.image_token = int(config.image_token_id)
        self.video_token = int(config.video_token_id)
        self.ids_per_second = float(getattr(self.vision_config, "tokens_per_second", 1) or 1)
        channels = int(getattr(self.vision_config, "in_channels", getattr(self.vision_config, "in_chans", 3)))
        self.patch_width = channels * int(self.vision_config.temporal_patch_size) \
            * int(self.vision_config.patch_size) ** 2
        self.pad_token = int(getattr(config.text_config, "pad_token_id", None) or 0)
        specials = {getattr(config, a, None) for a in ("image_token_id", "video_token_id", "vision_start_token_id",
                                                       "vision_end_token_id", "pad_token_id", "eos_token_id")}
        self.text_tokens = torch.tensor([t for t in range(3, int(config.text_config.vocab_size)) if t not in specials])

    def prompt(self, rows, seed: int = 0) -> VisionPrompt:
        """Token ids and pixels for ``rows`` (each a sequence of segments, all of one length; a
        :class:`Pad` first pads a row on the left)."""
        lengths = {sum(_length(s) for s in row) for row in rows}
        if len(lengths) != 1:
            raise ValueError(f"the rows of a prompt must have one length, got {sorted(lengths)}")
        g = torch.Generator().manual_seed(seed)
        device = next(self.model.parameters()).device
        ids, types, pictures, masks = [], [], [], []
        for r, row in enumerate(rows):
            row_ids, row_types, at = [], [], 0
            for segment in row:
                n = _length(segment)
                if isinstance(segment, Pad):
                    row_ids.append(torch.full((n,), self.pad_token))
                    row_types.append(torch.zeros(n, dtype=torch.long))
                elif isinstance(segment, Text):
                    row_ids.append(self.text_tokens[torch.randint(len(self.text_tokens), (n,), generator=g)])
                    row_types.append(torch.zeros(n, dtype=torch.long))
                else:
                    kind = IMAGE if segment.frames == 1 else VIDEO
                    grid = (segment.frames, segment.height * self.merge, segment.width * self.merge)
                    pixels = torch.randn(grid[0] * grid[1] * grid[2], self.patch_width, generator=g)
                    pictures.append(Picture(r, at, segment, kind, pixels.to(device), grid))
                    row_ids.append(torch.full((n,), self.image_token if kind == IMAGE else self.video_token))
                    row_types.append(torch.full((n,), kind))
                at += n
            ids.append(torch.cat(row_ids))
            types.append(torch.cat(row_types))
            pads = sum(s.length for s in row if isinstance(s, Pad))
            masks.append(torch.cat((torch.zeros(pads, dtype=torch.long), torch.ones(at - pads, dtype=torch.long))))
        return VisionPrompt(torch.stack(ids).to(device), tuple(tuple(r) for r in rows), tuple(pictures),
                            torch.stack(types).to(device), torch.stack(masks).to(device))

    def _taken(self, vision: dict | None) -> dict:
        """The vision keywords this model takes: video seconds only where its time runs in seconds."""
        vision = dict(vision or {})
        if self.traits.video_time != "seconds":
            vision.pop("second_per_grid_ts", None)
        return vision

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None,
                vision=None):
        if not vision:
            return super().forward(input_ids, position_ids, attention_mask, cache, document_ids)
        arguments = {"input_ids": input_ids, "use_cache": True, **self._taken(vision)}
        if position_ids is not None:
            arguments["position_ids"] = position_ids
        if attention_mask is not None:
            arguments["attention_mask"] = attention_mask
        return self._answer(arguments, cache)

    def generate(self, input_ids, attention_mask, prompt: int, vision=None) -> torch.Tensor:
        return super().generate(input_ids, attention_mask, prompt, **self._taken(vision))
