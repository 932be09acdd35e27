"""transformers' vision-language models with M-RoPE, built tiny from a config with random weights (no
download, vision tower included): the VLM relations (``specs/test_vision_language.py``, VLM-*) run
through the ids each model builds from its pictures, its cache and its ``rope_deltas``.

Every model: a language model of 2 layers, width 64, 4 heads of 16 (2 key/value heads),
vocabulary 128, ``max_position_embeddings`` 4096, eager attention, float32, ``initializer_range``
0.2 (the model relations' reasons); a vision tower of 1 block, width 32, patches of 2 × 2 pixels
and 2 frames, merged 2 × 2 into one token. Pictures are random pixels with their grids and token
types, as a processor would hand them over. Qwen2.5-VL's ``tokens_per_second`` is 2, so that its
videos' time ids (seconds) differ from frame indices; Qwen3-VL and GLM-4.1V separate video frames
by timestamps (text), so only their images are judged (``video_time`` None). GLM-4.1V rotates half
of each head with shares 8:12:12; here its head is 32 wide, so that 2:3:3 of its 8 rotated pairs
keep those shares.

The model relations (MODEL-*) are judged on each family's text model as a causal LM (``lm_qwen2``,
``lm_qwen3``, ``lm_glm4``): here they are declared n/a.
"""

from __future__ import annotations

import posenc
from posenc.harness.catalogue.claims import MODEL_CLAIMS
from posenc.harness.catalogue.declarations import model_claims_for
from posenc.harness.catalogue.records import ModelTraits, not_applicable

from .support import ORIGIN, available, missing, version

VOCAB, WIDTH, LAYERS, HEADS, KV_HEADS, FFN, MAX_POSITION, INIT = 128, 64, 2, 4, 2, 128, 4096, 0.2
TEXT = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POSITION,
            initializer_range=INIT, pad_token_id=0, bos_token_id=1, eos_token_id=2)
VISION = dict(depth=1, embed_dim=32, hidden_size=WIDTH, out_hidden_size=WIDTH, intermediate_size=WIDTH, num_heads=2,
              patch_size=2, temporal_patch_size=2, spatial_merge_size=2, in_channels=3, initializer_range=INIT)
TOKENS = dict(image_token_id=100, video_token_id=101, vision_start_token_id=102, vision_end_token_id=103)


def _rope(sections, **more) -> dict:
    return {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(sections), **more}


#: name -> (config class, its text, vision and top-level arguments, ModelTraits fields)
CONFIGS = {
    "vlm_qwen2_vl": ("Qwen2VLConfig", {"rope_parameters": _rope((2, 3, 3))}, {}, {"video_time": "frames"}),
    "vlm_qwen2_5_vl": ("Qwen2_5_VLConfig", {"rope_parameters": _rope((2, 3, 3))},
                       {"fullatt_block_indexes": [0], "window_size": 8, "tokens_per_second": 2},
                       {"video_time": "seconds"}),
    "vlm_qwen3_vl": ("Qwen3VLConfig", {"head_dim": 16, "rope_parameters": _rope((4, 2, 2), mrope_interleaved=True)},
                     {"num_position_embeddings": 64, "deepstack_visual_indexes": [0]}, {"video_time": None}),
    # GLM-4.1V's shares 8:12:12 of a half-rotated head, at head_dim 32: 2:3:3 of 8 rotated pairs
    "vlm_glm4v": ("Glm4vConfig", {"head_dim": 32, "rope_parameters": _rope((2, 3, 3), partial_rotary_factor=0.5)},
                  {}, {"video_time": None}),
}


def _build(config_class: str, text: dict, vision: dict, traits: ModelTraits):
    def build(config: posenc.BuildConfig):
        import transformers
        from transformers import AutoModelForImageTextToText

        from posenc.harness.whole_models.vision_models import HFVisionLanguageLM

        transformers.logging.set_verbosity_error()
        model_config = getattr(transformers, config_class)(
            text_config={**TEXT, **text}, vision_config={**VISION, **vision}, **TOKENS)
        model = AutoModelForImageTextToText.from_config(model_config, attn_implementation="eager", dtype=config.dtype)
        return HFVisionLanguageLM(model.to(config.device), traits)

    return build


def _register() -> None:
    present = available("transformers")
    for name, (config_class, text, vision, fields) in CONFIGS.items():
        family = config_class[:-6]
        traits = ModelTraits(max_position=MAX_POSITION, vocab_size=VOCAB, vision=True, packing="none",
                             library=f"transformers {version('transformers')} {family}", **fields)
        text_path = not_applicable("a claim about a causal LM's text path: judged on the family's text "
                                   "model (lm_qwen2, lm_qwen3, lm_glm4); here the VLM relations")
        posenc.register(posenc.EncoderRecord(
            name=name, build=_build(config_class, text, vision, traits) if present else missing("transformers"),
            kind="model", origin=ORIGIN, model=traits,
            source=f"transformers {version('transformers')} {family} vision-language model, from a tiny config",
            description=f"{family}: mrope_section={text['rope_parameters']['mrope_section']}"
                        + (", interleaved" if text["rope_parameters"].get("mrope_interleaved") else "")
                        + f", video time by {fields['video_time'] or 'timestamps (not judged)'}",
            claims=model_claims_for(traits, {c: text_path for c in MODEL_CLAIMS}),
        ))


_register()
