"""``--model`` reads what a model's layers do, not what its names say: how far a sliding window
lets a query reach (MODEL-6), a model that ignores the position ids it is given (its own regime
judges it), a packing told by a restart its mask reads (MODEL-8's teeth), convolutions along the
sequence as state, another tower's layers as no text's, and a key selection downstream of
recurrent layers in their blame (``specs/test_models.py``, :mod:`posenc.harness.whole_models`).

Each model is built tiny from a config, as a user's file would build it.
"""

from __future__ import annotations

import textwrap
import types

import pytest
import torch

from posenc.harness.catalogue.states import State
from posenc.harness.whole_models import attribution
from posenc.harness.whole_models.models import sliding_reach, wide_layers, window_masks

from .test_models_as_they_come import _cells, _outcomes, _run, needs_transformers

pytestmark = pytest.mark.xdist_group("models_as_they_come")

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, initializer_range=0.2)

MODELS = textwrap.dedent(f'''
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    TINY = {TINY!r}

    def mistral_window():
        config = transformers.MistralConfig(**TINY, sliding_window=8, max_position_embeddings=4096)
        return AutoModelForCausalLM.from_config(config)

    def flint_nope():  # two layers, both full attention, which Flint leaves without a rotary
        config = AutoConfig.for_model("flint", **TINY, moe_intermediate_size=32, num_experts=4,
                                      num_experts_per_tok=2, shared_expert_intermediate_size=32,
                                      sliding_window=16, max_position_embeddings=8192)
        return AutoModelForCausalLM.from_config(config)

    def glm5_next():
        config = AutoConfig.for_model(
            "glm5_next", text_config=dict(
                vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=4, pad_token_id=0, initializer_range=0.2, max_position_embeddings=4096,
                mlp_layer_types=["dense", "sparse", "dense", "sparse"],
                layer_types=["linear_attention", "indexed_attention", "linear_attention", "indexed_attention"],
                n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16,
                q_lora_rank=16, v_head_dim=16, qk_nope_head_dim=16, index_head_dim=16, index_n_heads=2,
                linear_head_dim=16, linear_num_heads=4),
            vision_config=dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2,
                               patch_size=2, temporal_patch_size=2, spatial_merge_size=2))
        return transformers.AutoModelForImageTextToText.from_config(config)
''')


def _build(name: str):
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own source
    return namespace[name]().eval()


@needs_transformers
def test_a_sliding_window_on_every_layer_bounds_how_far_a_query_reaches():
    import transformers

    assert sliding_reach(_build("mistral_window")) == 8
    mixed = transformers.Gemma2Config(**TINY, sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    assert sliding_reach(transformers.AutoModelForCausalLM.from_config(mixed)) is None
    assert sliding_reach(transformers.AutoModelForCausalLM.from_config(transformers.Qwen2Config(**TINY))) is None


@needs_transformers
def test_no_query_is_far_from_its_keys_where_every_layer_slides(tmp_path):
    """MODEL-6's far query after keys at 0…15 is one a window of 8 never lets a query see: n/a."""
    verdicts = _run(tmp_path, "mistral_window", "-k", "bf16", source=MODELS)
    assert _cells(verdicts, "model_mistral_window")["MODEL-6"] is State.NA
    reason = verdicts["not_applicable"]["MODEL-6"]["model_mistral_window"]
    assert "slides a window of 8" in reason, reason


@needs_transformers
def test_a_model_that_ignores_given_positions_is_judged_with_its_own(tmp_path):
    """A model without positions in any layer (Flint's two full-attention layers): its given
    regime is its own, so decoding, chunks, padding and batches hold on the own regime; packing
    has teeth from the restart its mask reads; a shift has none, and says why."""
    verdicts = _run(tmp_path, "flint_nope", source=MODELS)
    cells = _cells(verdicts, "model_flint_nope")
    assert all(cells[f"MODEL-{k}"] is State.HOLDS for k in (2, 3, 4, 5, 8)), cells
    given = [o for o in _outcomes(verdicts, "MODEL-2") if "given" in o["spec"]]
    assert given and all(o["state"] == State.EXCLUDED.value and "ignores the position ids" in o["message"]
                         for o in given), given
    assert cells["MODEL-1"] is State.UNDECIDED
    [shift] = _outcomes(verdicts, "MODEL-1")
    assert "no layer here reads the rotated q and k" in shift["message"], shift["message"]


@needs_transformers
def test_convolutions_along_the_sequence_are_state_and_another_towers_layers_are_no_texts():
    """Zaya's q/k convolutions carry tokens along (its ``hybrid`` layer types are no evidence);
    GLM-5-Next's vision rotary is no position code of its text, and its linear attention is read
    from its text config."""
    import transformers

    zaya = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
        "zaya", **TINY, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=1, router_hidden_size=16))
    state = attribution.recurrent_layers(zaya)
    assert not state.configured and state.modules and all("(Conv1d)" in m for m in state.modules), state
    glm = _build("glm5_next")
    assert attribution.position_code(glm) == []
    state = attribution.recurrent_layers(glm)
    assert state.configured.startswith("config.text_config.layer_types: linear_attention"), state
    assert not any("visual" in m for m in state.modules), state


@needs_transformers
def test_a_key_selection_downstream_of_recurrent_layers_shares_their_blame(tmp_path):
    """GLM-5-Next's decode differs from its prefixes' passes; holding its linear attention at zero
    clears it, but also changes what its indexer chooses from: the blame names both."""
    verdicts = _run(tmp_path, "glm5_next", "-k", "decoding_matches_each_prefix_with_given", source=MODELS)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.UNEXPECTEDLY_FAILING.value, decode
    assert decode["blame"].startswith("its recurrent layers") and "indexer" in decode["blame"], decode["blame"]


COHERE2 = textwrap.dedent(f'''
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def cohere2():  # rotary on its sliding layers only; its full-attention layers read no positions
        config = transformers.Cohere2Config(**{TINY!r}, sliding_window=8, max_position_embeddings=4096,
                                            layer_types=["sliding_attention", "full_attention"])
        return AutoModelForCausalLM.from_config(config)

    def paligemma():  # the top-level vocab_size is a default no layer uses
        config = transformers.AutoConfig.for_model(
            "paligemma", text_config=dict(**{TINY!r}, model_type="gemma"),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                               patch_size=2, image_size=8))
        return transformers.AutoModelForImageTextToText.from_config(config)
''')


@needs_transformers
def test_a_sliding_layer_sees_only_its_window_of_a_far_query(tmp_path):
    """Cohere 2 rotates on its sliding layers alone: kept inside their window by position, as in
    use, no layer that sees a far query's keys reads a position, so MODEL-6 is n/a; by slot (the
    model's own masks) its sliding layers would read keys 100000 back and fail."""
    import torch

    namespace: dict = {}
    exec(COHERE2, namespace)  # noqa: S102 - the test's own source
    masks = window_masks(namespace["cohere2"](), torch.tensor([0, 1, 100]), torch.tensor([0, 1, 100]))
    assert set(masks) == {"sliding_attention", "full_attention"}
    assert masks["full_attention"][0, 0, 2].tolist() == [True, True, True]
    assert masks["sliding_attention"][0, 0, 2].tolist() == [False, False, True]
    verdicts = _run(tmp_path, "cohere2", "-k", "bf16", source=COHERE2)
    reason = verdicts["not_applicable"]["MODEL-6"]["model_cohere2"]
    assert "the layers that see that far (full_attention) read no positions" in reason, reason


@needs_transformers
def test_text_that_attends_both_ways_by_its_config_is_read_as_that_design(tmp_path):
    """PaliGemma's text attends both ways (``use_bidirectional_attention``, set by its config): a
    continuation cannot equal a fresh pass there (MODEL-2, MODEL-3 n/a, saying so); packed, its mask
    is causal, and document 0, at the same positions and with nothing before it, differs: the mask's
    doing, not the positions'."""
    verdicts = _run(tmp_path, "paligemma", "-k", "decoding_matches_each_prefix_with_given or "
                                                "packed_documents_match_each_document_alone_with_given",
                    source=COHERE2)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.EXCLUDED.value and "use_bidirectional_attention=True" in decode["message"]
    [packed] = _outcomes(verdicts, "MODEL-8")
    assert packed["state"] == State.UNEXPECTEDLY_FAILING.value, packed
    assert packed["blame"] == "the model's attention mask, not its positions", packed


CHAMELEON = textwrap.dedent(f'''
    import transformers

    transformers.logging.set_verbosity_error()

    def chameleon():  # its image tokens' logits are float32's lowest value: forbidden, a mask
        config = transformers.AutoConfig.for_model(
            "chameleon", **{TINY!r}, max_position_embeddings=64,
            vq_config=dict(embed_dim=16, num_embeddings=32, base_channels=32, channel_multiplier=[1, 1],
                           num_res_blocks=1, latent_channels=16, resolution=16),
            vocabulary_map={{"<image>": 3, **{{f"IMGIMG{{chr(65 + i // 10)}}{{chr(65 + i % 10)}}Z": 96 + i
                                               for i in range(32)}}}})
        return transformers.AutoModelForImageTextToText.from_config(config)
''')


@needs_transformers
def test_logits_a_model_forbids_are_a_mask_not_the_scale_of_its_tolerance(tmp_path):
    """Chameleon sets its image tokens' logits to float32's lowest value: taken as the logits'
    scale, every tolerance was 1e31 and every relation undecided for want of teeth."""
    verdicts = _run(tmp_path, "chameleon", "-k", "decoding_matches_each_prefix_with_given", source=CHAMELEON)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.HOLDS.value, decode


OMNI = textwrap.dedent(f'''
    import transformers

    transformers.logging.set_verbosity_error()

    def omni_thinker(**tokens):  # its config class defines no vision_start_token_id, which its M-RoPE index reads
        text = dict(**{TINY!r}, max_position_embeddings=4096, model_type="qwen2_5_omni_text",
                    rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[2, 3, 3]))
        vision = dict(depth=1, embed_dim=32, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2,
                      patch_size=2, temporal_patch_size=2, spatial_merge_size=2)
        audio = dict(num_mel_bins=128, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, d_model=32,
                     output_dim=64)
        config = transformers.AutoConfig.for_model("qwen2_5_omni_thinker", text_config=text, vision_config=vision,
                                                   audio_config=audio, **tokens)
        return transformers.AutoModelForImageTextToText.from_config(config)

    def omni_thinker_with_tokens():  # its own ids for a step with a mask span the whole mask
        return omni_thinker(vision_start_token_id=151652)
''')


@needs_transformers
def test_an_error_raised_where_positions_are_made_is_the_positions(tmp_path):
    """Qwen2.5-Omni's thinker makes its own M-RoPE ids in ``get_rope_index``, which reads a token id
    its config class never defines: the error persists with the rotary made the identity, but it
    is raised where positions are made, so the positions are blamed, never "not positional"."""
    verdicts = _run(tmp_path, "omni_thinker", "-k", "decoding_matches_each_prefix_with_own", source=OMNI)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.UNEXPECTEDLY_FAILING.value and not decode["blame"], decode
    assert "vision_start_token_id" in decode["message"], decode


@needs_transformers
def test_positions_of_another_length_than_the_tokens_are_the_positions_wherever_it_raises(tmp_path):
    """With its token ids set, Qwen2.5-Omni's own M-RoPE ids for a decode step with a mask span the
    whole mask (9 ids for 1 token): the rotary takes them, a projection raises; the positions'."""
    verdicts = _run(tmp_path, "omni_thinker_with_tokens", "-k", "decoding_matches_each_prefix_with_own", source=OMNI)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.UNEXPECTEDLY_FAILING.value and not decode["blame"], decode
    assert "was handed position ids of shape" in decode["message"] or "positions'" in decode["message"], decode


@needs_transformers
def test_a_window_that_keeps_its_prefill_keys_does_not_stop_a_far_query():
    """Unlimited-OCR's ``reference_sliding_attention`` keeps every prompt key and slides over the
    decoded ones: a query far from the prompt sees it (MODEL-6 is judged, not n/a)."""
    import transformers

    text = dict(**TINY, max_position_embeddings=4096, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                moe_intermediate_size=32, model_type="unlimited_ocr_text")
    vision = dict(sam_config=dict(hidden_size=32, output_channels=32, num_hidden_layers=1, num_attention_heads=2,
                                  image_size=32, patch_size=4, mlp_dim=64, window_size=4, global_attn_indexes=[0],
                                  downsample_channels=[32, 32]),
                  encoder_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                      image_size=32, patch_size=16))
    config = transformers.AutoConfig.for_model("unlimited_ocr", text_config=text, vision_config=vision)
    model = transformers.AutoModelForImageTextToText.from_config(config)
    assert set(config.text_config.layer_types) == {"reference_sliding_attention"}
    assert sliding_reach(model) is None and wide_layers(model) is None


@needs_transformers
def test_a_parents_word_for_its_layer_does_not_make_attention_or_experts_recurrent():
    """NemotronH calls every block's layer ``mixer``: only its Mamba-2 mixer keeps a state; its
    attention, experts and MLP are held at zero by no blame probe."""
    import transformers

    config = transformers.AutoConfig.for_model(
        "nemotron_h", **{**TINY, "num_hidden_layers": 4}, layers_block_type=["linear_attention", "moe",
                                                                              "full_attention", "mlp"],
        ssm_state_size=16, mamba_num_heads=4, mamba_head_dim=16, n_groups=1, chunk_size=16, n_routed_experts=4,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, use_mamba_kernels=False)
    model = transformers.AutoModelForCausalLM.from_config(config)
    [layer] = attribution.recurrent_layers(model).modules
    assert layer.endswith("layers.0.mixer (NemotronHMamba2Mixer)"), layer


def test_a_models_name_is_split_from_its_task_before_its_layers_are_read():
    """``CohereCompassForConditionalGeneration``'s MLP, ``CohereCompassMLP``, reads ``ssM`` across its
    prefix and its own name: with the prefix split off at ``For…``, it is an MLP and keeps no state."""
    from torch import nn

    mlp = type("CohereCompassMLP", (nn.Module,), {})
    mixer = type("CohereCompassMambaMixer", (nn.Module,), {})
    for task in ("ForConditionalGeneration", "ForCausalLM", "WithLMHeadModel", "ForVisionText2Text"):
        model = type(f"CohereCompass{task}", (nn.Module,), {})()
        model.mlp, model.mixer = mlp(), mixer()
        assert attribution.recurrent_layers(model).modules == ("mixer (CohereCompassMambaMixer)",), task


def test_every_key_kept_raises_a_selectors_budget_past_any_sequence():
    """The probe that tells a choice of keys from the positions: an indexer's ``index_topk``
    raised, so what it chooses no longer matters; a module without a budget is left alone."""
    import torch

    class Indexer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.index_topk, self.top_k_scale = 2048, 3

    model = torch.nn.Sequential(Indexer(), Indexer())
    assert attribution.keep_every_key(model, ["0"]) == ["0.index_topk=2048"]
    assert model[0].index_topk > 10**9 and model[0].top_k_scale == 3 and model[1].index_topk == 2048


GRANITE4_VISION = textwrap.dedent(f'''
    import transformers

    transformers.logging.set_verbosity_error()

    def granite4_vision():  # fills the cache it is handed, but makes and returns none of its own
        text = dict(**{TINY!r}, max_position_embeddings=4096, model_type="granite4_vision_text")
        vision = dict(hidden_size=64, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1, patch_size=2,
                      image_size=8, model_type="clip_vision_model")
        config = transformers.AutoConfig.for_model(
            "granite4_vision", text_config=text, vision_config=vision, downsample_rate="1/2",
            deepstack_layer_map=[[-1, 0]], spatial_vision_layer=-1, spatial_target_layers=[1, 1, 1, 1],
            image_seq_length=4, qformer_config=dict(num_hidden_layers=1, intermediate_size=64,
                                                    cross_attention_frequency=1, max_position_embeddings=64,
                                                    use_qformer_text_input=False))
        return transformers.AutoModelForImageTextToText.from_config(config)
''')


@needs_transformers
def test_a_model_that_fills_a_cache_it_never_returns_is_continued_and_its_bare_call_fails(tmp_path):
    """Granite 4 Vision keeps its keys in a cache handed to it and counts its positions from its
    length, but returns none to a bare call: chunks with its own positions are judged (they hold);
    a bare decode cannot continue, a defect of the model that is not positional."""
    verdicts = _run(tmp_path, "granite4_vision", "-k", "decoding_matches_each_prefix_with_own or "
                                                      "chunked_prefill_matches_each_prefix_with_own",
                    source=GRANITE4_VISION)
    [decode], [chunks] = _outcomes(verdicts, "MODEL-2"), _outcomes(verdicts, "MODEL-3")
    assert chunks["state"] == State.HOLDS.value, chunks
    assert decode["state"] == State.UNEXPECTEDLY_FAILING.value and "returns no cache" in decode["message"], decode
    assert decode["blame"] == "the model, not its positions", decode


@needs_transformers
def test_rope_scaling_in_a_text_config_is_the_models_design():
    """A vision-language model's rope scaling lives in its text config (Janus's, Mistral Large 3's
    YaRN): dynamic NTK there rescales past the maximum, a design MODEL-7 declares, as on a plain LM."""
    import transformers

    from posenc.harness.whole_models.models import traits_of, transformers_designs

    text = dict(**TINY, max_position_embeddings=64, model_type="llama",
                rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0))
    vision = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1, patch_size=2,
                  image_size=8, model_type="clip_vision_model")
    model = transformers.AutoModelForImageTextToText.from_config(
        transformers.AutoConfig.for_model("llava", text_config=text, vision_config=vision))
    traits = traits_of(model)
    assert traits.rescales_at == 64
    assert "MODEL-7" in transformers_designs(model, traits)


@needs_transformers
def test_layers_and_position_code_outside_the_text_part_are_another_towers():
    """Granite Speech's encoder sits at ``model.encoder`` (its convolutions are no state of the
    text); Music Flamingo's audio rotary at ``model.pos_emb``, and its top-level maximum and rope
    parameters are its audio's: the text part (``language_model``) and its config decide."""
    import transformers

    from posenc.harness.whole_models.models import traits_of

    text = dict(**TINY, max_position_embeddings=4096)
    small = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, d_model=32,
                 encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, num_key_value_heads=2)
    speech = transformers.GraniteSpeechForConditionalGeneration(transformers.AutoConfig.for_model(
        "granite_speech", text_config=dict(text, model_type="granite"), encoder_config=small,
        projector_config=small))
    assert any(n.startswith("model.encoder.") for n, m in speech.named_modules()
               if isinstance(m, torch.nn.Conv1d) and m.kernel_size[0] > 1)
    assert not attribution.recurrent_layers(speech)
    music = transformers.MusicFlamingoForConditionalGeneration(transformers.AutoConfig.for_model(
        "musicflamingo", text_config=dict(text, model_type="qwen2"),
        audio_config=dict(small, model_type="audioflamingo3_encoder")))
    assert music.config.max_position_embeddings != 4096
    assert traits_of(music).max_position == 4096
    assert attribution.position_code(music) == ["model.language_model.rotary_emb (Qwen2RotaryEmbedding)"]


def _llama_like(**config):
    """A tiny Llama, its class changed by ``config``'s test (a forward of ``**kwargs``, an idle tower)."""
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.LlamaConfig(**TINY, max_position_embeddings=64, **config)


@needs_transformers
def test_what_a_forward_passes_on_by_kwargs_and_a_tower_that_never_runs_are_read_from_calls():
    """VibeVoice passes its mask on by ``**kwargs`` (MODEL-4 is judged); Kyutai's ``codec_model``
    never runs on text (its convolutions are no state, its rotary no text position code); BLIP-2
    cannot be called with ids alone, which says nothing of what it takes (its contract blocks)."""
    import transformers

    from posenc.harness.whole_models.models import traits_of

    class PassesOn(transformers.LlamaForCausalLM):
        def forward(self, input_ids=None, **kwargs):
            return super().forward(input_ids=input_ids, **kwargs)

    class WithCodec(transformers.LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.codec_model = torch.nn.ModuleDict(dict(conv=torch.nn.Conv1d(4, 4, 3),
                                                        rotary_emb=transformers.models.llama.modeling_llama
                                                        .LlamaRotaryEmbedding(config)))

    class NeedsPixels(transformers.LlamaForCausalLM):
        def forward(self, input_ids, pixel_values, **kwargs):
            return super().forward(input_ids=input_ids, **kwargs)

    assert traits_of(PassesOn(_llama_like())).takes_attention_mask
    codec = WithCodec(_llama_like())
    assert not attribution.recurrent_layers(codec)
    assert attribution.position_code(codec) == ["model.rotary_emb (LlamaRotaryEmbedding)"]
    assert traits_of(NeedsPixels(_llama_like())).takes_position_ids


@needs_transformers
def test_a_window_the_config_declares_and_the_mask_never_applies_is_no_window():
    """Kyutai declares a sliding window its mask never applies: the first attention layer's last
    output reads the first token; MODEL-6 is judged. A window applied (Mistral's) still bounds it."""
    import transformers

    declared = transformers.LlamaForCausalLM(_llama_like(sliding_window=8))
    applied = transformers.MistralForCausalLM(transformers.MistralConfig(**TINY, sliding_window=8))
    assert declared.config.sliding_window == 8 and sliding_reach(declared) is None
    assert sliding_reach(applied) == 8


@needs_transformers
def test_a_generate_that_needs_another_package_is_no_way_of_the_models_own():
    """VibeVoice's generate needs diffusers: its own positions are judged through forward calls."""
    import transformers

    from posenc.harness.whole_models.models import HFCausalLM, NotInConvention, traits_of

    class SpeechGenerator(transformers.LlamaForCausalLM):
        def generate(self, *args, **kwargs):
            raise ImportError("this generator requires the diffusers library")

    model = SpeechGenerator(_llama_like()).eval()
    ids = torch.arange(3, 9)[None]
    with pytest.raises(NotInConvention, match="diffusers"):
        HFCausalLM(model, traits_of(model)).generate(ids, torch.ones_like(ids), 4)


SEQ2SEQ = textwrap.dedent('''
    import torch
    import transformers
    from torch import nn
    from transformers.models.t5 import modeling_t5

    transformers.logging.set_verbosity_error()
    T5 = dict(vocab_size=128, d_model=64, d_ff=128, d_kv=16, num_layers=2, num_decoder_layers=2, num_heads=4,
              pad_token_id=0, initializer_factor=1.0)

    def t5():  # an encoder-decoder, as a user tries it
        return transformers.AutoModelForSeq2SeqLM.from_config(transformers.T5Config(**T5))

    class T5Decoder(nn.Module):  # the decoder judged as a causal LM, under a fixed source
        vocab_size = 128

        def __init__(self, noisy_steps=False):
            super().__init__()
            torch.manual_seed(0)
            self.model, self.noisy_steps = transformers.T5ForConditionalGeneration(transformers.T5Config(**T5)), noisy_steps

        def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
            source = torch.tensor([[17, 42, 99, 1]], device=input_ids.device).expand(input_ids.shape[0], 4)
            out = self.model(input_ids=source, decoder_input_ids=input_ids, decoder_attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True)
            logits = out.logits + (0.5 if self.noisy_steps and cache is not None else 0.0)  # not positional
            return logits, out.past_key_values

    MODEL_TRAITS = {"takes_position_ids": False, "positions": "relative"}

    def noisy_steps():
        return T5Decoder(noisy_steps=True)
''')


@needs_transformers
def test_an_encoder_decoder_is_blocked_saying_so(tmp_path):
    """T5 needs decoder_input_ids: its contract blocks every relation, naming the encoder-decoder,
    not the error its decoder raises about input_ids."""
    verdicts = _run(tmp_path, "t5", "-k", "answers_logits_of_its_shape or decoding_matches_each_prefix_with_given",
                    source=SEQ2SEQ)
    [contract] = _outcomes(verdicts, "contract")
    assert "encoder-decoder" in contract["message"] and "decoder_input_ids" in contract["message"], contract
    assert _cells(verdicts, "model_t5")["MODEL-2"] == State.BLOCKED


@needs_transformers
def test_a_model_without_position_ids_is_blamed_with_its_position_code_zeroed(tmp_path):
    """T5's decoder takes no position ids (its relative buckets count its cache): no moved id can
    show its bias neutral, but a zeroed bias is; a decode step shifted by something that is no
    position persists without it, and is not positional."""
    verdicts = _run(tmp_path, "noisy_steps", "-k", "decoding_matches_each_prefix_with_own", source=SEQ2SEQ)
    [decode] = _outcomes(verdicts, "MODEL-2")
    assert decode["state"] == State.UNEXPECTEDLY_FAILING.value, decode
    assert decode["blame"] == "the model, not its positions", decode


@needs_transformers
def test_the_vocabulary_is_the_one_the_model_answers_over():
    from posenc.harness.whole_models.models import traits_of

    namespace: dict = {}
    exec(COHERE2, namespace)  # noqa: S102 - the test's own source
    model = namespace["paligemma"]()
    assert model.config.vocab_size != 128 and traits_of(model).vocab_size == 128


@needs_transformers
def test_logits_wider_than_the_vocabulary_are_the_models_width_not_a_broken_contract():
    """Inkling 2's head answers over its ``unpadded_vocab_size``, which need not be its
    ``vocab_size``: ids are drawn from the embedding's rows, logits checked at the head's width."""
    import transformers

    from posenc.harness.whole_models.models import traits_of

    config = transformers.AutoConfig.for_model(
        "inkling2_text", vocab_size=128, unpadded_vocab_size=200, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
        swa_num_key_value_heads=2, swa_head_dim=16, moe_intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, layer_types=["hybrid_sliding", "hybrid"], n_layers_per_attn_res_block=1)
    traits = traits_of(transformers.AutoModelForCausalLM.from_config(config))
    assert (traits.vocab_size, traits.logits_width) == (128, 200)


WIDE = textwrap.dedent(f'''
    import transformers
    from transformers import AutoModelForCausalLM

    def llama_wide():  # logits wider than the columns judged
        tiny = {{**{TINY!r}, "vocab_size": 9000}}
        config = transformers.LlamaConfig(**tiny, max_position_embeddings=32, pad_token_id=0)
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_logits_wider_than_the_judged_columns_keep_the_contract_whole_and_the_relations_their_teeth(tmp_path):
    """A vocabulary of 200000 over a 4096-row pass is 6.5 GB in float64: the relations judge columns
    spread across the logits (their teeth too), the contract the whole width."""
    from specs.test_models import JUDGED_COLUMNS

    assert JUDGED_COLUMNS < 9000
    verdicts = _run(tmp_path, "llama_wide", "-k", "answers_logits_of_its_shape or decoding_matches_each_prefix",
                    source=WIDE)
    cells = _cells(verdicts, "model_llama_wide")
    assert (cells["contract"], cells["MODEL-2"]) == (State.HOLDS, State.HOLDS), verdicts["outcomes"]


QWEN35 = textwrap.dedent('''
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    def qwen35():  # a linear-attention layer, then full attention rotating a quarter of its dims
        config = AutoConfig.for_model("qwen3_5_text", vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, initializer_range=0.2, max_position_embeddings=4096,
                                      pad_token_id=0, layer_types=["linear_attention", "full_attention"])
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_a_decode_across_the_maximum_without_teeth_there_is_judged_from_a_short_prefill_too(tmp_path):
    """MiniCPM-V's text model (Qwen3.5's): across its maximum, after a prefill of 4092, a position one
    off moves the last logits by about the tolerance that reach allows; decoding and chunks from a
    prefill of 4 have teeth, and decide the cells (which read undecided, blaming a clamped table)."""
    verdicts = _run(tmp_path, "qwen35", "-k", "decoding_matches_each_prefix_with_given or "
                                            "chunked_prefill_matches_each_prefix_with_given", source=QWEN35)
    outcomes = _outcomes(verdicts, "MODEL-2") + _outcomes(verdicts, "MODEL-3")
    assert len(outcomes) == 2 and all(o["state"] == State.HOLDS.value for o in outcomes), outcomes


INKLING2 = textwrap.dedent('''
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def inkling2():  # a relative bias by cache slot, which no probe reaches, and no rotary
        config = AutoConfig.for_model(
            "inkling2_text", vocab_size=256, unpadded_vocab_size=256, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
            swa_num_key_value_heads=2, swa_head_dim=16, moe_intermediate_size=32, n_routed_experts=4,
            num_experts_per_tok=2, layer_types=["hybrid_sliding", "hybrid"], n_layers_per_attn_res_block=1,
            initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_an_undecided_shift_names_position_code_the_probe_does_not_reach(tmp_path):
    verdicts = _run(tmp_path, "inkling2", "-k", "shifting", source=INKLING2)
    [shift] = _outcomes(verdicts, "MODEL-1")
    assert shift["state"] == State.UNDECIDED.value and "relative_position_bias" in shift["message"], shift


NO_GENERATE = textwrap.dedent('''
    import torch
    import transformers

    def build():  # a text decoder with its LM head and no GenerationMixin
        torch.manual_seed(0)
        config = transformers.Pix2StructTextConfig(vocab_size=128, hidden_size=64, d_kv=16, d_ff=128, num_layers=2,
                                                   num_heads=4, initializer_range=0.2, pad_token_id=0)
        return transformers.Pix2StructTextModel(config).eval()
''')


@needs_transformers
def test_a_model_without_generate_is_judged_through_its_forward_calls(tmp_path):
    """Pix2Struct's text model has no ``generate``: its own positions are the bare and forward calls'
    (it holds), never an AttributeError labelled not positional."""
    assert not hasattr(__import__("transformers").Pix2StructTextModel, "generate")
    verdicts = _run(tmp_path, "build", "-k", "decoding_matches_each_prefix_with_own", source=NO_GENERATE)
    assert _cells(verdicts, "model_build")["MODEL-2"] in (State.HOLDS, State.HOLDS_PARTIAL), _outcomes(verdicts, "MODEL-2")


@needs_transformers
def test_an_encoder_decoder_says_what_ids_alone_do_and_its_decoder_is_none():
    """BART given ids alone shifts them into its decoder's ids and answers logits; T5 raises: the
    reason says which, with the inputs its forward takes. BART's decoder taken out of it shares the
    flag, not the encoder: it is no encoder-decoder, and it answers no logits, saying so."""
    import transformers

    from posenc.harness.references.contract import encoder_decoder as in_adapter
    from posenc.harness.whole_models.models import _logits

    def encoder_decoder(model, *ids):  # as the contract asks it: of the model in its adapter
        return in_adapter(types.SimpleNamespace(model=model), *ids)

    ids = torch.randint(3, 100, (2, 8))
    bart = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)).eval()
    assert "answers logits (2, 8, 128)" in encoder_decoder(bart, ids) and "takes input_ids" in encoder_decoder(bart)
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=128, d_model=32, d_ff=32, d_kv=8, num_layers=1, num_heads=2)).eval()
    assert "raises ValueError" in encoder_decoder(t5, ids) and "decoder_input_ids" in encoder_decoder(t5, ids)
    decoder = bart.get_decoder()
    assert decoder.config.is_encoder_decoder and encoder_decoder(decoder, ids) is None
    with pytest.raises(TypeError, match="answers no logits .*last_hidden_state \\(2, 8, 32\\)"):
        _logits(decoder(input_ids=ids))


@needs_transformers
def test_a_generate_that_makes_audio_is_no_way_of_the_models_own_but_one_that_fails_inside_is():
    """A speech model's ``generate`` refuses a text prompt before any forward (Pocket TTS: it must end
    with its audio token) or answers frames of codes (CSM's ``(batch, frames, codes)``): not the
    model's way to continue text, so its other own paths decide. One that raises after a forward ran,
    or inside position code, still raises."""
    from posenc.harness.whole_models.models import HFCausalLM, NotInConvention

    class Speech(torch.nn.Module):
        def __init__(self, answer):
            super().__init__()
            self.answer = answer

        def forward(self, input_ids):
            return input_ids

        def generate(self, input_ids, **options):
            return self.answer(self, input_ids)

    def refuses(model, ids):
        raise ValueError("the prompt must end with audio_bos_token_id")

    def frames(model, ids):
        return types.SimpleNamespace(sequences=torch.zeros(2, 3, 4, dtype=torch.long))

    def fails_after_a_forward(model, ids):
        model(ids)
        raise ValueError("a step broke")

    ids, mask = torch.ones(2, 6, dtype=torch.long), torch.ones(2, 6, dtype=torch.long)
    for answer, expected in ((refuses, "refuses a prompt of text tokens"), (frames, r"sequences \(2, 3, 4\)")):
        with pytest.raises(NotInConvention, match=expected):
            HFCausalLM.generate(types.SimpleNamespace(model=Speech(answer)), ids, mask, 4)
    with pytest.raises(ValueError, match="a step broke"):
        HFCausalLM.generate(types.SimpleNamespace(model=Speech(fails_after_a_forward)), ids, mask, 4)


ONE_COLUMN = textwrap.dedent('''
    import torch
    import transformers

    def build():  # a speech backbone whose logits are its one end-of-speech column
        torch.manual_seed(0)
        config = transformers.GradiumPhononTTSConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, initializer_range=0.2, pad_token_id=0,
            flow_head_config=dict(hidden_size=32, num_hidden_layers=1, condition_dim=64, frequency_embedding_size=32,
                                  initializer_range=0.2))
        return transformers.GradiumPhononTTSForConditionalGeneration(config).eval()

    MODEL_TRAITS = {"logits_width": 1}
''')


@needs_transformers
def test_a_one_column_head_sizes_bf16_noise_near_the_keys_from_more_queries(tmp_path):
    """Gradium's logits are one column: three queries near the keys under autocast put its bf16 noise
    at 0.006 and a far query's 0.026 past four times it, though autocast keeps the angles in float32.
    With enough near queries only the cast, whose inv_freq is rounded, loses the rotation."""
    verdicts = _run(tmp_path, "build", "-k", "bf16_keeps_position", source=ONE_COLUMN)
    [outcome] = _outcomes(verdicts, "MODEL-6")
    assert outcome["state"] == State.UNEXPECTEDLY_FAILING.value and "model.to(torch.bfloat16)" in outcome["message"]
    assert "autocast" not in outcome["message"], outcome["message"]


ROUTED = textwrap.dedent('''
    import torch
    import transformers

    def build():  # experts routed by top-2, one sliding layer of three
        torch.manual_seed(0)
        config = transformers.Qwen2MoeConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.2, pad_token_id=0,
            use_sliding_window=True, sliding_window=8, max_window_layers=1, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=64, shared_expert_intermediate_size=64)
        return transformers.Qwen2MoeForCausalLM(config).eval()
''')


@needs_transformers
def test_routers_flipped_by_a_rounded_rotation_are_the_rotations_loss(tmp_path):
    """Under ``model.to(bf16)`` a far query's routers flip: replayed from the fp32 model, the loss goes,
    but it goes too with the rotation's ``inv_freq`` put back in fp32 and the routers left free. The
    rounded rotation flipped them: a positional FAIL, never "a choice flipped"."""
    verdicts = _run(tmp_path, "build", "-k", "bf16_keeps_position", source=ROUTED)
    [outcome] = _outcomes(verdicts, "MODEL-6")
    assert outcome["state"] == State.UNEXPECTEDLY_FAILING.value, outcome
    assert "lost precision under model.to(torch.bfloat16)" in outcome["message"], outcome["message"]
    assert "not positional" not in outcome["message"] and not outcome.get("blame"), outcome


@needs_transformers
def test_alibi_counted_from_the_mask_reads_no_position_ids_yet_packs_by_them():
    """Falcon with ``alibi=True`` names ``position_ids`` and never reads them (its ALiBi counts the
    mask): MODEL-1 and MODEL-6, which move ids, are n/a saying so, and MODEL-7 runs a sequence past the
    maximum. Its mask still tells packed documents by restarting ids. Falcon with RoPE reads them."""
    import transformers

    from posenc.harness.catalogue.declarations import model_claims_for
    from posenc.harness.catalogue.states import State as S
    from posenc.harness.whole_models.models import traits_of

    def falcon(alibi):
        torch.manual_seed(0)
        return transformers.FalconForCausalLM(transformers.FalconConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, alibi=alibi,
            new_decoder_architecture=False, multi_query=True, max_position_embeddings=4096)).eval()

    traits = traits_of(falcon(True))
    assert (traits.positions, traits.takes_position_ids, traits.packing) == ("alibi", False, "positions")
    claims = model_claims_for(traits)
    assert claims["MODEL-1"].status == S.NA and "ALiBi" in claims["MODEL-1"].reason
    assert traits_of(falcon(False)).takes_position_ids


@needs_transformers
def test_rope_scaling_on_one_layer_type_is_read_whatever_the_order_of_types():
    """Olmo 3 lists its sliding layers' default rope first and its full layers' dynamic NTK second:
    the design read is the one that scales, with its threshold, not the first type's."""
    import transformers

    from posenc.harness.whole_models.models import _rope, traits_of

    config = transformers.Olmo3Config(**{**TINY, "sliding_window": 8, "layer_types": ["sliding_attention",
                                                                                      "full_attention"]},
                                      rope_parameters={"sliding_attention": {"rope_type": "default"},
                                                       "full_attention": {"rope_type": "dynamic", "factor": 2.0}})
    model = transformers.Olmo3ForCausalLM(config).eval()
    assert _rope(model.config)["rope_type"] == "dynamic"
    assert traits_of(model).rescales_at == config.max_position_embeddings


FALCON_ALIBI = textwrap.dedent('''
    import torch
    import transformers

    def build():
        torch.manual_seed(0)
        return transformers.FalconForCausalLM(transformers.FalconConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, alibi=True,
            new_decoder_architecture=False, multi_query=True, max_position_embeddings=4096, initializer_range=0.2)).eval()
''')


@needs_transformers
def test_alibi_that_reads_ids_for_its_mask_alone_is_judged_on_packed_documents_by_them(tmp_path):
    """Falcon's ALiBi reads no position ids, yet its mask keeps packed documents apart by them: the
    packed relation runs with the restarting ids given and holds, the others never give ids."""
    verdicts = _run(tmp_path, "build", "-k", "packed_documents_match_each_document_alone_with_given",
                    source=FALCON_ALIBI)
    assert _cells(verdicts, "model_build")["MODEL-8"] in (State.HOLDS, State.HOLDS_PARTIAL), verdicts["outcomes"]
