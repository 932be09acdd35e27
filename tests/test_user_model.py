"""``pytest specs --model FILE.py:NAME`` on a user's file outside the project: the model relations
run against a hand-written causal LM that keeps its own KV cache and takes ``input_pos`` (not
transformers' convention), built from a class, a factory or an instance; a planted defect is a
FAIL with a pytest command and a standalone script that raise it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc.harness.catalogue.states import State

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "my_model.py"
pytestmark = pytest.mark.xdist_group("user_model")


def _run(tmp_path: Path, target: str, *options) -> tuple[dict, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    reports = tmp_path / "reports"
    ran = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "specs"), "-q", "-p", "no:cacheprovider",
                          "--model", target, "--encoders", "model_*", "--matrix-dir", str(reports), *options],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (reports / "verdicts.json").exists(), ran.stdout[-3000:] + ran.stderr[-3000:]
    return json.loads((reports / "verdicts.json").read_text()), ran


def _model_row(verdicts: dict, name: str) -> dict:
    return {claim: row[name] for claim, row in verdicts["matrix"].items() if claim.startswith("MODEL-")
            or claim == "contract"}


def test_a_hand_written_input_pos_model_holds_every_relation_it_can_take(tmp_path):
    (tmp_path / "my_model.py").write_text(EXAMPLE.read_text())
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'my_model.py'}:TinyDecoder")
    row = _model_row(verdicts, "model_TinyDecoder")
    assert row.pop("MODEL-4") == State.NA, row  # no attention mask in this convention
    assert row.pop("MODEL-8") == State.NA, row  # and no documents
    assert set(row.values()) == {State.HOLDS}, (row, ran.stdout[-3000:])
    assert ran.returncode == 0


def test_a_factory_and_an_instance_are_models_too(tmp_path):
    source = EXAMPLE.read_text() + "\n\ndef make():\n    return TinyDecoder()\n\n\nmodel = TinyDecoder()\n"
    (tmp_path / "my_model.py").write_text(source)
    for name in ("make", "model"):
        verdicts, ran = _run(tmp_path, f"{tmp_path / 'my_model.py'}:{name}", "-k", "batch_rows or decoding")
        row = _model_row(verdicts, f"model_{name}")
        assert (row["MODEL-2"], row["MODEL-5"]) == (State.HOLDS, State.HOLDS), (name, ran.stdout[-2000:])


def test_positions_restarting_at_each_call_fail_decoding_with_reproducers(tmp_path):
    """The executorch #2010 class: each call rotates from 0, so a cached continuation is wrong."""
    source = EXAMPLE.read_text().replace("q, k = rotate(q, input_pos), rotate(k, input_pos)",
                                         "q, k = rotate(q, input_pos - input_pos[0]), rotate(k, input_pos - input_pos[0])")
    assert source != EXAMPLE.read_text()
    (tmp_path / "my_model.py").write_text(source)
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'my_model.py'}:TinyDecoder")
    row = _model_row(verdicts, "model_TinyDecoder")
    failing = {claim for claim, state in row.items() if state == State.UNEXPECTEDLY_FAILING}
    assert failing == {"MODEL-2", "MODEL-3"}, (row, ran.stdout[-3000:])
    assert ran.returncode == 1
    decode = next(o for o in verdicts["outcomes"] if o["claim"] == "MODEL-2")
    assert f"--model {tmp_path / 'my_model.py'}:TinyDecoder" in decode["reproducer"]
    script = tmp_path / "repro.py"
    script.write_text(decode["python"])
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode != 0 and "[MODEL-2] model_TinyDecoder" in again.stderr, again.stderr[-2000:]


HF_MODELS = '''
import transformers
from transformers import AutoModelForCausalLM

SMALL = dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=32, initializer_range=0.2)


def dynamic():
    config = transformers.LlamaConfig(**SMALL, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                                                 "factor": 2.0})
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager")


def gptj():
    config = transformers.GPTJConfig(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_positions=64, rotary_dim=8,
                                     bos_token_id=1, eos_token_id=2, initializer_range=0.2)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager")
'''


@pytest.mark.parametrize("name, expected", [
    # the design past its threshold declared (a batch's largest row, a window past the maximum); the
    # upstream finding: keys cached before the threshold keep their base (a stale cache)
    ("dynamic", {"MODEL-2": State.UNEXPECTEDLY_FAILING, "MODEL-3": State.UNEXPECTEDLY_FAILING,
                 "MODEL-5": State.REFUTED, "MODEL-7": State.REFUTED}),
    ("gptj", {"MODEL-7": State.UNEXPECTEDLY_FAILING}),  # the upstream finding: an IndexError naming no limit
])
def test_a_transformers_model_passed_by_file_is_read_from_its_config(tmp_path, name, expected):
    """Its documented design (dynamic NTK's threshold, where the relations reach it) is declared and
    GPT-J's fixed table is known, so the only red cells are the upstream findings of
    docs/findings/models.md."""
    pytest.importorskip("transformers")
    (tmp_path / "hf_models.py").write_text(HF_MODELS)
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'hf_models.py'}:{name}")
    row = _model_row(verdicts, f"model_{name}")
    assert {claim: state for claim, state in row.items() if state != State.HOLDS} == expected, \
        (row, ran.stdout[-3000:])


def test_a_model_without_a_vocab_size_is_measured_not_assumed(tmp_path):
    """The vocabulary is read off the logits of one call (it is not taken to be a default)."""
    source = EXAMPLE.read_text().replace("        self.vocab_size = vocab_size\n", "") \
        .replace("TinyDecoder(nn.Module):\n    def __init__(self, vocab_size=128,", "TinyDecoder(nn.Module):\n"
                 "    def __init__(self, vocab_size=200,")
    assert "self.vocab_size" not in source and "vocab_size=200" in source
    (tmp_path / "my_model.py").write_text(source)
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'my_model.py'}:TinyDecoder", "-k", "answers_logits or batch_rows")
    row = _model_row(verdicts, "model_TinyDecoder")
    assert (row["contract"], row["MODEL-5"]) == (State.HOLDS, State.HOLDS), (row, ran.stdout[-2000:])


TORCHTUNE_EXAMPLE = ROOT / "docs" / "examples" / "torchtune_llama3.py"


def test_a_torchtune_model_runs_as_it_is(tmp_path):
    """The how-to's torchtune example, run as written: torchtune's llama3 through ``--model`` with
    no wrapper (the adapter sets up and resets its caches and builds its mask). Every relation
    holds in both regimes but MODEL-6, which a rope base of 500000 leaves without teeth at 3000
    (undecided), and MODEL-7, torchtune's finding: past ``max_seq_len`` its RoPE table raises an
    IndexError that names no limit."""
    pytest.importorskip("torchtune")
    (tmp_path / "torchtune_llama3.py").write_text(TORCHTUNE_EXAMPLE.read_text())
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'torchtune_llama3.py'}:tiny_llama3")
    row = _model_row(verdicts, "model_tiny_llama3")
    assert {claim: state for claim, state in row.items() if state != State.HOLDS} == {
        "MODEL-6": State.UNDECIDED, "MODEL-7": State.UNEXPECTEDLY_FAILING}, (row, ran.stdout[-3000:])
    own = [o for o in verdicts["outcomes"] if o["spec"].endswith("_with_own_positions")]
    assert len(own) == 5 and {o["state"] for o in own} == {State.HOLDS}, own
    assert "IndexError that names no limit" in next(o["message"] for o in verdicts["outcomes"]
                                                   if o["claim"] == "MODEL-7")


def test_torchtune_past_max_seq_len_raises_naming_no_limit_without_the_harness():
    """MODEL-7's finding on torchtune, with torchtune alone: a position at ``max_seq_len`` indexes
    past the RoPE table, and the error names no limit."""
    pytest.importorskip("torchtune")
    import torch
    from torchtune.models.llama3 import llama3

    model = llama3(vocab_size=128, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=64,
                   intermediate_dim=128).eval()
    with torch.no_grad(), pytest.raises(IndexError) as raised:
        model(torch.randint(3, 128, (1, 4)), input_pos=torch.arange(62, 66)[None])
    assert not any(word in str(raised.value) for word in ("max_seq_len", "maximum", "limit", "table"))


def test_a_reset_that_does_nothing_fails_decoding(tmp_path):
    """Every path starts on a fresh copy of the model, so a broken reset shows only where a model
    that decoded starts a new sequence: MODEL-2 does, and reads the stale keys."""
    source = EXAMPLE.read_text().replace("            block.keys = block.values = None", "            pass")
    assert "            pass" in source
    (tmp_path / "my_model.py").write_text(source)
    verdicts, ran = _run(tmp_path, f"{tmp_path / 'my_model.py'}:TinyDecoder", "-k", "decoding")
    row = _model_row(verdicts, "model_TinyDecoder")
    assert row["MODEL-2"] == State.UNEXPECTEDLY_FAILING, (row, ran.stdout[-2000:])
    failed = [o for o in verdicts["outcomes"] if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert any("keeps state across sequences" in o["message"] for o in failed), failed


def test_an_error_without_text_names_where_it_was_raised():
    """A bare ``assert`` in a model (ProphetNet's) raises an AssertionError with no message: the
    violation names its file, line and source instead of an empty message."""
    from posenc.harness.references.contract import error_text
    from specs import support

    try:  # compiled here, so that pytest's assertion rewriting gives it no text
        exec(compile("def forward():\n    assert 1 + 1 == 3\nforward()\n", "modeling_bare.py", "exec"))  # noqa: S102
    except AssertionError as error:
        message = error_text(error)
    assert message.startswith("no message; raised at modeling_bare.py:2 (forward)"), message
    assert "message=shorten(error_text(error))" in Path(support.__file__).read_text()


def test_a_model_with_a_vision_tower_says_where_its_pictures_are_judged():
    """``--model`` calls a vision-language model with text: its VLM cells name the record that runs
    them, not a trait the user never set; a model without a tower keeps the default reason."""
    from types import SimpleNamespace

    from posenc.harness.catalogue.claims import VLM_CLAIMS
    from posenc.harness.catalogue.records import ModelTraits
    from posenc.harness.run.selection import _pictures_unseen

    model = torch.nn.Linear(2, 2)
    model.config = SimpleNamespace(vision_config=SimpleNamespace(patch_size=2))  # Gemma 4's towers: no M-RoPE
    unseen = _pictures_unseen(model, ModelTraits())
    assert set(unseen) == set(VLM_CLAIMS) and "no M-RoPE" in unseen["VLM-1"].reason
    model.config.rope_parameters = {"rope_type": "default", "mrope_section": [2, 1, 1]}  # GLM-Image's
    assert "no adapter here makes (HFVisionLanguageLM: AttributeError" in _pictures_unseen(model, ModelTraits())[
        "VLM-1"].reason
    assert _pictures_unseen(model, ModelTraits(vision=True)) == {}
    model.config = SimpleNamespace()
    assert _pictures_unseen(model, ModelTraits()) == {}
