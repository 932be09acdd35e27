"""The defects ``--model`` found on transformers architectures it had never run, each reproduced
here with transformers alone (tiny models from a config, random weights, float32, eager), so that
a finding never rests on the harness (``docs/findings/models.md``, "Architectures run blind").

Each test states the size it measures at and shows the contrast that makes the defect one: the
same call on a model without the defect, or with the defect's component held at zero, agrees.
"""

from __future__ import annotations

import pytest
import torch

from posenc.ecosystem import support

pytestmark = pytest.mark.skipif(not support.available("transformers"),
                                reason=f"transformers is not installed: {support.INSTALL_HINT}")

COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.2)


def _model(config_class: str, **arguments):
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**arguments)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def _ids(length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 128, (1, length), generator=torch.Generator().manual_seed(seed))


def _cache(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


def _zero_outputs(modules) -> None:
    def zero(module, args, output):
        return (torch.zeros_like(output[0]), *output[1:]) if isinstance(output, tuple) else torch.zeros_like(output)

    for module in modules:
        module.register_forward_hook(zero)


def _off(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def test_phimoe_never_applies_its_long_factors():
    """Phi-3.5-MoE (longrope, original length 16, maximum 64): a window of 8 at 40 gives the window
    at 0's logits, as if no long factor were configured; Phi-3 with the same rope parameters turns
    it otherwise (its long factors apply past 16). ``PhimoeRotaryEmbedding`` recomputes its
    frequencies from the config at every call, so the factors ``dynamic_rope_update`` stores are
    never read."""
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 16, "factor": 4.0,
            "short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [2.0 + 0.5 * i for i in range(8)]}
    phimoe = _model("PhimoeConfig", **COMMON, max_position_embeddings=64, num_local_experts=4,
                    num_experts_per_tok=2, router_jitter_noise=0.0,
                    rope_parameters={**rope, "short_mscale": 1.0, "long_mscale": 1.0})
    phi3 = _model("Phi3Config", **COMMON, max_position_embeddings=64, original_max_position_embeddings=16,
                  rope_parameters=rope)
    ids = _ids(8)
    with torch.no_grad():
        moved = {name: _off(m(ids, position_ids=torch.arange(8)[None]).logits,
                            m(ids, position_ids=torch.arange(40, 48)[None]).logits)
                 for name, m in (("phimoe", phimoe), ("phi3", phi3))}
    assert moved["phimoe"] < 1e-3 < 0.1 < moved["phi3"], moved


def test_jamba_restarts_its_mamba_state_on_a_chunked_continuation():
    """Jamba (a Mamba layer, then attention): a chunk of 5 tokens continuing a cache of 7 differs
    from the full pass; with the Mamba mixers' output held at zero it matches. A multi-token
    continuation runs the Mamba scan from a zero state."""
    model = _model("JambaConfig", **COMMON, max_position_embeddings=4096, attn_layer_period=2, attn_layer_offset=1,
                   expert_layer_period=2, expert_layer_offset=1, num_experts=4, num_experts_per_tok=2,
                   mamba_d_state=16, mamba_d_conv=4, mamba_expand=2)
    ids = _ids(12, 1)

    def chunked_off():
        with torch.no_grad():
            full = model(ids).logits[:, 7:]
            cache = _cache(model(ids[:, :7], use_cache=True))
            return _off(model(ids[:, 7:], cache=cache, use_cache=True).logits, full)

    defect = chunked_off()
    _zero_outputs(m for n, m in model.named_modules() if type(m).__name__ == "JambaMambaMixer")
    assert chunked_off() < 1e-4 < 0.1 < defect, defect


def test_zamba2_decodes_otherwise_than_its_prefill():
    """Zamba2 (a Mamba-2 layer, then a hybrid layer with a shared attention block): decoding one
    token a call after a prefill of 4, positions given, drifts from the full pass, by more than
    5e-3 within 36 steps (float32 noise is 1e-6 here); with the Mamba-2 mixers' output held at
    zero it matches. The mixer's one-token update is not its prefill scan (``dt`` is clamped in
    the scan only)."""
    model = _model("Zamba2Config", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, attention_head_dim=16, mamba_d_state=16, mamba_headdim=16,
                   mamba_ngroups=1, n_mamba_heads=8, layers_block_type=["mamba", "hybrid"], hybrid_layer_ids=[1],
                   max_position_embeddings=4096, use_mem_rope=True, pad_token_id=0, initializer_range=0.2,
                   chunk_size=16, num_mem_blocks=1, adapter_rank=8)
    ids = _ids(40, 1)

    def decode_off():
        with torch.no_grad():
            full, worst = model(ids).logits, 0.0
            cache = _cache(model(ids[:, :4], use_cache=True))
            for j in range(4, 40):
                step = model(ids[:, j : j + 1], cache=cache, position_ids=torch.tensor([[j]]), use_cache=True)
                cache, worst = _cache(step), max(worst, _off(step.logits[:, -1], full[:, j]))
            return worst

    defect = decode_off()
    _zero_outputs(m for n, m in model.named_modules() if type(m).__name__ == "Zamba2MambaMixer")
    assert decode_off() < 1e-4 < 5e-3 < defect, defect


def test_recurrentgemma_carries_its_convolution_across_packed_documents():
    """RecurrentGemma: two documents packed in one row with position ids that restart; the RG-LRU
    restarts at position 0, but the temporal convolution (width 4) reads the previous document's
    last tokens, so the second document differs from itself alone (Google's reference masks the
    convolution at a document start)."""
    model = _model("RecurrentGemmaConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, conv1d_width=4,
                   block_types=["recurrent", "attention"], pad_token_id=0, initializer_range=0.2)
    first, second = _ids(7, 3), _ids(5, 4)
    with torch.no_grad():
        packed = model(torch.cat((first, second), 1), use_cache=False,
                       position_ids=torch.cat((torch.arange(7), torch.arange(5)))[None]).logits
        alone = [model(document, use_cache=False, position_ids=torch.arange(document.shape[1])[None]).logits
                 for document in (first, second)]
    assert _off(packed[:, :7], alone[0]) < 1e-4 < 1e-2 < _off(packed[:, 7:], alone[1])


def _biogpt():
    return _model("BioGptConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=256, initializer_range=0.2, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2)


def _xglm():
    return _model("XGLMConfig", vocab_size=128, d_model=64, num_layers=2, attention_heads=4, ffn_dim=128,
                  max_position_embeddings=256, init_std=0.2, dropout=0.0, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)


@pytest.mark.parametrize("name", ["biogpt", "xglm"])
def test_biogpt_and_xglm_let_packed_documents_attend_each_other(name):
    """BioGPT and XGLM build their causal mask without the position ids (as OPT does): the second
    of two documents packed with restarting ids differs from itself alone."""
    model = _biogpt() if name == "biogpt" else _xglm()
    first, second = _ids(7, 5), _ids(5, 6)
    with torch.no_grad():
        packed = model(torch.cat((first, second), 1), use_cache=False,
                       position_ids=torch.cat((torch.arange(7), torch.arange(5)))[None]).logits[:, 7:]
        alone = model(second, use_cache=False, position_ids=torch.arange(5)[None]).logits
    assert _off(packed, alone) > 0.1


def test_xglm_and_biogpt_read_as_absolute_tables():
    """XGLM's sinusoidal table is no ``nn.Embedding``; ``--model`` reads it as absolute positions
    all the same (a shift then changes every embedding: MODEL-1 n/a, and decodes stay in its table)."""
    from posenc.harness.whole_models.models import traits_of

    assert traits_of(_xglm()).positions == traits_of(_biogpt()).positions == "absolute"


@pytest.mark.parametrize("name", ["opt", "llama"])
def test_opt_lets_packed_documents_attend_each_other(name):
    """OPT: two documents packed with position ids that restart; its mask is built without the
    position ids, so the second document attends to the first and differs from itself alone.
    Llama, the contrast, keeps them apart."""
    if name == "opt":
        model = _model("OPTConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                       max_position_embeddings=4096, num_attention_heads=4, word_embed_proj_dim=64, dropout=0.0,
                       init_std=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    else:
        model = _model("LlamaConfig", **COMMON, max_position_embeddings=4096)
    first, second = _ids(7, 5), _ids(5, 6)
    with torch.no_grad():
        packed = model(torch.cat((first, second), 1), use_cache=False,  # transformers' packed form
                       position_ids=torch.cat((torch.arange(7), torch.arange(5)))[None]).logits[:, 7:]
        alone = model(second, use_cache=False, position_ids=torch.arange(5)[None]).logits
    off = _off(packed, alone)
    assert (off > 0.1) if name == "opt" else (off < 1e-4), off


@pytest.mark.parametrize("name", ["opt", "codegen", "gpt_bigcode", "gpt_neo", "biogpt"])
def test_past_their_tables_opt_codegen_and_gpt_bigcode_raise_errors_that_name_no_limit(name):
    """At their configured maximum (4096; BioGPT's 256 here), a window past it raises an error
    whose message names no limit (GPT-Neo and BioGPT found blind in a second round)."""
    from specs.support import LIMIT_WORDS

    tokens = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = {
        "opt": lambda: _model("OPTConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                              max_position_embeddings=4096, num_attention_heads=4, word_embed_proj_dim=64,
                              dropout=0.0, **tokens),
        "codegen": lambda: _model("CodeGenConfig", vocab_size=128, n_positions=4096, n_ctx=4096, n_embd=64,
                                  n_layer=2, n_head=4, rotary_dim=8, n_inner=128, **tokens),
        "gpt_bigcode": lambda: _model("GPTBigCodeConfig", vocab_size=128, n_positions=4096, n_embd=64, n_layer=2,
                                      n_head=4, n_inner=128, multi_query=True, **tokens),
        "gpt_neo": lambda: _model("GPTNeoConfig", vocab_size=128, hidden_size=64, num_layers=2, num_heads=4,
                                  attention_types=[[["global", "local"], 1]], max_position_embeddings=4096,
                                  intermediate_size=128, **tokens),
        "biogpt": _biogpt,
    }[name]()
    ids = _ids(16, 7)
    past = 4133 if name != "biogpt" else 293
    with pytest.raises(Exception) as raised, torch.no_grad():
        model(ids, position_ids=torch.arange(past, past + 16)[None])
    assert not any(word in str(raised.value).lower() for word in LIMIT_WORDS), str(raised.value)


def test_minimax_decodes_a_bare_step_at_position_0():
    """MiniMax (a linear-attention layer first): ``model(ids)``, then the next id with the cache
    and nothing else, differs from the full pass: its offset is ``cache.get_seq_length()``, which
    reads the linear-attention layer, 0. With its position id given the step matches."""
    import transformers

    model = _model("MiniMaxConfig", **COMMON, max_position_embeddings=32, head_dim=16, num_local_experts=4,
                   num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"], block_size=8)
    ids = _ids(6, 8)
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        bare = model(ids[:, 5:], cache=_cache(model(ids[:, :5], use_cache=True))).logits[:, -1]
        given = model(ids[:, 5:], cache=_cache(model(ids[:, :5], use_cache=True)),
                      position_ids=torch.tensor([[5]])).logits[:, -1]
    assert isinstance(_cache(model(ids, use_cache=True)), transformers.DynamicCache)  # its own subclass
    assert _off(given, full) < 1e-4 < 0.1 < _off(bare, full)


def test_trocr_decodes_past_its_sinusoid_only_in_one_pass():
    """TrOCR's sinusoidal positions (``use_learned_position_embeddings=False``, maximum 64 here)
    grow with a call's own length but not with its cache: one pass of 67 tokens answers, while a
    prefill of 60 then one token a step raises an IndexError at position 64 (naming no limit)."""
    from specs.support import LIMIT_WORDS

    model = _model("TrOCRConfig", vocab_size=128, d_model=64, decoder_layers=2, decoder_attention_heads=4,
                   decoder_ffn_dim=128, max_position_embeddings=64, use_learned_position_embeddings=False,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    ids = _ids(67, 9)
    with torch.no_grad():
        cache = _cache(model(ids[:, :60], use_cache=True))
        with pytest.raises(IndexError) as raised:
            for step in range(60, 67):
                cache = _cache(model(ids[:, step:step + 1], past_key_values=cache, use_cache=True))
        assert model(ids).logits.shape == (1, 67, 128)  # one pass grows the table to its own length
    assert step >= 62 and not any(word in str(raised.value).lower() for word in LIMIT_WORDS), (step, raised.value)


def test_rwkv_steps_two_rows_with_its_state_into_two_tokens_logits():
    """RWKV (2 layers, width 64): after 16 tokens on two rows, one token more with the returned
    ``state`` answers logits for two tokens per row; one row alone answers one, as it should."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.RwkvConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
                                     intermediate_size=128, context_length=64, initializer_range=0.2)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, 128, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        two = model(ids[:, 16:], state=model(ids[:, :16], use_cache=True).state, use_cache=True).logits
        one = model(ids[:1, 16:], state=model(ids[:1, :16], use_cache=True).state, use_cache=True).logits
    assert tuple(two.shape) == (2, 2, 128) and tuple(one.shape) == (1, 1, 128)


def test_blt_cannot_be_called_with_its_default_cache():
    """BLT (a tiny config of its four sub-models): ``model(ids)`` makes a cache from a config that
    has no ``num_hidden_layers`` and raises; with ``use_cache=False`` the same call answers."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    sub = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
           "initializer_range": 0.2}
    config = transformers.AutoConfig.for_model(
        "blt", vocab_size=260, initializer_range=0.2, encoder_hash_byte_group_vocab=512,
        patcher_config={**sub, "vocab_size": 260, "num_hidden_layers": 2, "head_dim": 16},
        encoder_config={**sub, "vocab_size": 260, "num_hidden_layers": 1, "hidden_size_global": 128},
        decoder_config={**sub, "vocab_size": 260, "num_hidden_layers": 2, "hidden_size_global": 128, "head_dim": 16},
        global_config={**sub, "hidden_size": 128, "num_hidden_layers": 2, "head_dim": 32})
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, 200, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert model(ids, use_cache=False).logits.shape == (1, 16, 260)
        with pytest.raises(AttributeError, match="num_hidden_layers"):
            model(ids)


def _vlm(kind: str, text: dict, **others):
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(kind, text_config=text, **others)
    return transformers.AutoModelForImageTextToText.from_config(config).eval()


TEXT = dict(COMMON, vocab_size=256, head_dim=16, max_position_embeddings=4096)


def test_janus_generate_drops_the_logits_processor_it_is_given():
    """Janus's text ``generate`` takes ``logits_processor`` by name and never passes it on: a
    processor forcing each next token is called 0 times; through GenerationMixin, every step."""
    from transformers import LogitsProcessor, LogitsProcessorList
    from transformers.generation.utils import GenerationMixin

    model = _vlm("janus", dict(TEXT, model_type="llama"),
                 vision_config=dict(depth=1, projection_dim=64, mlp_ratio=2.0, hidden_size=32, intermediate_size=64,
                                    num_attention_heads=2, num_hidden_layers=1, patch_size=2, image_size=8),
                 vq_config=dict(embed_dim=8, num_embeddings=32, latent_channels=32, base_channels=32,
                                channel_multiplier=[1, 1], num_res_blocks=1, projection_dim=64,
                                image_token_embed_dim=64, num_hidden_layers=1))

    class Counted(LogitsProcessor):
        calls = 0

        def __call__(self, ids, scores):
            Counted.calls += 1
            return scores

    ids = _ids(4)
    options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3, do_sample=False,
                   pad_token_id=0, eos_token_id=None, logits_processor=LogitsProcessorList([Counted()]))
    model.generate(ids, **options)
    assert Counted.calls == 0
    GenerationMixin.generate(model, ids, **options)
    assert Counted.calls == 3


def test_granite4_vision_returns_no_cache_to_a_bare_call():
    """Granite 4 Vision fills a cache it is handed, but makes none: ``model(ids, use_cache=True)``
    returns no cache, so a bare next step starts over (7 from a fresh pass here), while the same
    step with the cache handed in matches it."""
    model = _vlm("granite4_vision", dict(TEXT, model_type="granite4_vision_text"),
                 vision_config=dict(hidden_size=64, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1,
                                    patch_size=2, image_size=8, model_type="clip_vision_model"),
                 downsample_rate="1/2", deepstack_layer_map=[[-1, 0]], spatial_vision_layer=-1,
                 spatial_target_layers=[1, 1, 1, 1], image_seq_length=4,
                 qformer_config=dict(num_hidden_layers=1, intermediate_size=64, cross_attention_frequency=1,
                                     max_position_embeddings=64, use_qformer_text_input=False))
    from transformers import DynamicCache

    ids = _ids(9)
    with torch.no_grad():
        fresh = model(input_ids=ids).logits[:, -1]
        out = model(input_ids=ids[:, :8], use_cache=True)
        assert _cache(out) is None
        bare = model(input_ids=ids[:, 8:]).logits[:, -1]
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :8], use_cache=True, past_key_values=cache)
        handed = model(input_ids=ids[:, 8:], past_key_values=cache, use_cache=True).logits[:, -1]
    assert float((bare - fresh).abs().max()) > 1.0
    assert float((handed - fresh).abs().max()) < 1e-4
