"""The VLM relations catch the defects of the M-RoPE bug reports, and blame them precisely:
``specs/test_vision_language.py`` run once on the ``tests.vlm_mutants`` plug-in (the fixed Qwen2.5-VL
control and its mutants, each declaring the relations it fails). A kill is a cell "unexpectedly
failing"; a crash, an ``undecided`` cell or an unexpected pass is never one.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

import posenc
from posenc.ecosystem import support
from posenc.harness.catalogue.claims import VLM_CLAIMS
from posenc.harness.catalogue.states import State
from tests.spec_runs import WORKERS

pytestmark = pytest.mark.xdist_group("vlm_mutants")
ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "tests.vlm_mutants"


def _catalogue():
    collected = []
    with mock.patch.object(posenc, "register", side_effect=collected.append):
        module = importlib.import_module(PLUGIN)
    return module, collected


CATALOGUE, RECORDS = _catalogue()
MUTANTS = [m.record.name for m in CATALOGUE.MUTANTS]


@pytest.fixture(scope="module")
def vlm_mutant_run(tmp_path_factory) -> dict:
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    out = tmp_path_factory.mktemp("vlm-mutants")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs/test_vision_language.py", "--plugin", PLUGIN, "--encoders",
               ",".join(r.name for r in RECORDS), "--matrix-dir", str(out), "-q", "-p", "no:cacheprovider",
               "--tb=no", *WORKERS]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert (out / "verdicts.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text())


def _cells(run: dict, name: str) -> dict[str, State]:
    return {claim: State(run["matrix"][claim][name]) for claim in VLM_CLAIMS}


def test_the_catalogue_covers_the_bug_reports():
    assert len(MUTANTS) >= 6 and len(set(MUTANTS)) == len(MUTANTS)
    for mutant in CATALOGUE.MUTANTS:
        assert mutant.fails and mutant.fails <= set(VLM_CLAIMS), mutant.record.name
        assert (len(mutant.fails) > 1) == bool(mutant.why), f"{mutant.record.name}: several claims need a why"
        assert mutant.record.description and mutant.record.claims == CATALOGUE.CONTROL.claims
    assert not {r.name for r in RECORDS} & {r.name for r in posenc.records()}, "reading the catalogue registered it"


def test_the_control_holds_every_vlm_relation(vlm_mutant_run):
    cells = _cells(vlm_mutant_run, CATALOGUE.CONTROL.name)
    assert set(cells.values()) == {State.HOLDS}, cells


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_exactly_its_declared_relations(vlm_mutant_run, name):
    fails = CATALOGUE.EXPECTED_CLAIMS[name]
    cells = _cells(vlm_mutant_run, name)
    expected = {claim: State.UNEXPECTEDLY_FAILING if claim in fails else State.HOLDS for claim in VLM_CLAIMS}
    assert cells == expected, {c: (cells[c], expected[c]) for c in VLM_CLAIMS if cells[c] != expected[c]}
    kills = [o for o in vlm_mutant_run["outcomes"] if o["encoder"] == name and o["state"] == State.UNEXPECTEDLY_FAILING]
    assert kills and all(o["message"].startswith(f"[{o['claim']}] {name}:") for o in kills), kills


def test_every_vlm_spec_kills_a_mutant(vlm_mutant_run):
    """Each spec of specs/test_vision_language.py fails on some mutant: none is a check that cannot fail."""
    from posenc.harness.catalogue.spec_index import spec_functions

    specs = {s.name for s in spec_functions() if s.module == "test_vision_language"}
    killers = {o["spec"] for o in vlm_mutant_run["outcomes"] if State(o["state"]) == State.UNEXPECTEDLY_FAILING}
    assert len(specs) >= 6 and specs <= killers, f"VLM specs that killed no mutant: {sorted(specs - killers)}"
