"""The model relations catch the defects they are about, and blame them precisely: ``specs/test_models.py``
run once on the ``tests.model_mutants`` plug-in (the ``TinyLM`` control and its mutants, each declaring
the claims it fails).

One subprocess runs the model specs on every TinyLM record, loaded through the public ``--plugin``
option as a user's file would be, and writes the verdicts; the tests below read them. A kill is a
cell "unexpectedly failing" (a ClaimViolation where the control's claim holds); a crash, an
``undecided`` cell or an unexpected pass is never one, and on the control nothing but ``holds`` is
accepted where a claim applies.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

import posenc
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.declarations import model_claims
from posenc.harness.catalogue.states import State
from tests.spec_runs import WORKERS

# One subprocess for every model mutant; under -n its tests share one worker.
pytestmark = pytest.mark.xdist_group("model_mutants")

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "tests.model_mutants"  # a package: --plugin takes its module name
SPECS = "specs/test_models.py"
KILL = State.UNEXPECTEDLY_FAILING
#: States no TinyLM cell may reach: a crash or an unexpected pass is never a kill.
RED = {State.CRASHED, State.FAILING_AND_CRASHED, State.TIMED_OUT, State.UNEXPECTEDLY_HOLDS, State.BLOCKED}


def read_catalogue():
    """The plug-in module and its records, collected without registering them in this process."""
    collected = []
    with mock.patch.object(posenc, "register", side_effect=collected.append):
        module = importlib.import_module(PLUGIN)
    assert collected, f"{PLUGIN} was imported before: its records would be registered in this process"
    return module, collected


CATALOGUE, RECORDS = read_catalogue()
CONTROLS = list(CATALOGUE.CONTROLS)
CONTROL_OF = {m.record.name: m.control for m in CATALOGUE.MUTANTS}
MUTANTS = [m.record.name for m in CATALOGUE.MUTANTS]
KILLED = [m for m in MUTANTS if CATALOGUE.EXPECTED_CLAIMS[m]]
BY_NAME = {r.name: r for r in RECORDS}


def _environment() -> dict:
    """This environment without encoder selection, plug-ins or any other harness variable."""
    return {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}


class ModelRun:
    """The verdicts of the model specs on the TinyLM records: cells and outcomes."""

    def __init__(self, verdicts: dict, wall_s: float):
        self.matrix: dict[str, dict[str, str]] = verdicts["matrix"]
        self.outcomes: list[dict] = verdicts["outcomes"]
        self.wall_s = wall_s

    def cells(self, encoder: str) -> dict[str, State]:
        """Each claim's cell on ``encoder`` (the contract row included)."""
        return {claim: State(row[encoder]) for claim, row in self.matrix.items() if encoder in row}

    def of(self, encoder: str, states=None) -> list[dict]:
        return [o for o in self.outcomes if o["encoder"] == encoder and (states is None or State(o["state"]) in states)]


def expected_cells(name: str) -> dict[str, State]:
    """What every cell of a TinyLM record must read: ``n/a`` where its claim does not apply,
    "unexpectedly failing" where the mutant declares it fails, ``undecided`` where a known
    survivor declares the relation blind, ``refuted`` where its control declares a design that
    breaks the relation, ``blocked`` on a mutant that fails the contract alone (logits of another
    shape: the model contract blocks its relations), ``holds`` everywhere else."""
    record = BY_NAME[name]
    fails = CATALOGUE.EXPECTED_CLAIMS.get(name, set())
    undecided = CATALOGUE.EXPECTED_UNDECIDED.get(name, set())
    cells = {}
    for claim in (*CLAIMS, CONTRACT):
        if claim != CONTRACT and not record.applies(claim):
            cells[claim] = State.NA
        elif claim in fails:
            cells[claim] = KILL
        elif fails == {CONTRACT}:
            cells[claim] = State.BLOCKED
        elif claim in undecided:
            cells[claim] = State.UNDECIDED
        else:
            cells[claim] = State.REFUTED if record.declared(claim).status == State.REFUTED else State.HOLDS
    return cells


def _describe(run: ModelRun, name: str, claim: str) -> str:
    messages = {o["state"]: o["message"] for o in run.of(name) if o["claim"] == claim}
    return "; ".join(f"{state}: {message[:240]}" for state, message in messages.items()) or "no outcome"


@pytest.fixture(scope="module")
def model_run(tmp_path_factory) -> ModelRun:
    """Run the model specs once on every TinyLM record (in a subprocess) and read their verdicts."""
    out = tmp_path_factory.mktemp("model-mutants")
    command = [sys.executable, "-m", "pytest", SPECS, "--plugin", PLUGIN, "--encoders", ",".join(BY_NAME),
               "--matrix-dir", str(out), "-q", "-p", "no:cacheprovider", "--tb=no", *WORKERS]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    (out / "spec-run.log").write_text(done.stdout + done.stderr)
    verdicts = out / "verdicts.json"
    if done.returncode not in (0, 1) or not verdicts.exists():  # 1: the mutants fail, as they should
        pytest.fail(f"the model spec run did not complete (exit {done.returncode}):\n"
                    f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return ModelRun(json.loads(verdicts.read_text()), wall_s)


# ------------------------------------------------------------------ the catalogue itself


def test_catalogue_declares_at_least_ten_killed_mutants_with_their_claims():
    assert len(KILLED) >= 10, KILLED
    assert len(set(BY_NAME)) == len(RECORDS) == len(MUTANTS) + len(CONTROLS)
    assert all(name.startswith("tinylm_") for name in MUTANTS), MUTANTS
    relations = {c for c in CLAIMS if c.startswith("MODEL-")} | {CONTRACT}
    for name in MUTANTS:
        fails, undecided = CATALOGUE.EXPECTED_CLAIMS[name], CATALOGUE.EXPECTED_UNDECIDED[name]
        assert (fails | undecided) <= relations, f"{name}: claims that are not model relations"
        assert bool(fails) != (name in CATALOGUE.KNOWN_SURVIVORS), \
            f"{name}: list the claims it fails, or say in survives= why no relation kills it yet"
        assert (len(fails) > 1 or bool(undecided and fails)) == (name in CATALOGUE.WHY), \
            f"{name}: a mutant failing several claims, or killed with cells left undecided, says why (why=), " \
            "and only such a mutant"
    assert BY_NAME["tinylm"].claims == model_claims(), "the control declares that every model relation holds"
    refuted = {c for c, d in BY_NAME["tinylm_dynamic"].claims.items() if d.status == State.REFUTED}
    assert refuted == {"MODEL-7"}, "the dynamic control declares its design past the maximum, and only it"


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_describes_its_defect_and_keeps_the_control_declarations(name):
    record, control = BY_NAME[name], BY_NAME[CONTROL_OF[name]]
    assert record.description, f"{name}: the mutant class needs a docstring naming its defect"
    assert record.claims == control.claims and record.model == control.model and record.kind == "model"
    assert record.name not in {r.name for r in posenc.records()}, "reading the catalogue registered it"


# ------------------------------------------------------------------ the run


def test_every_record_went_through_the_model_specs(model_run):
    ran = {o["encoder"] for o in model_run.outcomes}
    assert set(BY_NAME) <= ran, f"no spec ran on: {sorted(set(BY_NAME) - ran)}"
    print(f"model mutant run: {len(BY_NAME)} records in {model_run.wall_s:.1f} s wall time")


@pytest.mark.parametrize("control", CONTROLS)
def test_control_holds_every_cell_that_applies(model_run, control):
    """Every cell holds (or reads its declared design), in both regimes: every spec ran and passed."""
    cells = model_run.cells(control)
    wrong = {claim: state for claim, state in cells.items() if state != expected_cells(control)[claim]}
    assert not wrong, "the control reads other than declared:\n" + "".join(
        f"  {claim}: {state} ({_describe(model_run, control, claim)})\n" for claim, state in sorted(wrong.items()))
    surprising = model_run.of(control, RED | {KILL, State.UNDECIDED, State.EXCLUDED})
    assert not surprising, [(o["spec"], o["state"], o["message"][:200]) for o in surprising]
    regimes = {o["spec"].rsplit("_with_", 1)[-1] for o in model_run.of(control) if "_with_" in o["spec"]}
    assert regimes == {"given_positions", "own_positions"}, regimes


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_exactly_its_declared_claims(model_run, name):
    """Precise blame: the claims a defect fails are its own and those its why names; every other
    cell holds (a known survivor: undecided exactly where it declares)."""
    cells, expected = model_run.cells(name), expected_cells(name)
    wrong = {claim: state for claim, state in cells.items() if state != expected[claim]}
    assert not wrong, f"{name}: cells differ from the declaration (fails {sorted(CATALOGUE.EXPECTED_CLAIMS[name])})\n" \
        + "".join(f"  {claim}: {state}, expected {expected[claim]} ({_describe(model_run, name, claim)})\n"
                  for claim, state in sorted(wrong.items()))
    red = [o for o in model_run.of(name, RED) if State(o["state"]) != expected[o["claim"]]]
    assert not red, [(o["spec"], o["state"], o["message"][:200]) for o in red]
    for claim in sorted(CATALOGUE.EXPECTED_CLAIMS[name]):
        print(f"{claim}: {_describe(model_run, name, claim)}")


@pytest.mark.parametrize("name", KILLED)
def test_mutant_fails_in_the_regime_its_defect_lives_in(model_run, name):
    """A relation that runs in two regimes fails in exactly those the mutant declares: a defect of
    the model's own positions only where the model chooses them, one of the cache, mask or
    documents in both; and each violation names its regime."""
    declared = next(m.regimes for m in CATALOGUE.MUTANTS if m.record.name == name)
    for claim in sorted(CATALOGUE.EXPECTED_CLAIMS[name]):
        specs = {o["spec"]: o for o in model_run.of(name) if o["claim"] == claim and "_with_" in o["spec"]}
        if not specs:
            continue  # a relation of one regime
        failing = {spec.rsplit("_with_", 1)[1].removesuffix("_positions"): o for spec, o in specs.items()
                   if State(o["state"]) == KILL}
        assert set(failing) == declared, f"{name} {claim}: fails with {sorted(failing)} positions, declared " \
                                         f"{sorted(declared)}"
        for regime, o in failing.items():
            said = "with given positions" if regime == "given" else "with the model's own positions"
            assert said in o["message"], o["message"]


@pytest.mark.parametrize("name", KILLED)
def test_mutant_violations_blame_the_component_at_fault(model_run, name):
    """A defect of the positions is blamed on them (no blame tag); a defect elsewhere (a mask, a
    norm across the batch, a recurrent state) is reported as not positional, and a recurrent one
    names the recurrent layers: the rerun without positions, then without the recurrent layers."""
    declared = next(m.blame for m in CATALOGUE.MUTANTS if m.record.name == name)
    wanted = {"": "", "model": "the model, not its positions", "recurrent": "its recurrent layers"}[declared]
    killed = model_run.of(name, {KILL})
    assert killed, f"{name}: no violation to blame"
    for o in killed:
        if not wanted:
            assert o["blame"] == "" and "not positional" not in o["message"], (o["spec"], o["blame"], o["message"])
        else:
            assert o["blame"].startswith(wanted) and o["message"].startswith(f"[{o['claim']}] {name}: not positional"), \
                (o["spec"], o["blame"], o["message"][:200])


def test_every_failure_carries_a_reproducer_that_loads_the_plugin(model_run):
    failures = [o for o in model_run.outcomes if State(o["state"]) == KILL]
    assert failures, "no mutant failed: the check would be vacuous"
    missing = [o["test_id"] for o in failures if f"--plugin {PLUGIN}" not in o["reproducer"]]
    assert not missing, f"failures whose reproducer does not load {PLUGIN}: {missing}"


def test_every_model_spec_kills_a_mutant(model_run):
    """Each spec of specs/test_models.py fails on some mutant: none is a check that cannot fail."""
    from posenc.harness.catalogue.spec_index import spec_functions

    specs = sorted({s.name for s in spec_functions() if s.kinds == ("model",) and s.module == "test_models"})
    killers = {o["spec"] for o in model_run.outcomes if State(o["state"]) == KILL}
    survivors = [spec for spec in specs if spec not in killers]
    assert len(specs) >= 8 and not survivors, f"model specs that killed no mutant: {survivors}"


def test_a_model_case_runs_on_one_thread_unless_a_count_is_chosen():
    """Tiny models on one torch thread (model-benchmark measured both, idle and beside a job); a
    --perf-threads count wins, and the session's count is back after the case."""
    import torch

    from posenc.harness.cases.execution import MODEL_THREADS, model_threads
    from posenc.harness.cases.parametrization import SpecCase

    session = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        case = SpecCase("MODEL-2", BY_NAME["tinylm"], "test_decoding_matches_each_prefix_with_given_positions")
        with model_threads(case, 0):
            assert torch.get_num_threads() == MODEL_THREADS == 1
        assert torch.get_num_threads() == 2
        with model_threads(case, 2):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(session)
