"""transformers' causal LMs, built tiny from a config with random weights (no download), one record
per architecture and rope type: the model relations (``specs/test_models.py``, MODEL-*) run
through the positions, caches, masks and casts with which each model calls its RoPE.

Every model: 2 layers, width 64, 4 heads of 16 (2 key/value heads where the architecture has
them), vocabulary 128, ``max_position_embeddings`` 32 (so a 40-token decode crosses it; scaled
types have an original length of 16), eager attention, float32, eval mode, and
``initializer_range`` 0.2 so that attention depends on position visibly (transformers' default
0.02 leaves it nearly blind to it; each relation checks its own teeth anyway).

Declared designs (transformers documents them): ``dynamic`` recomputes its base from the
largest position of a call, and ``longrope`` switches to its long factors past the original
length, so shifted positions, token-by-token decoding and chunked prefill cross a threshold on
one path and not on the other (MODEL-1/2/3 refuted; longrope's factors also follow the batch's
longest row, MODEL-4). GPT-2 has an absolute table and GPT-J a fixed sin/cos table of
``n_positions`` rows, MPT an ALiBi table of ``max_seq_len`` (past them an error is the
documented behaviour, MODEL-7); Bloom and MPT take their ALiBi positions from the mask (no
position ids: MODEL-1 and MODEL-6 n/a).
"""

from __future__ import annotations

import posenc
from posenc.harness.declarations import model_claims_for
from posenc.harness.models import rope_parameters, rope_type_designs
from posenc.harness.records import ModelTraits

from .support import ORIGIN, available, missing, version

VOCAB, WIDTH, LAYERS, HEADS, KV_HEADS, FFN, MAX_POSITION, ORIGINAL = 128, 64, 2, 4, 2, 128, 32, 16
#: The initialisation's standard deviation: large enough that the logits depend on position.
INIT = 0.2
COMMON = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
              num_key_value_heads=KV_HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POSITION,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=INIT)
ROPE = {"rope_type": "default", "rope_theta": 10000.0}
SCALED = {"factor": MAX_POSITION / ORIGINAL, "original_max_position_embeddings": ORIGINAL}


def _rope(**fields) -> dict:
    return {**ROPE, **fields}


def _configs() -> dict:
    """name -> (config class name, its arguments, ModelTraits fields)."""
    pairs = 16 // 2
    return {
        "lm_llama": ("LlamaConfig", {**COMMON, "rope_parameters": ROPE}, {}),
        "lm_llama_linear": ("LlamaConfig", {**COMMON, "rope_parameters": _rope(rope_type="linear", factor=2.0)}, {}),
        "lm_llama_dynamic": ("LlamaConfig", {**COMMON, "rope_parameters": _rope(rope_type="dynamic", factor=2.0)},
                             {}),
        "lm_llama_yarn": ("LlamaConfig", {**COMMON, "rope_parameters": _rope(rope_type="yarn", **SCALED)},
                          {"original_max_position": ORIGINAL}),
        "lm_llama3": ("LlamaConfig", {**COMMON, "rope_parameters": _rope(
            rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0, **SCALED)},
            {"original_max_position": ORIGINAL}),
        "lm_mistral": ("MistralConfig", {**COMMON, "sliding_window": 8}, {}),
        "lm_mixtral": ("MixtralConfig", {**COMMON, "num_local_experts": 4, "num_experts_per_tok": 2,
                                         "sliding_window": None}, {}),
        "lm_qwen2": ("Qwen2Config", COMMON, {}),
        "lm_qwen3": ("Qwen3Config", {**COMMON, "head_dim": 16}, {}),
        "lm_gemma": ("GemmaConfig", {**COMMON, "head_dim": 16}, {}),
        "lm_gemma2": ("Gemma2Config", {**COMMON, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 8,
                                       "layer_types": ["sliding_attention", "full_attention"]}, {}),
        "lm_gemma3": ("Gemma3TextConfig", {**COMMON, "head_dim": 16, "query_pre_attn_scalar": 16,
                                           "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
                                           "rope_parameters": {"sliding_attention": ROPE,
                                                               "full_attention": _rope(rope_type="linear", factor=8.0,
                                                                                       rope_theta=1e6)}}, {}),
        "lm_phi3_longrope": ("Phi3Config", {**COMMON, "original_max_position_embeddings": ORIGINAL,
                                            "rope_parameters": _rope(
                                                rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(pairs)],
                                                long_factor=[2.0 + 0.5 * i for i in range(pairs)], **SCALED)},
                             {"original_max_position": ORIGINAL}),
        "lm_gpt_neox": ("GPTNeoXConfig", {k: v for k, v in COMMON.items() if k != "num_key_value_heads"}
                        | {"rotary_pct": 0.25}, {}),
        "lm_gptj": ("GPTJConfig", {"vocab_size": VOCAB, "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS,
                                   "n_inner": FFN, "n_positions": 4096, "rotary_dim": 8, "bos_token_id": 1,
                                   "eos_token_id": 2, "initializer_range": INIT},
                    {"max_position": 4096, "extrapolates": False}),
        "lm_falcon": ("FalconConfig", {"vocab_size": VOCAB, "hidden_size": WIDTH, "num_hidden_layers": LAYERS,
                                       "num_attention_heads": HEADS, "num_kv_heads": KV_HEADS,
                                       "new_decoder_architecture": True, "alibi": False, "ffn_hidden_size": FFN,
                                       "max_position_embeddings": MAX_POSITION, "initializer_range": INIT}, {}),
        "lm_stablelm": ("StableLmConfig", {**COMMON, "partial_rotary_factor": 0.25}, {}),
        "lm_olmo2": ("Olmo2Config", COMMON, {}),
        "lm_cohere": ("CohereConfig", COMMON, {}),
        "lm_starcoder2": ("Starcoder2Config", {**COMMON, "sliding_window": None}, {}),
        "lm_deepseek_v3": ("DeepseekV3Config", {**COMMON, "num_key_value_heads": HEADS, "moe_intermediate_size": 32,
                                                "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
                                                "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
                                                "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8,
                                                "qk_nope_head_dim": 8, "v_head_dim": 16,
                                                "rope_parameters": _rope(rope_type="yarn", mscale=1.0,
                                                                         mscale_all_dim=1.0, **SCALED)},
                           {"original_max_position": ORIGINAL}),
        "lm_gpt2": ("GPT2Config", {"vocab_size": VOCAB, "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS,
                                   "n_inner": FFN, "n_positions": 4096, "bos_token_id": 1, "eos_token_id": 2,
                                   "initializer_range": INIT},
                    {"positions": "absolute", "max_position": 4096}),
        "lm_bloom": ("BloomConfig", {"vocab_size": VOCAB, "hidden_size": WIDTH, "n_layer": LAYERS, "n_head": HEADS,
                                     "initializer_range": INIT},
                     {"positions": "alibi", "max_position": None, "takes_position_ids": False}),
        "lm_mpt": ("MptConfig", {"vocab_size": VOCAB, "d_model": WIDTH, "n_layers": LAYERS, "n_heads": HEADS,
                                 "expansion_ratio": 2, "max_seq_len": MAX_POSITION, "attn_config": {"alibi": True},
                                 "initializer_range": INIT},
                   {"positions": "alibi", "takes_position_ids": False, "extrapolates": False}),
    }


def _build(name: str, config_class: str, arguments: dict, traits: ModelTraits):
    def build(config: posenc.BuildConfig):
        import transformers
        from transformers import AutoModelForCausalLM

        from posenc.harness.models import HFCausalLM

        transformers.logging.set_verbosity_error()
        model_config = getattr(transformers, config_class)(**arguments)
        model = AutoModelForCausalLM.from_config(model_config, attn_implementation="eager", dtype=config.dtype)
        return HFCausalLM(model.to(config.device), traits)

    return build


def _register() -> None:
    present = available("transformers")
    for name, (config_class, arguments, fields) in _configs().items():
        traits = ModelTraits(**{"max_position": MAX_POSITION, "vocab_size": VOCAB, **fields,
                                "library": f"transformers {version('transformers')} {config_class[:-6]}"})
        posenc.register(posenc.EncoderRecord(
            name=name, build=_build(name, config_class, arguments, traits) if present else missing("transformers"),
            kind="model", origin=ORIGIN, model=traits,
            source=f"transformers {version('transformers')} {config_class[:-6]} causal LM, from a tiny config",
            description=f"{config_class[:-6]}: " + ", ".join(
                f"{k}={v}" for k, v in arguments.items() if k in ("rope_parameters", "sliding_window", "rotary_pct",
                                                                  "rotary_dim", "partial_rotary_factor")),
            claims=model_claims_for(traits, {claim: posenc.refuted(why) for claim, why in rope_type_designs(
                rope_parameters(arguments.get("rope_parameters")).get("rope_type", "default")).items()}),
        ))


_register()
