"""Every spec can fail, and blames the right claim: the default spec suite, run once on the mutant
encoders of the ``tests.mutants`` package (one module per family, each mutant declaring what it fails).

One subprocess runs ``pytest specs`` with the mutants loaded through the public plug-in option,
as a user's file would be, and writes the verdicts; the tests below read who killed whom. A kill
is a spec reporting "unexpectedly failing" (a ClaimViolation where the imitated design's claim
holds); a crash is not a kill.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest

import posenc
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.spec_index import spec_functions
from posenc.harness.catalogue.states import State
from tests.spec_runs import WORKERS

# One subprocess runs the whole spec suite on every mutant; under -n its tests share one worker.
pytestmark = [pytest.mark.xdist_group("mutants")]

ROOT = Path(__file__).resolve().parent.parent

MUTANTS_PLUGIN = "tests.mutants"  # a package: --plugin takes its module name
KILL = State.UNEXPECTEDLY_FAILING
OUT_OF_SCOPE_MARKERS = {"perf", "slow"}  # deselected by default
#: Decided by measurements (posenc.harness.catalogue.perf_rules, specs/test_perf.py, specs/test_complexity.py), not by
#: a defect an encoder carries; their specs are left out of the kill requirement.
PERFORMANCE_CLAIMS = {"PERF-1", "PERF-2", "LIN-1", "ROPE-12"}


def read_catalogue():
    """The ``tests.mutants`` package; its records are collected, not registered in this process."""
    collected = []
    with mock.patch.object(posenc, "register", side_effect=collected.append):
        module = importlib.import_module(MUTANTS_PLUGIN)
    assert collected, f"{MUTANTS_PLUGIN} was imported before: its mutants would be registered in this process"
    return module, collected


def _takes_record(info) -> bool:
    function = getattr(importlib.import_module(f"specs.{info.module}"), info.name)
    return "record" in inspect.signature(function).parameters


CATALOGUE, RECORDS = read_catalogue()
MUTANTS = [r.name for r in RECORDS]
EXPECTED_CLAIMS: dict[str, set[str]] = CATALOGUE.EXPECTED_CLAIMS
WHY: dict[str, str] = CATALOGUE.WHY
KNOWN_SURVIVORS: dict[str, str] = CATALOGUE.KNOWN_SURVIVORS
#: The model relations' specs run on models, and their mutants are models: tests/test_model_mutants.py;
#: the position producers' specs have theirs in tests/test_producer_mutants.py.
DEFAULT_SPECS = [s for s in spec_functions() if not OUT_OF_SCOPE_MARKERS & set(s.markers)
                 and s.claim not in PERFORMANCE_CLAIMS and _takes_record(s) and s.kinds not in (("model",), ("producer",))]
SPEC_NAMES = sorted({s.name for s in DEFAULT_SPECS})
ROTARY_CLAIMS = [claim for claim, declared in posenc.rotary_claims().items()
                 if declared.status != State.NA and any(s.claim == claim for s in DEFAULT_SPECS)]


def _environment() -> dict:
    """This environment without encoder selection or plug-ins, with the triage Hypothesis profile."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}
    env["POSENC_HYPOTHESIS_PROFILE"] = "triage"  # ci without shrinking: the first counterexample suffices
    return env


class MutationRun:
    """The outcomes of the spec suite on the mutants, indexed by mutant and spec."""

    def __init__(self, outcomes: list[dict], wall_s: float, consequences: dict | None = None):
        self.outcomes, self.wall_s = outcomes, wall_s
        #: ``{claim: {encoder: {primary, rule}}}``: failed cells that follow from another (verdicts.json)
        self.consequences = consequences or {}
        self.kills: dict[str, dict[str, str]] = {m: {} for m in MUTANTS}
        for o in outcomes:
            if o["state"] == KILL and o["encoder"] in self.kills:
                self.kills[o["encoder"]].setdefault(o["spec"], o["message"])

    def states(self, mutant: str, spec: str) -> dict[str, str]:
        """Each state ``spec`` reached on ``mutant``, with its first message."""
        found: dict[str, str] = {}
        for o in self.outcomes:
            if o["encoder"] == mutant and o["spec"] == spec:
                found.setdefault(o["state"], o["message"])
        return found

    def failed_claims(self, mutant: str) -> dict[str, str]:
        """Each claim a ClaimViolation refuted on ``mutant``, with its first message."""
        found: dict[str, str] = {}
        for o in self.outcomes:
            if o["encoder"] == mutant and o["state"] == KILL:
                found.setdefault(o["claim"], f"{o['spec']}: {o['message']}")
        return found

    def primary_claims(self, mutant: str) -> set[str]:
        """The claims failed on ``mutant`` that are no consequence of another failed cell."""
        return {claim for claim in self.failed_claims(mutant) if mutant not in self.consequences.get(claim, {})}

    def victims(self, spec: str) -> set[str]:
        return {m for m, by_spec in self.kills.items() if spec in by_spec}

    def report(self) -> dict:
        return {
            "mutants": MUTANTS, "kills": self.kills, "specs": SPEC_NAMES, "wall_s": self.wall_s,
            "victims": {s: self.victims(s) for s in SPEC_NAMES}, "expected": EXPECTED_CLAIMS,
            "survivors": KNOWN_SURVIVORS,
        }


def _describe(states: dict[str, str]) -> str:
    return "; ".join(f"{state}: {message[:200]}" for state, message in states.items()) or State.NOT_RUN


@pytest.fixture(scope="module")
def mutation_run(tmp_path_factory, mutation_report) -> MutationRun:
    """Run the default spec suite once on every mutant (in a subprocess) and read its verdicts."""
    out = tmp_path_factory.mktemp("mutation")
    command = [sys.executable, "-m", "pytest", "specs", "--plugin", MUTANTS_PLUGIN,
               "--encoders", ",".join(MUTANTS), "--matrix-dir", str(out), "-q", "-p", "no:cacheprovider",
               "--tb=no", *WORKERS]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    (out / "spec-run.log").write_text(done.stdout + done.stderr)
    verdicts = out / "verdicts.json"
    if done.returncode not in (0, 1) or not verdicts.exists():  # 1: some specs failed, as they should
        pytest.fail(f"the spec run on the mutants did not complete (exit {done.returncode}):\n"
                    f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    report = json.loads(verdicts.read_text())
    run = MutationRun(report["outcomes"], wall_s, report.get("consequences", {}))
    mutation_report.update(run.report())
    return run


# ------------------------------------------------------------------ the catalogue itself


def test_catalogue_names_at_least_twenty_mutants_with_their_expected_claims():
    assert len(MUTANTS) >= 20, MUTANTS
    assert len(set(MUTANTS)) == len(MUTANTS)
    assert set(EXPECTED_CLAIMS) == set(MUTANTS), set(EXPECTED_CLAIMS) ^ set(MUTANTS)
    known = set(CLAIMS) | {CONTRACT}
    unknown = {m: sorted(claims - known) for m, claims in EXPECTED_CLAIMS.items() if claims - known}
    assert not unknown, f"expected claims that are not in the catalogue: {unknown}"
    assert set(KNOWN_SURVIVORS) <= set(MUTANTS)
    for mutant in MUTANTS:
        assert bool(EXPECTED_CLAIMS[mutant]) != (mutant in KNOWN_SURVIVORS), \
            f"{mutant}: list the claims it fails, or explain in KNOWN_SURVIVORS why nothing kills it yet"
    unexplained = [m for m, claims in EXPECTED_CLAIMS.items() if len(claims) > 1 and m not in WHY]
    assert not unexplained, f"a mutant failing several claims must say why the mathematics forces each: {unexplained}"
    assert set(WHY) <= {m for m, claims in EXPECTED_CLAIMS.items() if len(claims) > 1}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_mutant_describes_its_defect_and_keeps_the_declarations_it_imitates(record):
    assert record.description, f"{record.name}: the build function needs a docstring naming the defect"
    assert record.name not in {r.name for r in posenc.records()}
    # a q-and-k protocol has no offset path of its own: PATH-1 is n/a there, whatever it imitates
    ignored = {"PATH-1"} if record.calling.protocol != "single" else set()
    kept = {c: d for c, d in record.claims.items() if c not in ignored}
    imitated = [r for r in posenc.records()
                if {c: d for c, d in r.claims.items() if c not in ignored} == kept and r.kind == record.kind]
    assert imitated, f"{record.name}: declarations differ from every built-in design"


def test_mutants_never_reach_the_default_matrix():
    registered = {r.name for r in posenc.records()}
    assert not registered & set(MUTANTS), "reading the catalogue registered mutants in this process"
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=_environment(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[rope_interleaved" in done.stdout, "the collection lists no encoder ids: the check would be vacuous"
    listed = [m for m in MUTANTS if re.search(rf"\[{re.escape(m)}[-\]]", done.stdout)]
    assert not listed, f"mutants collected without the plug-in: {listed}"


# ------------------------------------------------------------------ kills


def test_every_mutant_went_through_the_specs(mutation_run):
    ran = {o["encoder"] for o in mutation_run.outcomes}
    assert set(MUTANTS) <= ran, f"no spec ran on: {sorted(set(MUTANTS) - ran)}"


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if EXPECTED_CLAIMS[m]])
def test_mutant_fails_exactly_its_declared_claims(mutation_run, mutant):
    """Precise blame: the claims a defect fails are its own and those the mathematics forces (WHY)."""
    failed = mutation_run.failed_claims(mutant)
    expected = EXPECTED_CLAIMS[mutant]
    extra = {claim: message for claim, message in failed.items() if claim not in expected}
    missed = sorted(expected - set(failed))
    assert not extra and not missed, (
        f"{mutant}: blamed claims differ from the declared set {sorted(expected)}\n"
        + "".join(f"  also failed {claim}: {message[:200]}\n" for claim, message in sorted(extra.items()))
        + (f"  not failed: {missed}\n" if missed else ""))
    for claim, message in sorted(failed.items()):
        print(f"{claim}: {message}")


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if EXPECTED_CLAIMS[m]])
def test_mutant_is_blamed_first_on_its_declared_claims(mutation_run, mutant):
    """Counted on primary cells (those that follow from no other failed cell): each is a claim the
    mutant declares, so what a reader sees first is never a claim its defect does not break."""
    primary = mutation_run.primary_claims(mutant)
    assert primary and primary <= EXPECTED_CLAIMS[mutant], (mutant, sorted(primary), sorted(EXPECTED_CLAIMS[mutant]))


@pytest.mark.parametrize("mutant", [
    pytest.param(m, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=KNOWN_SURVIVORS[m]))
    if m in KNOWN_SURVIVORS else m
    for m in MUTANTS
])
def test_every_mutant_is_killed(mutation_run, mutant):
    crashes = {o["spec"]: o["message"] for o in mutation_run.outcomes
               if o["encoder"] == mutant and o["state"] == State.CRASHED}
    assert mutation_run.kills[mutant], f"{mutant} survived every spec; crashes (not kills): {crashes or 'none'}"
    print("\n".join(f"{spec}: {message}" for spec, message in sorted(mutation_run.kills[mutant].items())))


#: Specs that can only observe a refutation: every encoder their claim is about is declared to fail
#: them, so a defect cannot read FAIL there; a fixed encoder would read XPASS (a strict expected failure).
REFUTATION_ONLY = {
    "test_output_equals_formula_elementwise": "ROPE-13 is about 004 §3.2's code, whose [even, odd] output is "
                                              "not the formula element by element",
}


@pytest.mark.parametrize("spec", [s for s in SPEC_NAMES if s not in REFUTATION_ONLY])
def test_every_spec_kills_a_mutant(mutation_run, spec):
    victims = mutation_run.victims(spec)
    states = Counter(o["state"] for o in mutation_run.outcomes if o["spec"] == spec)
    crashes = sorted({o["message"] for o in mutation_run.outcomes if o["spec"] == spec and o["state"] == State.CRASHED})
    assert victims, f"{spec} killed no mutant; its outcomes on the mutants: {dict(states)}; crashes: {crashes[:3]}"


@pytest.mark.parametrize("claim", ROTARY_CLAIMS)
def test_every_rotary_claim_kills_a_mutant(mutation_run, claim):
    victims = sorted({o["encoder"] for o in mutation_run.outcomes if o["claim"] == claim and o["state"] == KILL})
    assert victims, f"no spec of {claim} killed a mutant"


# ------------------------------------------------------------------ the history check

HISTORY_MUTANT = "rope_rescales_its_cache_every_call"


def test_an_encoder_that_changes_on_every_call_is_blamed_once(mutation_run):
    """ROPE-9 fails once; every other violation its specs find reads ``depends on ROPE-9``."""
    cells = [o for o in mutation_run.outcomes if o["encoder"] == HISTORY_MUTANT]
    depends = {o["claim"] for o in cells if o["state"] == State.DEPENDS_ON_HISTORY}
    assert {o["claim"] for o in cells if o["state"] == KILL} == {"ROPE-9"}, _describe({o["state"]: o["message"] for o in cells})
    assert len(depends) >= 5 and "ROPE-9" not in depends, depends
    assert all(o["message"].startswith(f"{State.DEPENDS_ON_HISTORY}:") for o in cells
               if o["state"] == State.DEPENDS_ON_HISTORY)


#: Its cache is keyed by the call's length: a second call at other positions gets the first one's angles.
LENGTH_KEYED_MUTANT = "rope_cache_keyed_by_length"


def test_state_keyed_by_length_is_blamed_once(mutation_run):
    cells = [o for o in mutation_run.outcomes if o["encoder"] == LENGTH_KEYED_MUTANT]
    assert {o["claim"] for o in cells if o["state"] == KILL} == {"ROPE-9"}, _describe({o["state"]: o["message"] for o in cells})
    assert {"ROPE-4", "PATH-2"} <= {o["claim"] for o in cells if o["state"] == State.DEPENDS_ON_HISTORY}


def test_no_other_mutant_depends_on_history(mutation_run):
    """The history check stays silent on every encoder that is a function of its inputs."""
    dependent = {o["encoder"] for o in mutation_run.outcomes if o["state"] == State.DEPENDS_ON_HISTORY}
    assert dependent == {HISTORY_MUTANT, LENGTH_KEYED_MUTANT}, dependent
