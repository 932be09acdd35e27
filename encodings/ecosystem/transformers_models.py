"""transformers' causal LMs, built tiny from a config with random weights (no download), one record
per architecture and rope type: the model relations (``specs/test_models.py``, MODEL-*) run
through the positions, caches, masks and casts with which each model calls its RoPE.

Every model: 2 layers, width 64, 4 heads of 16 (2 key/value heads where the architecture has
them), vocabulary 128, ``max_position_embeddings`` 32 (so a 40-token decode crosses it; scaled
types have an original length of 16), transformers' default attention (SDPA where the
architecture has it, as users run it; eager where not), float32, eval mode, and
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

import dataclasses

import posenc
from posenc.harness.catalogue.declarations import model_claims_for
from posenc.harness.whole_models.model_plan import configured_designs, designs_reached
from posenc.harness.whole_models.models import rescaling_threshold, rope_parameters, rope_type_of
from posenc.harness.catalogue.records import ModelTraits

from .support import ORIGIN, available, missing, version

VOCAB, WIDTH, LAYERS, HEADS, KV_HEADS, FFN, MAX_POSITION, ORIGINAL = 128, 64, 2, 4, 2, 128, 32, 16
#: The initialisation's standard deviation: large enough that the logits depend on position.
INIT = 0.2
COMMON = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
              num_key_value_heads=KV_HEADS, intermediate_size=FFN, max_position_embeddings=MAX_POSITION,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=INIT)
ROPE = {"rope_type": "default", "rope_theta": 10000.0}
SCALED = {"factor": MAX_POSITION / ORIGINAL, "original_max_position_embeddings": ORIGINAL}


#: The configuration fields a record's description names.
DESCRIBED = ("rope_parameters", "sliding_window", "rotary_pct", "rotary_dim", "partial_rotary_factor",
             "max_position_embeddings", "original_max_position_embeddings")


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


HEAD_DIM = WIDTH // HEADS
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
#: Mamba-2 layers: 8 heads of 16, a small state, chunks of 16.
MAMBA2 = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_d_conv": 4,
          "mamba_expand": 2, "mamba_chunk_size": 16}
_PAIRS = HEAD_DIM // 2


def _unusual_configs() -> dict:
    """Architectures whose position handling is unusual: NoPE layers, chunked attention, attention
    sinks, MLA with a decoupled rotary part, hybrids with Mamba or linear-attention layers,
    interleaved or partial rotary, and scaled RoPE at realistic lengths."""
    return {
    # --- NoPE layers -------------------------------------------------------------------------------------------------
    "lm_smollm3": ("SmolLM3Config", {**COMMON, "no_rope_layers": [1, 0], "rope_parameters": ROPE}, {}),
    "lm_llama4_text": ("Llama4TextConfig", {**COMMON, "head_dim": HEAD_DIM, "intermediate_size_mlp": FFN, **MOE,
                                            "no_rope_layers": [1, 0], "attention_chunk_size": 8,
                                            "rope_parameters": ROPE}, {}),
    # NoPE layers with attention temperature tuning switched on at tiny scale (floor_scale 4 instead of 8192)
    "lm_exaone4": ("Exaone4Config", {**COMMON, "sliding_window": 8,
                                     "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": ROPE},
                   {}),
    "lm_cohere2": ("Cohere2Config", {**COMMON, "sliding_window": 8,
                                     "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": ROPE},
                   {}),
    # --- attention sinks + sliding window + yarn -------------------------------------------------------------------
    "lm_gpt_oss": ("GptOssConfig", {**COMMON, "head_dim": HEAD_DIM, **MOE, "sliding_window": 8,
                                    "layer_types": ["sliding_attention", "full_attention"],
                                    "rope_parameters": _rope(rope_type="yarn", beta_fast=32.0, beta_slow=1.0,
                                                             truncate=False, **SCALED)},
                   {"original_max_position": ORIGINAL}),
    # --- MLA with a decoupled rotary part --------------------------------------------------------------------------
    "lm_deepseek_v2": ("DeepseekV2Config", {**COMMON, "num_key_value_heads": HEADS, "moe_intermediate_size": 32,
                                            "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
                                            "first_k_dense_replace": 1, "topk_method": "greedy",
                                            "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8,
                                            "qk_nope_head_dim": 8, "v_head_dim": 16, "rope_parameters": ROPE}, {}),
    "lm_minicpm3": ("MiniCPM3Config", {**COMMON, "num_key_value_heads": HEADS, "kv_lora_rank": 16, "q_lora_rank": 32,
                                       "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
                                       "scale_emb": 1, "dim_model_base": WIDTH, "rope_parameters": ROPE}, {}),
    # --- hybrids with mamba / linear attention / conv layers -------------------------------------------------------
    "lm_bamba": ("BambaConfig", {**COMMON, "attn_layer_indices": [1], **MAMBA2, "rope_parameters": ROPE}, {}),
    "lm_falcon_h1": ("FalconH1Config", {**COMMON, **MAMBA2, "mamba_d_ssm": 128, "rope_parameters": ROPE}, {}),
    "lm_granitemoehybrid": ("GraniteMoeHybridConfig", {**COMMON, **MOE, "shared_intermediate_size": FFN,
                                                       "layer_types": ["mamba", "attention"],
                                                       "position_embedding_type": "rope", "rope_parameters": ROPE,
                                                       **MAMBA2}, {}),
    "lm_qwen3_next": ("Qwen3NextConfig", {**COMMON, "head_dim": HEAD_DIM, "linear_key_head_dim": 16,
                                          "linear_value_head_dim": 16, "linear_num_key_heads": 2,
                                          "linear_num_value_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
                                          "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                                          "layer_types": ["linear_attention", "full_attention"],
                                          "rope_parameters": _rope(partial_rotary_factor=0.25)}, {}),
    "lm_lfm2": ("Lfm2Config", {**COMMON, "layer_types": ["conv", "full_attention"], "block_auto_adjust_ff_dim": False,
                               "rope_parameters": ROPE}, {}),
    # MLA without rotary (Kimi Linear's MLA layers are NoPE) + KDA linear attention layers
    # --- interleaved / partial rotary ------------------------------------------------------------------------------
    "lm_glm": ("GlmConfig", {**COMMON, "head_dim": HEAD_DIM,
                             "rope_parameters": _rope(partial_rotary_factor=0.5)}, {}),
    "lm_glm4": ("Glm4Config", {**COMMON, "head_dim": HEAD_DIM,
                               "rope_parameters": _rope(partial_rotary_factor=0.5)}, {}),
    "lm_ernie4_5": ("Ernie4_5Config", {**COMMON, "head_dim": HEAD_DIM, "rope_parameters": ROPE}, {}),
    "lm_persimmon": ("PersimmonConfig", {**{k: v for k, v in COMMON.items() if k != "num_key_value_heads"},
                                         "rope_parameters": _rope(partial_rotary_factor=0.5)}, {}),
    # --- scaled rope at realistic lengths --------------------------------------------------------------------------
    "lm_phi3_longrope_4k": ("Phi3Config", {**COMMON, "max_position_embeddings": 131072,
                                           "original_max_position_embeddings": 4096,
                                           "rope_parameters": _rope(
                                               rope_type="longrope",
                                               short_factor=[1.0 + 0.1 * i for i in range(_PAIRS)],
                                               long_factor=[2.0 + 0.5 * i for i in range(_PAIRS)],
                                               factor=32.0, original_max_position_embeddings=4096)},
                            {"max_position": 131072, "original_max_position": 4096}),
    "lm_llama_dynamic_4k": ("LlamaConfig", {**COMMON, "max_position_embeddings": 4096,
                                            "rope_parameters": _rope(rope_type="dynamic", factor=2.0)},
                            {"max_position": 4096}),
    "lm_hunyuan_ntk_alpha": ("HunYuanDenseV1Config", {**COMMON, "head_dim": HEAD_DIM,
                                                      "rope_parameters": _rope(rope_type="dynamic", alpha=1000.0,
                                                                               factor=1.0)}, {}),
    # --- other interesting -----------------------------------------------------------------------------------------
    "lm_olmo3": ("Olmo3Config", {**COMMON, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
                                 "rope_parameters": ROPE}, {}),
    "lm_gemma3n_text": ("Gemma3nTextConfig", {**COMMON, "head_dim": HEAD_DIM, "sliding_window": 8,
                                              "layer_types": ["sliding_attention", "full_attention"],
                                              "num_kv_shared_layers": 0, "vocab_size_per_layer_input": VOCAB,
                                              "hidden_size_per_layer_input": 16, "laurel_rank": 8,
                                              "activation_sparsity_pattern": [0.0, 0.0],
                                              "rope_parameters": {"sliding_attention": ROPE,
                                                                  "full_attention": _rope(rope_theta=1e6)}}, {}),
    "lm_seed_oss": ("SeedOssConfig", {**COMMON, "head_dim": HEAD_DIM, "attention_dropout": 0.0,
                                      "residual_dropout": 0.0, "rope_parameters": ROPE}, {}),
    "lm_apertus": ("ApertusConfig", {**COMMON, "rope_parameters": _rope(
        rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0, **SCALED)},
        {"original_max_position": ORIGINAL}),
    "lm_arcee": ("ArceeConfig", {**COMMON, "rope_parameters": _rope(rope_type="yarn", **SCALED)},
                 {"original_max_position": ORIGINAL}),
    "lm_dots1": ("Dots1Config", {**COMMON, "moe_intermediate_size": 32, "n_shared_experts": 1, "n_routed_experts": 4,
                                 "num_experts_per_tok": 2, "first_k_dense_replace": 1, "sliding_window": 8,
                                 "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": ROPE}, {}),
    }


def _build(name: str, config_class: str, arguments: dict, traits: ModelTraits):
    def build(config: posenc.BuildConfig):
        import transformers
        from transformers import AutoModelForCausalLM

        from posenc.harness.whole_models.models import HFCausalLM

        transformers.logging.set_verbosity_error()
        model_config = getattr(transformers, config_class)(**arguments)
        model = AutoModelForCausalLM.from_config(model_config, dtype=config.dtype)
        return HFCausalLM(model.to(config.device), traits)

    return build


def designs_of(config_class: str, arguments: dict, kind: str, traits: ModelTraits) -> dict:
    """What a record's design breaks: its rope type's and its config's, by the rules ``--model``
    applies to a model's config (:func:`~posenc.harness.whole_models.models.transformers_designs`)."""
    model_type = "".join(f"_{c.lower()}" if c.isupper() else c for c in config_class[:-6]).lstrip("_")
    return {**designs_reached(kind, traits), **configured_designs({"model_type": model_type, **arguments}, traits)}


def _register() -> None:
    present = available("transformers")
    for name, (config_class, arguments, fields) in {**_configs(), **_unusual_configs()}.items():
        kind = rope_type_of(rope_parameters(arguments.get("rope_parameters")))
        traits = ModelTraits(**{"max_position": MAX_POSITION, "vocab_size": VOCAB, "packing": "positions", **fields,
                                "library": f"transformers {version('transformers')} {config_class[:-6]}"})
        traits = dataclasses.replace(traits, rescales_at=rescaling_threshold(kind, traits),
                                     packing="none" if not traits.takes_position_ids else traits.packing)
        posenc.register(posenc.EncoderRecord(
            name=name, build=_build(name, config_class, arguments, traits) if present else missing("transformers"),
            kind="model", origin=ORIGIN, model=traits,
            source=f"transformers {version('transformers')} {config_class[:-6]} causal LM, from a tiny config",
            description=f"{config_class[:-6]}: " + ", ".join(
                f"{k}={v}" for k, v in arguments.items() if k in DESCRIBED),
            claims=model_claims_for(traits, {claim: posenc.refuted(why, specs=specs)
                                             for claim, (why, specs) in designs_of(config_class, arguments, kind,
                                                                                   traits).items()}),
        ))


_register()
