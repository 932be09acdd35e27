"""``--model`` on models nobody tuned the harness to: their own cache class or internal state, their
bare calls, their recurrent layers and their config's designs; and the blame of a violation, the
positions or the rest of the model (``specs/test_models.py``, :mod:`posenc.harness.whole_models.attribution`).

The transformers models are built tiny from a config in a file of the test's own, as a user's
would be; each run is a subprocess of ``pytest specs --model FILE:NAME``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from posenc.ecosystem import support
from posenc.harness.catalogue.records import ModelTraits
from posenc.harness.catalogue.states import State
from posenc.harness.whole_models import attribution
from posenc.harness.whole_models.model_plan import CONFIGURED, configured_designs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "my_model.py"
pytestmark = pytest.mark.xdist_group("models_as_they_come")

needs_transformers = pytest.mark.skipif(not support.available("transformers"),
                                        reason=f"transformers is not installed: {support.INSTALL_HINT}")

#: A user's file of tiny transformers models (no download), as the blind runs wrote theirs.
MODELS = textwrap.dedent('''
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2, initializer_range=0.2)

    def minimax():
        config = transformers.MiniMaxConfig(**COMMON, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                            layer_types=["linear_attention", "full_attention"], block_size=8)
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")

    def recurrentgemma():
        config = transformers.RecurrentGemmaConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, lru_width=64, attention_window_size=16, conv1d_width=4,
            block_types=["recurrent", "attention"], head_dim=16, partial_rotary_factor=0.5, pad_token_id=0,
            initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")

    def llama():
        return AutoModelForCausalLM.from_config(transformers.LlamaConfig(**COMMON), attn_implementation="eager")

    def prophetnet():
        config = transformers.ProphetNetConfig(
            vocab_size=128, hidden_size=64, num_decoder_layers=2, num_decoder_attention_heads=4, decoder_ffn_dim=128,
            num_encoder_layers=2, num_encoder_attention_heads=4, encoder_ffn_dim=128, init_std=0.2, is_decoder=True,
            is_encoder_decoder=False, add_cross_attention=False)
        return transformers.ProphetNetForCausalLM(config)

    def xlm():
        config = transformers.AutoConfig.for_model("xlm", vocab_size=128, emb_dim=64, n_layers=2, n_heads=4,
                                                   causal=True, init_std=0.2, embed_init_std=0.2)
        return AutoModelForCausalLM.from_config(config)

    def rwkv():
        config = transformers.RwkvConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
                                         intermediate_size=128, context_length=64, initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config)

    def reformer():
        config = transformers.ReformerConfig(
            vocab_size=128, hidden_size=64, attention_head_size=16, num_attention_heads=4, feed_forward_size=128,
            attn_layers=["local", "lsh"], num_hidden_layers=2, is_decoder=True, axial_pos_embds_dim=[16, 48],
            initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config)

    def llama_far():
        config = transformers.LlamaConfig(**{**COMMON, "max_position_embeddings": 2097152})
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")

    def kosmos2_text():
        from transformers.models.kosmos2.configuration_kosmos2 import Kosmos2TextConfig
        from transformers.models.kosmos2.modeling_kosmos2 import Kosmos2TextForCausalLM

        return Kosmos2TextForCausalLM(Kosmos2TextConfig(vocab_size=128, embed_dim=64, layers=2, ffn_dim=128,
                                                        attention_heads=4, init_std=0.2))

    def xlstm():
        config = transformers.AutoConfig.for_model(
            "xlstm", vocab_size=128, hidden_size=64, embedding_dim=64, num_hidden_layers=2, num_blocks=2,
            num_heads=4, qk_dim_factor=1.0, chunk_size=16, pad_token_id=0, initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config)
''')


def _run(tmp_path: Path, name: str, *options, source: str = MODELS, file: str = "user_models.py") -> dict:
    (tmp_path / file).write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    reports = tmp_path / "reports"
    ran = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "specs" / "test_models.py"), "-q",
                          "-p", "no:cacheprovider", "--model", f"{tmp_path / file}:{name}", "--encoders", "model_*",
                          "--matrix-dir", str(reports), *options], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (reports / "verdicts.json").exists(), ran.stdout[-3000:] + ran.stderr[-3000:]
    return json.loads((reports / "verdicts.json").read_text())


def _cells(verdicts: dict, name: str) -> dict[str, State]:
    return {claim: State(row[name]) for claim, row in verdicts["matrix"].items() if name in row}


def _outcomes(verdicts: dict, claim: str) -> list[dict]:
    return [o for o in verdicts["outcomes"] if o["claim"] == claim]


# ------------------------------------------------------------------ their own cache and state


@needs_transformers
def test_minimax_runs_through_every_relation_with_its_own_cache(tmp_path):
    """MiniMax refuses any cache but its own class: the harness lets it make one. Its bare decode
    step reads its offset from a linear-attention layer's cache length (positional); what fails
    with the positions neutralised is labelled so, never blamed on the encoder."""
    verdicts = _run(tmp_path, "minimax")
    cells = _cells(verdicts, "model_minimax")
    assert cells["contract"] == State.HOLDS, cells
    said = " ".join(o["message"] for o in verdicts["outcomes"])
    assert "compatible with `cache`" not in said and State.BLOCKED not in cells.values(), said[:2000]
    bare = [o for o in _outcomes(verdicts, "MODEL-2") if "through bare forward calls" in o["message"]]
    assert bare and bare[0]["state"] == State.UNEXPECTEDLY_FAILING and bare[0]["blame"] == "", bare
    for o in verdicts["outcomes"]:
        if o["state"] == State.UNEXPECTEDLY_FAILING and o["blame"]:
            assert "not positional" in o["message"] and "neutralised" in o["message"] + json.dumps(o), o


@needs_transformers
def test_recurrentgemma_keeps_its_state_in_its_modules_and_is_judged_by_what_it_returns(tmp_path):
    """RecurrentGemma returns no cache: the harness keeps the one generate would pass. Its chunked
    continuation drops its convolution state (blamed on its recurrent blocks, with the evidence),
    its RG-LRU takes position 0 for a sequence start (MODEL-1, declared from its config), and
    packed documents are n/a (its state runs across them)."""
    verdicts = _run(tmp_path, "recurrentgemma")
    cells = _cells(verdicts, "model_recurrentgemma")
    assert cells["contract"] == State.HOLDS and State.BLOCKED not in cells.values(), cells
    assert cells["MODEL-1"] == State.REFUTED and cells["MODEL-8"] == State.NA, cells
    chunked = [o for o in _outcomes(verdicts, "MODEL-3") if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert chunked and all(o["blame"].startswith("its recurrent layers") for o in chunked), chunked
    own = [o for o in _outcomes(verdicts, "MODEL-3") if o["spec"].endswith("own_positions")]
    assert own and own[0]["state"] == State.EXCLUDED and "only its generate continues" in own[0]["message"], own


# ------------------------------------------------------------------ inputs the model may change


def test_a_model_that_edits_its_inputs_in_place_changes_no_other_call(tmp_path):
    """Every call gets its own copies of ids, mask and positions: a model that zeroes its token ids
    and shifts its positions after use holds what the unchanged model holds."""
    source = EXAMPLE.read_text().replace("        return self.head(x)\n",
                                         "        tokens.zero_()\n        input_pos.add_(1000)\n"
                                         "        return self.head(x)\n")
    assert "tokens.zero_()" in source
    verdicts = _run(tmp_path, "TinyDecoder", source=source, file="my_model.py")
    cells = _cells(verdicts, "model_TinyDecoder")
    assert {c: s for c, s in cells.items() if s not in (State.HOLDS, State.NA)} == {}, verdicts["outcomes"][:3]


# ------------------------------------------------------------------ designs read from the config


def test_llama_4_scaling_beta_is_a_design_where_the_windows_reach_it():
    traits = ModelTraits(max_position=4096, original_max_position=2048)
    rope = {"rope_type": "yarn", "original_max_position_embeddings": 2048, "llama_4_scaling_beta": 0.1}
    found = configured_designs({"rope_parameters": rope}, traits)
    assert set(found) == {"MODEL-7"} and found["MODEL-7"][0].startswith(CONFIGURED), found
    far = {**rope, "original_max_position_embeddings": 16384}
    assert configured_designs({"rope_parameters": far}, ModelTraits(max_position=4096)) == {}
    assert configured_designs({"rope_parameters": {"rope_type": "default"}}, traits) == {}


def test_recurrent_gemma_declares_position_0_a_sequence_start():
    found = configured_designs({"model_type": "recurrent_gemma"}, ModelTraits())
    assert set(found) == {"MODEL-1"} and "position 0" in found["MODEL-1"][0]


@needs_transformers
def test_a_configured_design_that_does_not_happen_is_said_so(tmp_path):
    """An XPASS on a design read from the config says what the config promised and that the model
    does not apply it (Phi-3.5-MoE's long factors, never read past its original length)."""
    source = MODELS + textwrap.dedent('''
        import posenc
        MODEL_CLAIMS = {"MODEL-7": posenc.refuted("configured: rope_type longrope: long factors past 16 (planted)")}
    ''')
    verdicts = _run(tmp_path, "llama", "-k", "past_the_maximum", source=source)
    seven = _outcomes(verdicts, "MODEL-7")
    assert [o["state"] for o in seven] == [State.UNEXPECTEDLY_HOLDS], seven
    assert seven[0]["message"].startswith("a configured design the model does not apply: its config declares that "
                                          "rope_type longrope: long factors past 16"), seven[0]["message"]


# ------------------------------------------------------------------ what the model's layers are


@needs_transformers
def test_recurrent_layers_and_position_code_are_read_from_the_model():
    import transformers

    transformers.logging.set_verbosity_error()
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own source
    hybrid, plain = namespace["recurrentgemma"](), namespace["llama"]()
    layers = attribution.recurrent_layers(hybrid)
    assert "block_types" in layers.configured or "layer_types" in layers.configured, layers
    assert [m.split()[0] for m in layers.modules] == ["model.layers.0.temporal_block", "model.layers.2.temporal_block"]
    assert not attribution.recurrent_layers(plain)
    # xLSTM's config names no layer types and its classes carry its prefix ("xLSTMLayer"): its
    # blocks are read by their attribute's name, their norm ("norm_mlstm") left out.
    blocks = attribution.recurrent_layers(namespace["xlstm"]())
    assert [m.split()[0] for m in blocks.modules] == ["backbone.blocks.0.mlstm_layer",
                                                        "backbone.blocks.1.mlstm_layer"], blocks
    assert attribution.position_code(plain) == ["model.rotary_emb (LlamaRotaryEmbedding)"]


@needs_transformers
def test_neutralised_positions_make_the_logits_blind_to_position_ids():
    """The probe's teeth: the same model tells positions apart before and not after."""
    import transformers

    transformers.logging.set_verbosity_error()
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own source
    model = namespace["llama"]().eval()
    ids = torch.randint(3, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    near, far = torch.arange(8)[None], torch.arange(8)[None] + torch.tensor([[0] * 7 + [9]])

    def moved():
        with torch.no_grad():
            return float((model(ids, position_ids=near).logits - model(ids, position_ids=far).logits).abs().max())

    assert moved() > 1e-2
    attribution.neutralise_positions(model)
    assert moved() < 1e-5


# ------------------------------------------------------------------ one rule for records and --model

SAME_ARCHITECTURES = ("lm_bamba", "lm_llama_dynamic", "lm_phi3_longrope", "lm_gpt2", "lm_mpt")


@needs_transformers
def test_a_record_and_model_on_one_architecture_give_the_same_cells(tmp_path):
    """The built-in record and ``--model`` on the same config read the same cells: the recurrent
    state, the rope type's and the config's designs are read by one rule in both paths."""
    source = textwrap.dedent('''
        import transformers
        from transformers import AutoModelForCausalLM
        from posenc.ecosystem.transformers_models import _configs, _unusual_configs

        transformers.logging.set_verbosity_error()

        def build(name):
            config_class, arguments, _ = {**_configs(), **_unusual_configs()}[name]
            config = getattr(transformers, config_class)(**arguments)
            return AutoModelForCausalLM.from_config(config)  # the attention the records use: the default
    ''') + "".join(f"\n\ndef {name}():\n    return build({name!r})\n" for name in SAME_ARCHITECTURES)
    (tmp_path / "same.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    for name in SAME_ARCHITECTURES:
        rows = {}
        for how, options in {"record": ["--plugin", "posenc.ecosystem", "--encoders", name],
                             "--model": ["--model", f"{tmp_path / 'same.py'}:{name}", "--encoders", f"model_{name}"]
                             }.items():
            reports = tmp_path / how.strip("-") / name
            subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "specs" / "test_models.py"), "-q",
                            "-p", "no:cacheprovider", "--matrix-dir", str(reports), *options],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
            verdicts = json.loads((reports / "verdicts.json").read_text())
            rows[how] = {claim: row.get(name, row.get(f"model_{name}")) for claim, row in verdicts["matrix"].items()
                         if claim.startswith("MODEL-") or claim == "contract"}
        assert rows["record"] == rows["--model"], (name, rows)


MAMBA = textwrap.dedent('''
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def mamba():
        config = transformers.MambaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, state_size=8,
                                          initializer_range=0.2)
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_a_model_with_no_position_code_has_its_failures_labelled_not_positional(tmp_path):
    """Mamba has no rotary, no table, no ALiBi and takes no position ids: its decode with a mask that
    covers the cache (which it does not trim) fails, and the failure is the model's, never the positions'."""
    verdicts = _run(tmp_path, "mamba", "-k", "decoding", source=MAMBA, file="mamba.py")
    failed = [o for o in verdicts["outcomes"] if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert failed, _cells(verdicts, "model_mamba")
    assert all(o["blame"] and "not positional" in o["message"]
               for o in failed), [(o["blame"], o["message"][:300]) for o in failed]


@needs_transformers
def test_position_tables_are_read_by_what_they_are():
    """CTRL keeps its sinusoid in a buffer and OpenAI GPT names its table ``positions_embed``: both
    absolute. RoFormer's sinusoidal table feeds a rotary: relative."""
    import transformers
    from transformers import AutoModelForCausalLM

    from posenc.harness.whole_models.models import traits_of

    transformers.logging.set_verbosity_error()
    built = {
        "CTRLConfig": dict(n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=64),
        "OpenAIGPTConfig": dict(n_embd=64, n_layer=2, n_head=4, n_positions=64),
        "RoFormerConfig": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                               is_decoder=True, max_position_embeddings=64),
    }
    read = {name: traits_of(AutoModelForCausalLM.from_config(getattr(transformers, name)(vocab_size=128, **kw))).positions
            for name, kw in built.items()}
    assert read == {"CTRLConfig": "absolute", "OpenAIGPTConfig": "absolute", "RoFormerConfig": "relative"}, read


OPENAI_GPT = textwrap.dedent('''
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def openai_gpt():
        config = transformers.OpenAIGPTConfig(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_a_model_whose_kwargs_would_swallow_a_cache_is_one_that_takes_none(tmp_path):
    """OpenAI GPT keeps no cache and its ``**kwargs`` take any: it is not handed one as if it kept its
    state in its modules (which crashed every call with a mask longer than its token), it is said to
    return none."""
    verdicts = _run(tmp_path, "openai_gpt", "-k", "answers_logits or decoding_matches",
                    source=OPENAI_GPT, file="openai_gpt.py")
    said = " ".join(o["message"] for o in _outcomes(verdicts, "MODEL-2"))
    assert "returns no cache" in said and "must match" not in said and "Expected size" not in said, said
    assert {State(o["state"]) for o in _outcomes(verdicts, "contract")} == {State.HOLDS}, verdicts["outcomes"]
    assert {State(o["state"]) for o in _outcomes(verdicts, "MODEL-2")} == {State.EXCLUDED}, verdicts["outcomes"]


CPMANT = textwrap.dedent('''
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def cpmant():
        config = AutoConfig.for_model("cpmant", vocab_size=128, hidden_size=64, num_attention_heads=4, dim_head=16,
                                      dim_ff=128, num_hidden_layers=2, prompt_length=0, prompt_types=1)
        return AutoModelForCausalLM.from_config(config)
''')


@needs_transformers
def test_a_library_model_that_continues_its_cache_its_own_way_reads_n_a(tmp_path):
    """CpmAnt takes the full ids with its cache: a one-token step answers no logits. That is its
    convention, not a broken contract: its contract holds and its cached relations read n/a with
    the reason, never BLOCK (a user's model in the harness's convention is still blocked)."""
    verdicts = _run(tmp_path, "cpmant", "-k", "answers_logits or decoding_matches", source=CPMANT, file="cpmant.py")
    cells = _cells(verdicts, "model_cpmant")
    assert cells["contract"] == State.HOLDS and cells["MODEL-2"] == State.NA, cells
    said = {o["message"] for o in _outcomes(verdicts, "MODEL-2")}
    assert all(m.startswith("not applicable: ") and "a convention of its own" in m for m in said), said



# ------------------------------------------------------------------ a discrete choice that flips


class _Router(torch.nn.Module):
    """Picks the larger of two scores: its index is a discrete choice."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(2, 2, bias=False)

    def forward(self, x):
        scores = self.score(x)
        return scores, scores.argmax(-1)


def test_choices_recorded_on_one_model_are_replayed_on_another():
    """The probe's teeth: a copy whose router would choose otherwise chooses what the first did,
    in its own dtype, and a model without integer outputs records nothing."""
    router = torch.nn.Sequential(_Router())
    with torch.no_grad():
        router[0].score.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    x = torch.tensor([[2.0, 1.0]])
    choices = attribution.Selections().record(router)
    assert int(router(x)[1]) == 0
    choices.remove()
    assert choices.modules() == ["0"]
    swapped = copy.deepcopy(router).to(torch.float64)
    with torch.no_grad():
        swapped[0].score.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert int(swapped(x.double())[1]) == 1
    choices.replay(swapped)
    scores, index = swapped(x.double())
    assert int(index) == 0 and scores.dtype == torch.float64
    assert int(swapped(x.double())[1]) == 1  # one recorded call, one replayed
    assert not attribution.Selections().record(torch.nn.Sequential(torch.nn.Linear(2, 2))).recorded


EXAONE_MOE = textwrap.dedent('''
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()

    def exaone_moe():
        torch.manual_seed(0)
        config = AutoConfig.for_model(
            "exaone_moe", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=128, max_position_embeddings=2048, initializer_range=0.2,
            head_dim=16, sliding_window=8, layer_types=["sliding_attention", "full_attention"], num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
''')


@needs_transformers
def test_a_far_query_that_only_layers_without_positions_see_is_no_loss_of_theirs(tmp_path):
    """EXAONE-MoE rotates on its sliding layer alone. Asked with its own masks, that layer would
    read keys at 0…15 from a query at 3000, which it never sees in use, and a router then picked
    other experts under autocast; kept inside its window by position, the layer that sees that far
    reads no positions, and MODEL-6 is n/a, saying so."""
    verdicts = _run(tmp_path, "exaone_moe", "-k", "bf16", source=EXAONE_MOE, file="exaone_moe_user.py")
    assert _cells(verdicts, "model_exaone_moe")["MODEL-6"] is State.NA
    reason = verdicts["not_applicable"]["MODEL-6"]["model_exaone_moe"]
    assert "the layers that see that far (full_attention) read no positions" in reason, reason


# ------------------------------------------------------------------ what their configs and tables say

SEQ2SEQ_DECODERS = textwrap.dedent('''
    import torch
    import transformers

    transformers.logging.set_verbosity_error()

    def whisper():
        config = transformers.WhisperConfig(vocab_size=128, d_model=64, decoder_layers=2, decoder_attention_heads=4,
                                            decoder_ffn_dim=128, encoder_layers=1, encoder_attention_heads=4,
                                            encoder_ffn_dim=128, pad_token_id=0, decoder_start_token_id=1)
        return transformers.WhisperForCausalLM(config)

    def roformer():
        config = transformers.RoFormerConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=128, is_decoder=True)
        return transformers.RoFormerForCausalLM(config)

    def roberta():
        torch.manual_seed(0)
        config = transformers.RobertaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=128, is_decoder=True,
                                            initializer_range=0.2)
        return transformers.RobertaForCausalLM(config).eval()
''')


@needs_transformers
def test_a_decoders_maximum_and_a_fixed_rotary_table_are_read_from_the_model():
    """Whisper's decoder stops at ``max_target_positions`` (448); RoFormer's rotary reads a
    sinusoid table of ``max_position_embeddings`` rows: both are limits, not extrapolation."""
    from posenc.harness.whole_models.models import traits_of

    namespace: dict = {}
    exec(SEQ2SEQ_DECODERS, namespace)  # noqa: S102 - the test's own source
    whisper, roformer = traits_of(namespace["whisper"]()), traits_of(namespace["roformer"]())
    assert whisper.max_position == 448 and whisper.table_limited, whisper
    assert roformer.max_position == 1536 and roformer.positions == "relative" and not roformer.extrapolates, roformer
    assert traits_of(namespace["roberta"]()).extrapolates  # a learned table is absolute, not a rotary table


@needs_transformers
def test_a_model_that_counts_its_positions_past_its_own_pads_is_padded_with_them(tmp_path):
    """RoBERTa skips its ``pad_token_id`` (1) when it counts positions. Padded with its own pad
    token and given no positions, a padded row reads as alone (was FAIL: padded with 0 and handed
    0-based positions derived from the mask, against its own 2-based ones)."""
    verdicts = _run(tmp_path, "roberta", "-k", "left_padded or batch_rows", source=SEQ2SEQ_DECODERS,
                    file="decoders.py")
    cells = _cells(verdicts, "model_roberta")
    assert cells["MODEL-4"] == State.HOLDS and cells["MODEL-5"] == State.HOLDS, (cells, verdicts["outcomes"])


BEAM = textwrap.dedent('''
    import torch
    import transformers

    transformers.logging.set_verbosity_error()

    def beam():
        torch.manual_seed(0)
        config = transformers.BeamConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=128, initializer_range=0.2, moe_intermediate_size=32, num_experts=4,
            num_experts_per_tok=2, n_group=1, topk_group=1, sliding_window=16,
            layer_types=["sliding_attention", "full_attention"], mlp_layer_types=["dense", "sparse"])
        return transformers.BeamForCausalLM(config).eval()
''')


@needs_transformers
def test_a_shift_that_moves_the_logits_past_the_rotary_says_where(tmp_path):
    """Beam's NoPE layers scale queries by ``(1 + p/2048)^0.1``: a shift moves its logits with the
    rotary made the identity too, and MODEL-1's FAIL says positions reach them elsewhere."""
    verdicts = _run(tmp_path, "beam", "-k", "shifting_every", source=BEAM, file="beam_user.py")
    (outcome,) = _outcomes(verdicts, "MODEL-1")
    assert outcome["state"] == State.UNEXPECTEDLY_FAILING, outcome
    assert "made the identity the shift still moves the logits" in outcome["message"], outcome["message"]


class _Layer(torch.nn.Module):
    """A layer that passes its router's choice on with its hidden states (as an indexer's does)."""

    def __init__(self):
        super().__init__()
        self.router = _Router()

    def forward(self, x):
        _, index = self.router(x)
        return x * 2, index


def test_only_the_module_that_chooses_is_replayed_and_never_its_hidden_states():
    """Replaying a layer that carries a choice would replay its hidden states, and any loss would
    vanish: only the router is kept, and a tensor of its input's shape stays the live one's."""
    layer = torch.nn.Sequential(_Layer())
    x = torch.tensor([[2.0, 1.0]])
    choices = attribution.Selections().record(layer)
    layer(x)
    choices.remove()
    assert sorted(choices.recorded) == ["0", "0.router"]
    assert choices.modules() == ["0.router"]  # the layer only passes its router's choice on
    passing = attribution.Selections()
    passing.recorded = {"0": [(x * 2, torch.tensor([0]))]}
    passing.replay(layer)
    hidden, _ = layer(x + 1)
    passing.remove()
    assert torch.equal(hidden, (x + 1) * 2)  # the live hidden states, not the recorded ones


@needs_transformers
def test_a_learned_relative_bias_is_position_code_the_probe_reaches():
    """ProphetNet makes its own positions and reads relative buckets through a linear map. With all
    its position code neutralised, the last row of one layer no longer tells the order of the
    tokens before it (attention without positions is a function of the set); with its absolute
    table alone zeroed, it still does."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.ProphetNetConfig(vocab_size=128, hidden_size=64, num_decoder_layers=1,
                                           num_decoder_attention_heads=4, decoder_ffn_dim=128, num_encoder_layers=2,
                                           num_encoder_attention_heads=4, encoder_ffn_dim=128, init_std=0.2,
                                           is_decoder=True, is_encoder_decoder=False, add_cross_attention=False)
    model = transformers.ProphetNetForCausalLM(config).eval()
    ids = torch.randint(3, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    shuffled = torch.cat([ids[:, :7].flip(1), ids[:, 7:]], dim=1)

    def moved(m):
        with torch.no_grad():
            return float((m(ids).logits[:, -1] - m(shuffled).logits[:, -1]).abs().max())

    reached = attribution.position_code(model)
    assert any("relative_pos_embeddings" in label and "relative" in label for label in reached), reached
    assert moved(model) > 1e-3
    table_only = copy.deepcopy(model)
    for name, module in table_only.named_modules():
        if name.endswith("position_embeddings") and isinstance(module, torch.nn.Embedding):
            module.register_forward_hook(attribution._zeros)
    assert moved(table_only) > 1e-3  # the relative bias still tells the order
    attribution.neutralise_positions(model)
    assert moved(model) < 1e-5


def test_an_eager_attention_model_decodes_across_a_threshold_through_a_long_prefill_only_where_affordable():
    from posenc.harness.whole_models import model_plan as plan

    sdpa, eager = ModelTraits(max_position=8192), ModelTraits(max_position=8192, quadratic_attention=True)
    assert plan.decode_plan(sdpa) == plan.Decode(8192 - plan.ACROSS, 8192 + plan.ACROSS)
    assert plan.decode_plan(eager) == plan.Decode(plan.PREFILL, 40)
    assert plan.decode_plan(ModelTraits(max_position=4096, quadratic_attention=True)).length == 4096 + plan.ACROSS


def test_a_decode_crosses_longrope_s_original_length_below_its_maximum():
    """Longrope switches to its long factors past its original length (1024 here, maximum 4096): the
    cached keys keep the short factors' rotation, so a decode must cross 1024, not only 4096."""
    from posenc.harness.whole_models import model_plan as plan

    longrope = ModelTraits(max_position=4096, original_max_position=1024, rescales_at=1024)
    assert plan.decode_plan(longrope) == plan.Decode(1024 - plan.ACROSS, 1024 + plan.ACROSS)
    assert sum(plan.chunk_plan(longrope)[:1]) < 1024 < sum(plan.chunk_plan(longrope))
    early = ModelTraits(max_position=4096, original_max_position=128, rescales_at=128)
    assert plan.decode_plan(early) == plan.Decode(plan.PREFILL, 128 + 8)  # every token across it
    unscaled = ModelTraits(max_position=4096, original_max_position=1024)  # yarn: no rescaling by length
    assert plan.decode_plan(unscaled) == plan.Decode(4096 - plan.ACROSS, 4096 + plan.ACROSS)


@needs_transformers
def test_a_model_that_continues_one_token_at_a_time_reads_n_a_on_chunks_and_its_pads_are_blamed_on_positions(tmp_path):
    """ProphetNet refuses a multi-token call with its cache, saying so, and takes one token: its
    chunked prefill is n/a with its words. Its left pads move its logits, and with its position
    table and relative buckets neutralised they do not: that FAIL is the positions'."""
    verdicts = _run(tmp_path, "prophetnet")
    cells = _cells(verdicts, "model_prophetnet")
    assert cells["MODEL-3"] == State.NA, cells
    chunked = [o["message"] for o in _outcomes(verdicts, "MODEL-3") if o["state"] == State.EXCLUDED]
    assert any("takes one token at a time with its cache" in m and "only supported" in m for m in chunked), chunked
    padded = [o for o in _outcomes(verdicts, "MODEL-4") if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert padded and all(o["blame"] == "" for o in padded), padded


@needs_transformers
def test_a_model_that_takes_the_full_ids_with_its_cache_keeps_a_convention_of_its_own(tmp_path):
    """XLM returns no cache and cuts the new tokens from the full ids itself: a one-token step
    with its cache fails its own bare ``assert``, while the full ids answer. Its contract holds,
    its cached relations read n/a saying so, and its real defects stay FAIL."""
    verdicts = _run(tmp_path, "xlm")
    cells = _cells(verdicts, "model_xlm")
    assert cells["contract"] == State.HOLDS and cells["MODEL-2"] == State.NA, cells
    said = [o["message"] for o in _outcomes(verdicts, "MODEL-2")]
    assert all("convention of its own" in m and "modeling_xlm.py" in m for m in said), said
    assert cells["MODEL-7"] == State.UNEXPECTEDLY_FAILING, cells  # its table raises an error naming no limit


@needs_transformers
def test_a_cache_under_a_name_of_its_own_is_continued_and_a_batched_step_of_the_wrong_shape_fails(tmp_path):
    """RWKV takes and returns ``state``, Reformer ``past_buckets_states``: both continue their
    sequences. RWKV's step on two rows answers two tokens' logits while one row's answers one:
    its contract fails, where CpmAnt's full-ids convention would read n/a."""
    (tmp_path / "rwkv").mkdir(), (tmp_path / "reformer").mkdir()
    rwkv = _run(tmp_path / "rwkv", "rwkv")
    cells = _cells(rwkv, "model_rwkv")
    assert cells["contract"] == State.UNEXPECTEDLY_FAILING and cells["MODEL-2"] != State.NA, cells
    (contract,) = _outcomes(rwkv, "contract")
    assert "a step of 1 token on 2 rows with the returned cache gives logits of shape (2, 2, 128)" in contract["message"]
    reformer = _run(tmp_path / "reformer", "reformer")
    cells = _cells(reformer, "model_reformer")
    assert cells["contract"] == State.HOLDS and cells["MODEL-2"] == State.HOLDS, cells
    chunked = [o for o in _outcomes(reformer, "MODEL-3") if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert chunked and all("not positional" in o["message"] and o["blame"] for o in chunked), chunked


@needs_transformers
def test_far_from_0_a_shift_has_teeth_where_a_position_one_off_moves_the_logits_past_the_tolerance(tmp_path):
    """At a maximum of 2^21 the shift's window sits past 2097000, where the bound on float32 angle
    rounding (``8·p·eps`` positions) is two positions: no teeth could pass it. Measured, the
    angles' rounding moves Llama's logits far less than a position one off does, so the relation
    has teeth, and holds."""
    verdicts = _run(tmp_path, "llama_far", "-k", "shifting")
    assert _cells(verdicts, "model_llama_far")["MODEL-1"] == State.HOLDS, _outcomes(verdicts, "MODEL-1")


@needs_transformers
def test_float64_angles_measure_the_rounding_and_a_rotary_of_another_form_is_not_measured():
    """Llama's rotary takes float64 angles: its logits at 0…15 barely move, at 4088…4103 they move
    by the float32 rounding of p·θ. A rotary whose angles are not its ``inv_freq``'s is not measured."""
    import transformers

    transformers.logging.set_verbosity_error()
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own source
    model = namespace["llama"]().eval()
    ids = torch.randint(3, 128, (1, 16), generator=torch.Generator().manual_seed(0))

    def distance(start: int) -> float:
        exact = copy.deepcopy(model)
        assert attribution.ExactAngles().attach(exact)
        positions = torch.arange(start, start + 16)[None]
        with torch.no_grad():
            return float((exact(ids, position_ids=positions).logits - model(ids, position_ids=positions).logits)
                         .abs().max())

    assert distance(0) < 1e-5 < distance(4088)
    odd = copy.deepcopy(model)
    rotary = odd.model.rotary_emb
    original = rotary.forward
    rotary.forward = lambda x, position_ids: original(x, position_ids * 2)  # angles of other positions
    measuring = attribution.ExactAngles()
    if measuring.attach(odd):
        with torch.no_grad():
            odd(ids, position_ids=torch.arange(100, 116)[None])
    assert not measuring.valid


CRASHING = textwrap.dedent('''
    import torch
    from torch import nn

    class Crashing(nn.Module):
        vocab_size, max_position = 64, 64

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(64, 8)

        def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
            raise RuntimeError("this model cannot be called")
''')


def test_a_model_that_cannot_be_called_fails_its_contract_and_blocks_every_relation(tmp_path):
    verdicts = _run(tmp_path, "Crashing", source=CRASHING, file="user_crashing.py")
    cells = _cells(verdicts, "model_Crashing")
    assert cells["contract"] == State.UNEXPECTEDLY_FAILING, cells
    relations = {c: v for c, v in cells.items() if c.startswith("MODEL-") and v != State.NA}
    assert relations and set(relations.values()) == {State.BLOCKED}, cells
    blocked = [o["message"] for o in verdicts["outcomes"] if o["state"] == State.BLOCKED]
    assert all("cannot be called" in m and "this model cannot be called" in m for m in blocked), blocked


def test_an_error_is_placed_in_the_module_that_raised_it_and_never_outside_position_code_it_may_hold():
    """The error's traceback names the module whose forward raised it: a router's is no position
    code; a rotary's is; so is a container's whose own forward raised beside a position table."""
    from torch import nn

    class Router(nn.Module):
        def forward(self, x):
            raise RuntimeError("dtype")

    class MyRotaryEmbedding(nn.Module):
        def forward(self, x):
            raise RuntimeError("angles")

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.position_embeddings = nn.Linear(2, 2)

        def forward(self, x):
            raise RuntimeError("sizes")

    class Model(nn.Module):
        def __init__(self, raising):
            super().__init__()
            self.rotary, self.mlp, self.embeddings = MyRotaryEmbedding(), Router(), Embeddings()
            self.raising = raising

        def forward(self, x):
            return getattr(self, self.raising)(x)

        def build_delay_pattern(self, x):  # a method of the model's own that makes no positions
            raise RuntimeError("pad token")

        def prepare_inputs_for_generation(self, x):  # one that may make them
            raise RuntimeError("positions")

    def where(raising):
        model = Model(raising)
        with pytest.raises(RuntimeError) as caught:
            model(torch.zeros(1))
        return attribution.outside_position_code(model, attribution.raised_in(model, caught.value), caught.value)

    assert where("mlp") == "mlp (Router)"
    assert where("rotary") is None and where("embeddings") is None
    assert where("build_delay_pattern") == "Model.build_delay_pattern"
    assert where("prepare_inputs_for_generation") is None


@needs_transformers
def test_own_positions_under_padding_follow_generate_which_may_let_the_model_count_its_own(tmp_path):
    """Kosmos-2's ``prepare_inputs_for_generation`` drops the position ids ``generate`` derives
    from the mask, so its forward counts its own past its pads: its left-padded prompt matches the
    row alone. Its decode step after that prompt does not (it counts the pads): a real FAIL there.
    MODEL-6's far queries stay inside an absolute model's maximum."""
    verdicts = _run(tmp_path, "kosmos2_text", "-k", "left_padded or bf16")
    own = [o for o in _outcomes(verdicts, "MODEL-4") if o["spec"].endswith("own_positions")]
    assert own and own[0]["state"] == State.UNEXPECTEDLY_FAILING, own
    assert "at decode step 1" in own[0]["message"] and "in the prompt" not in own[0]["message"], own
    # its far queries stay inside its maximum of 2048: past it is MODEL-7's (a sinusoid that grows by length)
    assert all("IndexError" not in o["message"] for o in _outcomes(verdicts, "MODEL-6")), _outcomes(verdicts, "MODEL-6")


@needs_transformers
def test_position_ids_passed_on_through_kwargs_are_taken_and_swallowed_ones_are_not():
    """MOSS-Transcribe-Diarize's forward names no ``position_ids`` and passes them on to its
    language model through ``**kwargs``: it takes them. A forward whose ``**kwargs`` drops them
    does not."""
    import inspect

    import transformers
    from torch import nn

    from posenc.harness.whole_models.models import _passes_on

    transformers.logging.set_verbosity_error()
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own source
    llama = namespace["llama"]().eval()

    class PassesThem(nn.Module):
        def __init__(self):
            super().__init__()
            self.language_model = llama

        def forward(self, input_ids, attention_mask=None, **kwargs):
            return self.language_model(input_ids, attention_mask=attention_mask, **kwargs)

    class SwallowsThem(PassesThem):
        def forward(self, input_ids, attention_mask=None, **kwargs):
            return self.language_model(input_ids, attention_mask=attention_mask)

    near = torch.arange(8)[None]
    for model, takes in ((PassesThem(), True), (SwallowsThem(), False)):
        parameters = inspect.signature(model.forward).parameters
        assert _passes_on(model, parameters, 128, "position_ids", near, near + torch.tensor([[0] * 7 + [5]])) is takes


def test_llama_4_s_attention_temperature_is_a_configured_design_where_its_windows_reach_the_floor():
    """``attn_temperature_tuning`` scales the queries of layers without RoPE from position
    ``floor_scale − 1``: declared on MODEL-1 and MODEL-7 where their windows reach it, not where no
    layer goes without RoPE or the floor lies past every window."""
    traits = ModelTraits(max_position=4096)
    tuned = {"model_type": "llama4_text", "attn_temperature_tuning": True, "floor_scale": 64, "attn_scale": 0.1,
             "no_rope_layers": [1, 0]}
    found = configured_designs(tuned, traits)
    assert set(found) == {"MODEL-1", "MODEL-7"}, found
    assert all(why.startswith(CONFIGURED) and "⌊(p + 1) / 64⌋" in why for why, _ in found.values())
    assert configured_designs({**tuned, "no_rope_layers": [1, 1]}, traits) == {}
    assert configured_designs({**tuned, "floor_scale": 8192}, traits) == {}
    assert set(configured_designs({**tuned, "floor_scale": 4120}, traits)) == {"MODEL-7"}  # past MODEL-1's reach


LONGROPE = MODELS + textwrap.dedent('''
    def longrope():
        half = 8  # head_dim 16
        config = transformers.LlamaConfig(**{**COMMON, "max_position_embeddings": 4096}, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 1024,
            "short_factor": [1.0 + 0.05 * i for i in range(half)], "long_factor": [2.0 + i for i in range(half)]})
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")

    def dynamic():
        config = transformers.LlamaConfig(**{**COMMON, "max_position_embeddings": 2048}, rope_parameters={
            "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")
''')


@needs_transformers
def test_longrope_is_decoded_across_its_original_length_and_queried_in_bf16_below_it(tmp_path):
    """Longrope turns to its long factors past its original length (1024), below its maximum (4096):
    the keys cached before it keep the short factors' rotation, so a decode across 1024 parts from a
    fresh pass (MODEL-2, positional). Dynamic NTK forms its frequencies anew, in fp32, past its
    maximum (2048): only below it are the model's own, cast to bf16 by ``model.to``, read, so MODEL-6
    fails at 2047, where its far queries at 3000 and 100000 hold."""
    verdicts = _run(tmp_path, "longrope", "-k", "decoding_matches_each_prefix_with_given", source=LONGROPE)
    assert _cells(verdicts, "model_longrope")["MODEL-2"] == State.UNEXPECTEDLY_FAILING
    decode = next(o for o in _outcomes(verdicts, "MODEL-2") if o["state"] == State.UNEXPECTEDLY_FAILING)
    assert "position 1024, after a prefill of 1020" in decode["message"], decode["message"]
    assert decode["blame"] == "", decode["blame"]  # the positions': no other component named
    (tmp_path / "dynamic").mkdir()
    verdicts = _run(tmp_path / "dynamic", "dynamic", "-k", "bf16", source=LONGROPE)
    bf16 = _outcomes(verdicts, "MODEL-6")[0]
    assert bf16["state"] == State.UNEXPECTEDLY_FAILING and "a query at 2047" in bf16["message"], bf16["message"]


QWEN2_VL = MODELS + textwrap.dedent('''
    def qwen2_vl():
        config = transformers.Qwen2VLConfig(
            text_config=dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                             rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e4},
                             initializer_range=0.2, bos_token_id=1, eos_token_id=2),
            vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                               spatial_merge_size=2, temporal_patch_size=2),
            image_token_id=120, video_token_id=121, vision_start_token_id=122, vision_end_token_id=123,
            initializer_range=0.2)
        return transformers.Qwen2VLForConditionalGeneration._from_config(config, attn_implementation="eager")
''')


@needs_transformers
def test_an_m_rope_model_packs_documents_by_the_text_row_its_mask_reads(tmp_path):
    """Qwen2-VL's mask reads packed documents from a text row put before its three M-RoPE axes,
    position ids (4, batch, seq), and not from (batch, seq) ones: MODEL-8 packs in that form and
    holds; the same row in (batch, seq) form leaks across documents."""
    from posenc.harness.whole_models.models import reads_packed_positions

    namespace: dict = {}
    exec(QWEN2_VL, namespace)  # noqa: S102 - the test's own source
    model = namespace["qwen2_vl"]().eval()
    assert not reads_packed_positions(model) and reads_packed_positions(model, text_row=True)
    verdicts = _run(tmp_path, "qwen2_vl", "-k", "packed_documents_match_each_document_alone", source=QWEN2_VL)
    assert _cells(verdicts, "model_qwen2_vl")["MODEL-8"] == State.HOLDS, _outcomes(verdicts, "MODEL-8")


PARTIAL_ROTARY = MODELS + textwrap.dedent('''
    def mimo_v2_flash():
        config = transformers.AutoConfig.for_model(
            "mimo_v2_flash", vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=24, v_head_dim=16,
            n_routed_experts=4, num_experts_per_tok=2, sliding_window=64,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.334},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.334}},
            max_position_embeddings=4096, initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")
''')


@needs_transformers
def test_bf16_loss_is_judged_on_several_rows_of_tokens(tmp_path):
    """MiMo-V2-Flash rotates a third of each head: ``model.to(bf16)`` rounds its ``inv_freq``, and a
    query at 100000 lands 3 to 5.6 from the fp32 logits on most rows of tokens, 0.5 (under four
    times bf16's noise near the keys) on the one row MODEL-6 once judged alone."""
    verdicts = _run(tmp_path, "mimo_v2_flash", "-k", "bf16", source=PARTIAL_ROTARY)
    bf16 = _outcomes(verdicts, "MODEL-6")[0]
    assert bf16["state"] == State.UNEXPECTEDLY_FAILING, bf16["message"]
    assert "the rotation lost precision" in bf16["message"], bf16["message"]
