"""Mutant vision-language models: transformers' Qwen2.5-VL, built tiny, with its M-RoPE position
logic made correct (``vlmfixed``, the control), and variants that each ship one defect of the bug
reports on M-RoPE inside models, so that the VLM relations (``specs/test_vision_language.py``) can
show they catch it. A plug-in, loaded on request; it needs transformers::

    pytest specs/test_vision_language.py --plugin tests.vlm_mutants --encoders 'vlmfixed*'

The control differs from transformers 5.24's Qwen2.5-VL in two steps, both found by the VLM
relations on the ecosystem records: text after a picture continues from the picture's largest id
plus one (transformers resumes at ``start + max(h, w)``, below a video's time ids: VLM-3), and a
chunk that brings a picture after cached tokens gets ids that continue the cache (transformers
counts them from 0: VLM-6). Its ``get_rope_index`` is written here, independently of the
harness's reference. Each mutant overrides one step of the control; its ``@mutant`` declaration
says which relations it fails, with why where several fail.
"""

from __future__ import annotations

import dataclasses

import torch

import posenc
from posenc.harness.catalogue.claims import MODEL_CLAIMS
from posenc.harness.catalogue.declarations import model_claims_for
from posenc.harness.catalogue.records import ModelTraits, not_applicable

TRAITS = ModelTraits(max_position=4096, vocab_size=128, vision=True, video_time="seconds", packing="none",
                     library="transformers Qwen2.5-VL with fixed M-RoPE ids (tests/vlm_mutants)")
TEXT = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=4096, initializer_range=0.2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
VISION = dict(depth=1, hidden_size=64, out_hidden_size=64, intermediate_size=64, num_heads=2, patch_size=2,
              temporal_patch_size=2, spatial_merge_size=2, in_channels=3, fullatt_block_indexes=[0], window_size=8,
              tokens_per_second=2, initializer_range=0.2)
TOKENS = dict(image_token_id=100, video_token_id=101, vision_start_token_id=102, vision_end_token_id=103)
SOURCE = "tests/vlm_mutants"


def _classes():
    """The control's inner model and outer LM classes (transformers imported only when built)."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLModel,
    )

    class FixedModel(Qwen2_5_VLModel):
        """M-RoPE ids by the papers' rule, continued across a cache."""

        def time_step(self, seconds: float) -> float:
            """Time ids between a video's temporal tokens: seconds × ids per second (Qwen2.5-VL)."""
            return seconds * self.config.vision_config.tokens_per_second

        def row_deltas(self, deltas: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
            return deltas

        def picture_start(self, following: int, pads: int) -> int:
            """Where a picture's ids start in a row: after the ids before it, its pads left out."""
            return following

        def get_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                           second_per_grid_ts=None, attention_mask=None, **kwargs):
            kept = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
            merge = self.config.vision_config.spatial_merge_size
            grids = {1: iter((image_grid_thw if image_grid_thw is not None else torch.zeros(0, 3)).tolist()),
                     2: iter((video_grid_thw if video_grid_thw is not None else torch.zeros(0, 3)).tolist())}
            seconds = iter(second_per_grid_ts.tolist() if second_per_grid_ts is not None else [])
            positions = torch.zeros(3, *input_ids.shape, dtype=torch.long, device=input_ids.device)
            deltas = []
            for row in range(input_ids.shape[0]):
                types = mm_token_type_ids[row][kept[row]].tolist()  # a row's tokens, its pads left out
                pads = int((~kept[row]).sum())
                ids, following, j = [], 0, 0
                while j < len(types):
                    if types[j] == 0:
                        ids.append((following,) * 3)
                        following, j = following + 1, j + 1
                        continue
                    t, h, w = (int(v) for v in next(grids[types[j]]))
                    following = self.picture_start(following, pads)
                    step = self.time_step(next(seconds)) if types[j] == 2 else 0.0
                    block = [(following + int(k * step), following + y, following + x)
                             for k in range(t) for y in range(h // merge) for x in range(w // merge)]
                    ids += block
                    following, j = max(max(b) for b in block) + 1, j + len(block)
                positions[:, row, kept[row]] = torch.tensor(ids, device=input_ids.device).T
                deltas.append(following - len(types))
            deltas = torch.tensor(deltas, device=input_ids.device).unsqueeze(1)
            return positions, self.row_deltas(deltas, mm_token_type_ids)

        def continuing_delta(self, deltas: torch.Tensor, new_tokens: int) -> torch.Tensor:
            """The delta a call that continues the cache adds to its token indices."""
            return deltas

        def text_ids(self, start: int, n: int, batch: int, device) -> torch.Tensor:
            return torch.arange(start, start + n, device=device).expand(3, batch, n)

        def compute_3d_position_ids(self, input_ids, image_grid_thw=None, video_grid_thw=None, inputs_embeds=None,
                                    attention_mask=None, cache=None, second_per_grid_ts=None, mm_token_type_ids=None,
                                    **kwargs):
            held = 0 if cache is None else cache.get_seq_length()
            batch, n = inputs_embeds.shape[:2]
            device = inputs_embeds.device
            previous = self.rope_deltas if held and self.rope_deltas is not None \
                else torch.zeros(batch, 1, dtype=torch.long, device=device)
            pictures = image_grid_thw is not None or video_grid_thw is not None
            if input_ids is not None and mm_token_type_ids is not None and pictures:
                ids, deltas = self.get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw,
                                                  second_per_grid_ts, attention_mask)
                self.rope_deltas = previous + deltas
                return ids + held + previous.to(device)[None]
            if not held:
                self.rope_deltas = torch.zeros(batch, 1, dtype=torch.long, device=device)
            if attention_mask is not None and not bool(attention_mask.bool().all()):  # count a row's tokens only
                counted = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -n:]
                return counted[None].expand(3, -1, -1) + self.continuing_delta(previous, n).to(device)[None]
            return self.text_ids(held, n, batch, device) + self.continuing_delta(previous, n).to(device)[None]

    class FixedLM(Qwen2_5_VLForConditionalGeneration):
        pass

    return FixedModel, FixedLM


def _build(inner: str | None = None, outer: str | None = None, rotary: str | None = None):
    """A build: the control, with the mutant ``inner`` step (a method of the inner model), ``outer``
    step (of the LM) or ``rotary`` step (of the language model's rotary) from :data:`STEPS` swapped in."""

    def build(config: posenc.BuildConfig):
        import transformers
        from transformers import AutoModelForImageTextToText

        from posenc.harness.whole_models.vision_models import HFVisionLanguageLM

        transformers.logging.set_verbosity_error()
        fixed_model, fixed_lm = _classes()
        model_config = transformers.Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, **TOKENS)
        model = AutoModelForImageTextToText.from_config(model_config, attn_implementation="eager", dtype=config.dtype)
        model.model.__class__ = type("Mutant", (fixed_model,), STEPS[inner]) if inner else fixed_model
        model.__class__ = type("MutantLM", (fixed_lm,), STEPS[outer]) if outer else fixed_lm
        if rotary:
            turning = model.model.language_model.rotary_emb
            turning.__class__ = type("MutantRotary", (type(turning),), STEPS[rotary])
        return HFVisionLanguageLM(model.to(config.device), TRAITS)

    return build


TEXT_PATH = not_applicable("a claim about a causal LM's text path; the control judges the VLM relations")
CONTROL = posenc.EncoderRecord(
    name="vlmfixed", build=_build(), kind="model", model=TRAITS, source=SOURCE, origin="plug-in",
    claims=model_claims_for(TRAITS, {c: TEXT_PATH for c in MODEL_CLAIMS}),
    description="transformers Qwen2.5-VL, tiny, its M-RoPE ids made correct: text after a picture from its largest "
                "id + 1, a picture in a later chunk continuing the cache",
)


def _row_delta_of_first(self, deltas, types):
    """text-only rows take the first row's delta (mlx-vlm #1095)"""
    plain = ~(types != 0).any(dim=1)
    return torch.where(plain[:, None], deltas[:1].expand_as(deltas), deltas)


def _stale_deltas(self, input_ids, image_grid_thw=None, video_grid_thw=None, inputs_embeds=None,
                  attention_mask=None, cache=None, second_per_grid_ts=None, mm_token_type_ids=None, **kwargs):
    """a text-only forward without a cache reuses the deltas an earlier generate stored, repeated to
    its batch (transformers #44873: wrong ids, or a crash where the batch is smaller)"""
    held = 0 if cache is None else cache.get_seq_length()
    pictures = image_grid_thw is not None or video_grid_thw is not None
    if not held and not pictures and input_ids is not None and self.rope_deltas is not None:
        batch, n = input_ids.shape
        stale = self.rope_deltas.repeat_interleave(batch // self.rope_deltas.shape[0], dim=0)
        return torch.arange(n, device=input_ids.device).expand(3, batch, n) + stale[None]
    return super(type(self), self).compute_3d_position_ids(
        input_ids, image_grid_thw, video_grid_thw, inputs_embeds, attention_mask, cache, second_per_grid_ts,
        mm_token_type_ids)


def _picture_after_pads(self, following, pads):
    """a left-padded row's picture starts at its index in the padded row: its pads counted before
    it, though not before the text ahead of it"""
    return following + pads


def _chunk_restarts_delta(self, deltas, new_tokens):
    """a chunk of several tokens after the cache adds no delta: ids restart from the cache's length
    (vLLM #10403, sglang #8219); a decode step of one token keeps it"""
    return deltas if new_tokens == 1 else torch.zeros_like(deltas)


def _time_by_frames(self, seconds):
    """video time ids by frame index where absolute time (seconds) is declared"""
    return 1.0


def _text_on_time_axis(self, start, n, batch, device):
    """a text-only prompt gets its ids on the time axis, 0 on height and width"""
    if start:  # a call that continues a cache: equal ids
        return torch.arange(start, start + n, device=device).expand(3, batch, n)
    ids = torch.zeros(3, batch, n, dtype=torch.long, device=device)
    ids[0] = torch.arange(start, start + n, device=device)
    return ids


def _decode_without_deltas(self, outputs, model_kwargs, *args, **kwargs):
    """generate's decode steps take every axis's id from the token count, without the rows' deltas
    (transformers #40490's class: position ids prepared wrongly during generation)"""
    model_kwargs = super(type(self), self)._update_model_kwargs_for_generation(outputs, model_kwargs, *args, **kwargs)
    positions = model_kwargs.get("position_ids")
    if positions is not None and positions.dim() == 3 and positions.shape[0] == 4:  # text row, then t, h, w
        positions = positions.clone()
        positions[1:, :, -1] = positions[0, :, -1]
        model_kwargs["position_ids"] = positions
    return model_kwargs


def _ids_rounded_to_bfloat16(self, x, position_ids):
    """the rotary turns position ids rounded to bfloat16 (positions formed in a half dtype): exact
    up to 256, steps of 8 past 1024"""
    return super(type(self), self).forward(x, position_ids.to(torch.bfloat16).to(position_ids.dtype))


#: Each mutant's one step: name -> (inner or outer, the method it replaces, the function).
STEPS = {
    "row_delta": {"row_deltas": _row_delta_of_first},
    "stale": {"compute_3d_position_ids": _stale_deltas},
    "chunk": {"continuing_delta": _chunk_restarts_delta},
    "pads": {"picture_start": _picture_after_pads},
    "frames": {"time_step": _time_by_frames},
    "text": {"text_ids": _text_on_time_axis},
    "decode": {"_update_model_kwargs_for_generation": _decode_without_deltas},
    "rounded": {"forward": _ids_rounded_to_bfloat16},
}


@dataclasses.dataclass(frozen=True)
class VisionMutant:
    record: posenc.EncoderRecord
    fails: frozenset[str]
    why: str = ""


def _mutant(name: str, step: str, fails: set[str], why: str = "", where: str = "inner") -> VisionMutant:
    function = next(iter(STEPS[step].values()))
    build = _build(**{where: step})
    record = dataclasses.replace(CONTROL, name=f"vlmfixed_{name}", build=build,
                                 description=" ".join(function.__doc__.split()))
    return VisionMutant(record, frozenset(fails), why)


MUTANTS = [
    _mutant("row_delta_inherited", "row_delta", {"VLM-4"}),  # read by a decode through forward
    _mutant("stale_deltas", "stale", {"VLM-5"}),
    _mutant("chunk_restarts_delta", "chunk", {"VLM-6"}),
    _mutant("time_by_frames", "frames", {"VLM-3"}),
    _mutant("picture_after_pads", "pads", {"VLM-3"}),
    _mutant("text_ids_unequal", "text", {"VLM-1", "VLM-4", "VLM-6"},
            why="the text-only path alone builds the unequal ids, and the picture path equal ones: a text row alone "
                "(VLM-4) reads other than beside a picture, and a text chunk before a picture (VLM-6) other than "
                "the same tokens in a prefix that holds the picture"),
    _mutant("decode_without_deltas", "decode", {"VLM-3"}, where="outer"),
    _mutant("ids_rounded_to_bfloat16", "rounded", {"VLM-2"}, where="rotary"),
]
RECORDS = [CONTROL, *(m.record for m in MUTANTS)]
EXPECTED_CLAIMS = {m.record.name: set(m.fails) for m in MUTANTS}
WHY = {m.record.name: m.why for m in MUTANTS if m.why}

for _record in RECORDS:
    posenc.register(_record)
