"""Code the harness has never seen: production-style RoPEs raise no alarm, defective ones fail exactly
their claims, with reproducers, in a readable amount of output.

Two runs of ``pytest specs`` (default Hypothesis profile), each with one plug-in file of
``tests/plugins/``, as a user would plug in their own code:

* ``production_ropes.py``: default, PI, NTK, dynamic NTK, YaRN, Llama 3, xPos, partial rotary, each
  layout and each protocol, angles in fp32: no FAIL and no CRASH in any dtype;
* ``defective_ropes.py``: each defect is a FAIL on exactly the claims its ``EXPECTED_FAILURES`` names,
  each with a pytest command and a standalone Python script that raise it again, within about 40
  lines of output per encoder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import torch

import posenc
from posenc.harness.catalogue.states import State

pytestmark = pytest.mark.xdist_group("real_world_plugins")  # module fixtures run once, in one worker
ROOT = Path(__file__).resolve().parents[1]

PLUGINS = ROOT / "tests" / "plugins"
SURPRISES = {State.UNEXPECTEDLY_FAILING, State.CRASHED, State.FAILING_AND_CRASHED, State.TIMED_OUT, State.UNEXPECTEDLY_HOLDS, State.BLOCKED}
LINES_PER_ENCODER = 60  # each failure wrapped to the terminal, its rerun command on lines of its own


def _read(plugin: Path):
    """The records a plug-in file registers (collected, not registered here) and the file as a module."""
    collected = []
    spec = importlib.util.spec_from_file_location(f"plugin_{plugin.stem}", plugin)
    module = importlib.util.module_from_spec(spec)
    with mock.patch.object(posenc, "register", side_effect=collected.append):
        spec.loader.exec_module(module)
    return collected, module


def _run(plugin: Path, out: Path):
    records, module = _read(plugin)
    names = [r.name for r in records]
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--plugin",
               str(plugin.relative_to(ROOT)), "--encoders", ",".join(names), "--matrix-dir", str(out)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    verdicts = json.loads((out / "verdicts.json").read_text()) if (out / "verdicts.json").exists() else None
    assert verdicts is not None, result.stdout[-3000:] + result.stderr[-3000:]
    return names, module, verdicts, result, wall


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    return _run(PLUGINS / "production_ropes.py", tmp_path_factory.mktemp("production"))


@pytest.fixture(scope="module")
def defective(tmp_path_factory):
    return _run(PLUGINS / "defective_ropes.py", tmp_path_factory.mktemp("defective"))


def test_production_ropes_raise_no_alarm(production):
    names, _, verdicts, result, wall = production
    alarms = [f"{o['encoder']} {o['claim']} {o['spec']}: {o['state']}: {o['message'][:160]}"
              for o in verdicts["outcomes"] if o["state"] in SURPRISES]
    assert not alarms, "\n".join(alarms)
    assert result.returncode == 0, result.stdout[-3000:]
    assert set(names) == set(verdicts["header"]["encoders"]) and len(names) >= 12
    print(f"{len(names)} production-style encoders judged in {wall:.1f} s")


def test_production_ropes_cover_every_protocol_layout_and_schedule():
    records, _ = _read(PLUGINS / "production_ropes.py")
    assert {r.protocol for r in records} == {"single", "pair", "cos_sin"}
    assert {r.geometry.layout for r in records} == {"interleaved", "half_split", "concatenated"}
    names = {r.name for r in records}
    for wanted in ("default", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "xpos", "partial"):
        assert f"prod_{wanted}" in names
    assert all(r.geometry.angle_dtype == torch.float32 for r in records)  # as production code forms them


def test_each_defect_fails_exactly_its_claims(defective):
    names, module, verdicts, result, _ = defective
    assert result.returncode == 1, result.stdout[-3000:]
    for name in names:
        failing = {c for c, row in verdicts["matrix"].items() if row[name] == State.UNEXPECTEDLY_FAILING}
        assert failing == module.EXPECTED_FAILURES[name], (name, failing)
        others = {c: row[name] for c, row in verdicts["matrix"].items()
                  if row[name] in SURPRISES and row[name] != State.UNEXPECTEDLY_FAILING}
        assert not others, (name, others)


def test_every_failure_carries_a_command_and_a_standalone_script(defective, tmp_path):
    _, _, verdicts, _, _ = defective
    failures = [o for o in verdicts["outcomes"] if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert failures and all(o["reproducer"].startswith("pytest '") and "--plugin" in o["reproducer"] for o in failures)
    assert all(o["python"] for o in failures), [o["spec"] for o in failures if not o["python"]]
    first = next(o for o in failures if o["encoder"] == "bug_offset_in_input_dtype")
    script = tmp_path / "repro.py"
    script.write_text(first["python"])
    rerun = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True)
    assert rerun.returncode == 1 and "ClaimViolation" in rerun.stderr and "[PATH-1] bug_offset_in_input_dtype" \
        in rerun.stderr, rerun.stderr[-2000:]


def test_a_failing_run_prints_about_sixty_lines_per_encoder(defective):
    names, _, _, result, _ = defective
    lines = result.stdout.splitlines()
    assert len(lines) <= LINES_PER_ENCODER * len(names), f"{len(lines)} lines for {len(names)} encoders"
    summary = [line for line in lines if line.startswith(("FAIL ", "CRASH ", "F+CR "))]
    assert len(summary) == sum(len(claims) for claims in defective[1].EXPECTED_FAILURES.values()), summary


def test_an_offset_only_pair_library_is_reached_through_its_offset_path(tmp_path):
    """``module(q, k, offset=o)`` (``positions="offset"``, pair protocol): the correct one holds
    everywhere, the one whose keys start at 0 fails exactly the relative-offset claims."""
    names, module, verdicts, result, _ = _run(PLUGINS / "offset_pair.py", tmp_path)
    for name in names:
        failing = {c for c, row in verdicts["matrix"].items() if row[name] == State.UNEXPECTEDLY_FAILING}
        others = {c: row[name] for c, row in verdicts["matrix"].items()
                  if row[name] in SURPRISES and row[name] != State.UNEXPECTEDLY_FAILING}
        assert (failing, others) == (module.EXPECTED_FAILURES[name], {}), (name, result.stdout[-3000:])
