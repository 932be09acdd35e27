"""A model plugged in with ``--model`` that breaks the call contract is blocked, not judged: logits of
the wrong vocabulary or one token short block every relation, and a model answering its logits
alone (no cache) blocks those that continue a sequence, each with the shape or the answer in the
message (``posenc.harness.references.contract.model_problem``); the ``contract`` row fails saying why. The
models are ``tests/model_mutants/faulty_calls.py``, loaded by path as a user's file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc.harness.whole_models.models import TupleLM
from posenc.harness.catalogue.records import ModelTraits
from posenc.harness.catalogue.states import State

ROOT = Path(__file__).resolve().parents[1]
FAULTY = ROOT / "tests" / "model_mutants" / "faulty_calls.py"
SHAPE = "returns logits of shape {} for input ids (2, 16); expected (2, 16, vocab=64)"
#: The relations that continue a sequence with the model's cache (contract.CACHED_RELATIONS).
CACHED_RELATIONS = {"MODEL-2", "MODEL-3"}
NO_CACHE = ("returns a tensor, not (logits, cache): a relation that continues a sequence has no cache to "
            "continue it with")


def _run(tmp_path: Path, name: str, *options) -> tuple[dict[str, State], list[dict], str]:
    """The model specs on ``faulty_calls.py:NAME``: its cells (the contract row too), its outcomes, the log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    reports = tmp_path / "reports"
    ran = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "specs" / "test_models.py"), "-q",
                          "-p", "no:cacheprovider", "--tb=short", "--model", f"{FAULTY}:{name}", "--encoders",
                          "model_*", "--matrix-dir", str(reports), *options],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert (reports / "verdicts.json").exists(), log
    verdicts = json.loads((reports / "verdicts.json").read_text())
    cells = {claim: State(row[f"model_{name}"]) for claim, row in verdicts["matrix"].items()
             if f"model_{name}" in row and (claim.startswith("MODEL-") or claim == "contract")}
    return cells, verdicts["outcomes"], log


def _applying(cells: dict[str, State]) -> dict[str, State]:
    return {claim: state for claim, state in cells.items() if claim != "contract" and state != State.NA}


@pytest.mark.parametrize("name, shape", [("WrongVocab", "(2, 16, 50)"), ("OneTokenShort", "(2, 15, 64)")])
def test_logits_of_the_wrong_shape_block_every_relation_of_the_model(tmp_path, name, shape):
    cells, outcomes, log = _run(tmp_path, name)
    relations = _applying(cells)
    assert len(relations) >= 6 and set(relations.values()) == {State.BLOCKED}, (cells, log)
    said = f"blocked by the contract: model_{name} {SHAPE.format(shape)}"
    for outcome in outcomes:
        if outcome["claim"] == "contract":
            assert State(outcome["state"]) == State.UNEXPECTEDLY_FAILING and shape in outcome["message"], outcome
            # a head of another width is said how to declare; a sequence too short is not one
            assert ("logits_width" in outcome["message"]) == (name == "WrongVocab"), outcome
        else:
            assert outcome["message"].startswith(said), outcome


@pytest.mark.parametrize("name, said", [("NotFinite", "not finite"), ("DrawsAtRandom", "draws at random")])
def test_logits_no_relation_can_judge_block_every_relation(tmp_path, name, said):
    """NaN logits, or logits a second build from the same seed does not give again: blocked, saying
    why, never a FAIL blamed on the positions."""
    cells, outcomes, log = _run(tmp_path, name)
    assert set(_applying(cells).values()) == {State.BLOCKED}, (cells, log)
    assert any(said in o["message"] for o in outcomes if State(o["state"]) == State.BLOCKED), outcomes[:2]


def test_a_model_answering_its_logits_alone_reads_n_a_on_its_cached_relations(tmp_path):
    """The bare tensor is the logits, never ``(logits[0], logits[1])``: the relations that need no
    cache judge it (and hold on this well-made model; padding and batches on their prompts alone);
    those that continue a sequence are ``n/a`` with the reason, never blocked or failed (a
    convention without a cache is not a defect)."""
    cells, outcomes, log = _run(tmp_path, "LogitsOnly")
    cached = {claim: cells[claim] for claim in CACHED_RELATIONS}
    assert set(cached.values()) == {State.NA}, (cells, log)
    applying = _applying(cells)
    assert {c: applying[c] for c in ("MODEL-1", "MODEL-4", "MODEL-5", "MODEL-7")} == dict.fromkeys(
        ("MODEL-1", "MODEL-4", "MODEL-5", "MODEL-7"), State.HOLDS), (cells, log)
    assert applying["MODEL-6"] in (State.HOLDS, State.UNDECIDED), (cells, log)  # its one pass alone
    assert cells["contract"] == State.HOLDS, (cells, log)
    told = [o for o in outcomes if o["claim"] in CACHED_RELATIONS]
    assert told and all(o["message"] == f"not applicable: model_LogitsOnly {NO_CACHE}" for o in told), told


def test_the_well_formed_control_is_not_blocked(tmp_path):
    cells, outcomes, log = _run(tmp_path, "Control", "-k", "answers_logits or decoding or shifting")
    assert (cells["contract"], cells["MODEL-1"], cells["MODEL-2"]) == (State.HOLDS,) * 3, (cells, log)


def test_a_bare_tensor_is_read_as_logits_without_a_cache():
    spec = importlib.util.spec_from_file_location("faulty_calls", FAULTY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    subject = TupleLM(module.LogitsOnly(), ModelTraits(vocab_size=64))
    with torch.no_grad():
        logits, cache = subject(torch.randint(3, 64, (2, 5)))
    assert tuple(logits.shape) == (2, 5, 64) and cache is None and subject.logits_only
    assert subject.missing_cache() == "a tensor, not (logits, cache)"

