"""User plug-ins, loaded from files outside the project, are judged like the built-ins.

One run of ``pytest specs`` with two plug-ins (copied to a temporary directory):

* a RoPE with a 64-position table and the identity beyond it fails ROPE-1 and ROPE-4, not ROPE-9;
* a RoPE forming angles in bf16 whatever its input fails ROPE-10a at a named position, and not
  ROPE-11: float32 input errs as much, so half precision is not what is broken;
* every built-in encoder's verdicts stay as declared.

The run uses the ``explicit`` Hypothesis profile (pinned ``@example`` cases only), so it also
proves that every declared refutation is observed deterministically by a pinned counterexample.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import posenc
from posenc.harness.catalogue.claims import CLAIMS
from posenc.harness.catalogue.spec_index import spec_functions
from posenc.harness.catalogue.states import State
from tests.spec_runs import WORKERS

pytestmark = pytest.mark.xdist_group("plugin_acceptance")  # its module fixture runs once, in one worker
ROOT = Path(__file__).resolve().parents[1]

#: The spec run in two processes where there are two CPUs: -n gives the serial run's matrix (tests/test_parallel.py).
PLUGINS = ROOT / "tests" / "plugins"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    user_dir = tmp_path_factory.mktemp("user")
    files = [shutil.copy(PLUGINS / name, user_dir / name) for name in ("table64_rope.py", "bf16_angle_rope.py")]
    matrix_dir = user_dir / "reports"
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--matrix-dir", str(matrix_dir),
               *WORKERS]
    for path in files:
        command += ["--plugin", str(path)]
    env = {**os.environ, "POSENC_HYPOTHESIS_PROFILE": "explicit"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # the plug-ins fail
    return json.loads((matrix_dir / "verdicts.json").read_text()), result.stdout


def _failing(verdicts, encoder):
    return {c for c, row in verdicts["matrix"].items() if row[encoder] == State.UNEXPECTEDLY_FAILING}


def test_table_limited_rope_fails_the_rotation_and_relative_offset_not_caching(verdicts):
    """Past its 64 rows the map is the identity: not R_p (ROPE-1) and not relative (ROPE-4). A fresh
    module is as wrong as a used one, so ROPE-9 (fresh against used) holds: blame goes to the value."""
    data, _ = verdicts
    failing = _failing(data, "user_rope_table64")
    assert {"ROPE-1", "ROPE-4"} <= failing and "ROPE-9" not in failing, failing
    crashed = [c for c, row in data["matrix"].items() if row["user_rope_table64"] == State.CRASHED]
    assert not crashed, crashed


def test_bf16_angle_rope_fails_far_positions_not_half_precision(verdicts):
    data, _ = verdicts
    failing = _failing(data, "user_rope_bf16_angles")
    assert "ROPE-10a" in failing and "ROPE-11" not in failing, failing
    messages = [o["message"] for o in data["outcomes"]
                if o["encoder"] == "user_rope_bf16_angles" and o["claim"] == "ROPE-10a" and o["state"] != State.HOLDS]
    assert messages and all("at position " in m for m in messages), messages


def test_builtin_verdicts_are_unchanged(verdicts):
    data, _ = verdicts
    specs = spec_functions()
    run_by_default = {s.claim for s in specs if not {"perf", "slow"} & set(s.markers)}
    deselected_by_default = {s.claim for s in specs if {"perf", "slow"} & set(s.markers)}
    deselected_specs = {s.name for s in specs if {"perf", "slow"} & set(s.markers)}
    for record in posenc.records():
        if record.origin != "built-in":
            continue
        for claim in CLAIMS:
            declared = record.declared(claim).status
            observed = data["matrix"][claim][record.name]
            expected = declared if claim in run_by_default or declared == State.NA else State.NOT_RUN
            aimed = set(record.declared(claim).specs)
            if expected == State.REFUTED and aimed and aimed <= deselected_specs:
                expected = State.HOLDS  # refuted by a -m slow spec only; the default specs hold
            if expected == State.HOLDS and claim in deselected_by_default:
                expected = State.HOLDS_PARTIAL  # the claim's -m perf or -m slow specs did not run
            assert observed == expected, (record.name, claim, observed, declared)


def test_plugins_are_named_in_the_header(verdicts):
    data, _ = verdicts
    assert any(p.endswith("bf16_angle_rope.py") for p in data["header"]["plugins"])
    assert "user_rope_table64" in data["header"]["encoders"]
