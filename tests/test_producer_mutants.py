"""The position-id specs catch the defects of the bug reports on id builders, packing collators and
context-parallel shards, and blame exactly the claims each breaks: ``specs/test_id_builders.py``,
``test_packing.py``, ``test_sharding.py`` and the producers' contract, run once on the
``tests.producer_mutants`` plug-in and on the built-in producers. A kill is a cell "unexpectedly
failing"; a crash, an unexpected pass or an undecided cell the mutant does not declare is never one.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from unittest import mock

import pytest

import posenc
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT, PRODUCER_CLAIMS
from posenc.harness.catalogue.states import State
from tests.spec_runs import ROOT

PLUGIN = "tests.producer_mutants"
SPECS = ["specs/test_id_builders.py", "specs/test_packing.py", "specs/test_sharding.py",
         "specs/test_producer_contract.py"]
BUILT_IN = ["ids_mrope_frames", "ids_mrope_seconds", "ids_mrope_split", "ids_vision_grid", "pack_flat", "pack_mrope",
            "shard_contiguous", "shard_head_tail", "shard_round_robin"]


def _catalogue():
    collected = []
    with mock.patch.object(posenc, "register", side_effect=collected.append):
        module = importlib.import_module(PLUGIN)
    return module


CATALOGUE = _catalogue()
MUTANTS = {m.record.name: m for m in CATALOGUE.MUTANTS}


@pytest.fixture(scope="module")
def producer_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("producer-mutants")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    names = [*BUILT_IN, *CATALOGUE.CONTROLS, *MUTANTS]
    command = [sys.executable, "-m", "pytest", *SPECS, "--plugin", PLUGIN, "--encoders", ",".join(names),
               "--matrix-dir", str(out), "-q", "-p", "no:cacheprovider", "--tb=no"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert (out / "verdicts.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text())["matrix"]


def _cells(matrix, name):
    return {claim: State(row[name]) for claim, row in matrix.items() if name in row}


@pytest.mark.parametrize("name", [*BUILT_IN, *CATALOGUE.CONTROLS])
def test_the_correct_producers_hold_every_claim_of_their_family(producer_run, name):
    cells = _cells(producer_run, name)
    assert cells[CONTRACT] == State.HOLDS
    judged = {c: state for c, state in cells.items() if state != State.NA}
    assert judged and all(state == State.HOLDS for state in judged.values()), judged


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_fails_exactly_its_declared_claims(producer_run, name):
    mutant, cells = MUTANTS[name], _cells(producer_run, name)
    failed = {c for c, state in cells.items() if state == State.UNEXPECTEDLY_FAILING}
    assert failed == mutant.fails, cells
    undecided = {c for c, state in cells.items() if state == State.UNDECIDED}
    assert undecided == mutant.undecided, cells
    others = {c: state for c, state in cells.items() if c not in failed | undecided}
    assert all(state in (State.HOLDS, State.NA) for state in others.values()), others


def test_the_mutant_declarations_are_sound():
    every = {c for claims in PRODUCER_CLAIMS.values() for c in claims}
    killed = set()
    for name, mutant in MUTANTS.items():
        family = set(PRODUCER_CLAIMS[mutant.record.producer.protocol])
        assert mutant.fails and mutant.fails <= family, (name, mutant.fails)
        assert len(mutant.fails) == 1 or mutant.why, f"{name} fails several claims and says not why"
        killed |= mutant.fails
    assert killed == every, f"claims no mutant kills: {sorted(every - killed, key=list(CLAIMS).index)}"
