"""Fault injection: the run around the specs stays truthful when things go wrong.

Each case runs ``pytest specs`` in a subprocess with a small faulty plug-in written to a temporary
directory, and asserts the exact outcome: the exit code, the report's status and cells, and the
message naming the option or limit. The library's own refusals are checked in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import posenc
from posenc.encoders import fused
from posenc.harness.catalogue.states import State
from tests.spec_runs import interruptible

ROOT = Path(__file__).resolve().parents[1]
#: A correct interleaved RoPE a fault is injected into; ``fault(x)`` runs first in every call.
RECORD_TEMPLATE = '''
import os, signal, time
import torch
import posenc


class FaultyRoPE(posenc.RotaryEmbedding):
    calls = 0

    def forward(self, x, positions=None, *, offset=0):
        FaultyRoPE.calls += 1
{fault}
        return super().forward(x, positions, offset=offset)


posenc.register(posenc.EncoderRecord(
    name="{name}",
    build=lambda c: FaultyRoPE(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
    kind="rotary",
    source="tests/test_faults.py",
    geometry=posenc.RotaryGeometry(layout="interleaved"),
    claims=posenc.rotary_claims(),
))
'''


def plugin(tmp_path: Path, name: str, fault: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(RECORD_TEMPLATE.format(name=name, fault=textwrap.indent(textwrap.dedent(fault), " " * 8)))
    return path


def spec_environment(env: dict | None = None) -> dict:
    """This environment without the user's POSENC_* variables, with pinned examples only, then ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    return {**environment, "POSENC_HYPOTHESIS_PROFILE": "explicit", **(env or {})}


def run_specs(*args, matrix_dir: Path | None, env: dict | None = None, timeout: float = 600,
              background: bool = False):
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--tb=line", *map(str, args)]
    if matrix_dir is not None:
        command += ["--matrix-dir", str(matrix_dir)]
    environment = spec_environment(env)
    if background:
        return subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=interruptible)
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=interruptible)


def report(path: Path) -> dict:
    return json.loads(path.read_text())


def run_report(matrix_dir: Path) -> dict:
    """The newest run's own report, through the ``LATEST`` pointer."""
    run_id = (matrix_dir / "LATEST").read_text().strip()
    return report(matrix_dir / "runs" / run_id / "verdicts.json")


QUICK = ("-k", "norm or relative_offset or contract")


# ---------------------------------------------------------------- reports never lie

@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_says_so_and_keeps_the_last_complete_report(tmp_path, signal_name):
    reports = tmp_path / "reports"
    complete = run_specs("--encoders", "rope_interleaved", *QUICK, matrix_dir=reports)
    assert complete.returncode == 0, complete.stdout[-2000:]
    published = report(reports / "verdicts.json")
    assert published["header"]["status"] == "complete"

    interrupter = plugin(tmp_path, "interrupting_rope", f"""
        if FaultyRoPE.calls == 40:
            os.kill(os.getpid(), signal.{signal_name})
            time.sleep(5)
    """)
    interrupted = run_specs("--plugin", interrupter, "--encoders", "rope_interleaved,interrupting_rope", *QUICK,
                            matrix_dir=reports)
    assert interrupted.returncode == 2, interrupted.stdout[-2000:]
    own = run_report(reports)
    assert own["header"]["status"] == "interrupted"
    assert own["header"]["run_id"] != published["header"]["run_id"]
    cut_short = {row["interrupting_rope"] for row in own["matrix"].values()}
    assert cut_short & {State.HOLDS_PARTIAL, State.NOT_RUN}, cut_short  # cells whose specs did not all run
    assert report(reports / "verdicts.json") == published  # the complete report is untouched
    assert "run interrupted" in interrupted.stdout


def test_a_cell_whose_specs_did_not_all_run_is_partial(tmp_path):
    result = run_specs("--encoders", "rope_interleaved", "-k", "norm or relative_offset or length_limits",
                       matrix_dir=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    matrix = report(tmp_path / "verdicts.json")["matrix"]
    assert matrix["ROPE-3"]["rope_interleaved"] == State.HOLDS_PARTIAL  # its orthogonality spec was deselected
    assert matrix["contract"]["rope_interleaved"] == State.NOT_RUN
    assert "ok*" in result.stdout


def test_a_partial_selection_never_replaces_a_full_report(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    full = {"header": {"status": "complete", "selection": "full", "started": "2000-01-01T00:00:00+0000",
                       "run_id": "full-run"}, "matrix": {}, "outcomes": []}
    (reports / "verdicts.json").write_text(json.dumps(full))
    result = run_specs("--encoders", "rope_interleaved", "-k", "norm", matrix_dir=reports)
    assert result.returncode == 0, result.stdout[-2000:]
    assert report(reports / "verdicts.json") == full
    own = run_report(reports)["header"]
    assert own["status"] == "complete" and own["selection"] == "partial selection (-k 'norm', --encoders)"
    assert "keeps the last full run" in " ".join(result.stdout.split())  # the note may wrap


# ---------------------------------------------------------------- timeouts and isolation

def test_a_hang_in_a_generated_example_times_out_too(tmp_path):
    """Hypothesis retries and shrinks ordinary failures; the timeout must not be one of them."""
    hanging = plugin(tmp_path, "late_hanging_rope", "if FaultyRoPE.calls > 6:\n    time.sleep(3600)")
    start = time.monotonic()
    result = run_specs("--plugin", hanging, "--encoders", "late_hanging_rope", "--timeout", "3",
                       "-k", "test_rotation_preserves_norm", matrix_dir=tmp_path / "reports",
                       env={"POSENC_HYPOTHESIS_PROFILE": "ci"})
    assert time.monotonic() - start < 120, result.stdout[-2000:]
    states = {o["state"] for o in run_report(tmp_path / "reports")["outcomes"]}
    assert State.TIMED_OUT in states and states <= {State.TIMED_OUT, State.BLOCKED, State.HOLDS}, states


def test_the_users_timeout_beats_a_timeout_marker(tmp_path):
    """A marker's longer timeout (the project's own subprocess tests carry some) never overrides
    the user's ``--timeout``: a slow run is the user's to allow or to stop."""
    (tmp_path / "conftest.py").write_text('from hypothesis import settings\n\npytest_plugins = ["posenc.harness.pytest_plugin"]\n'
                                          'settings.register_profile("dev", deadline=None)\n')
    spec = tmp_path / "test_marked.py"
    spec.write_text("import time\nimport pytest\n\n\n@pytest.mark.timeout(600)\ndef test_sleeps():\n"
                    "    time.sleep(30)\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", str(spec), "-q", "-p", "no:cacheprovider", "--timeout", "2",
                           "--matrix-dir", str(tmp_path / "reports")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert time.monotonic() - start < 25 and done.returncode == 1, done.stdout[-2000:]
    assert "timeout: no result after 2 s" in done.stdout, done.stdout[-2000:]


def test_a_hanging_encoder_times_out_and_the_run_goes_on(tmp_path):
    hanging = plugin(tmp_path, "hanging_rope", "time.sleep(3600)")
    start = time.monotonic()
    result = run_specs("--plugin", hanging, "--encoders", "rope_interleaved,hanging_rope", "--timeout", "3",
                       *QUICK, matrix_dir=tmp_path / "reports")
    assert time.monotonic() - start < 120
    assert result.returncode == 1
    data = report(tmp_path / "reports" / "verdicts.json")
    row = {claim: cells["hanging_rope"] for claim, cells in data["matrix"].items()}
    judged = [state for state in row.values() if state not in (State.NA, State.NOT_RUN)]
    assert judged.count(State.TIMED_OUT) == 1 and set(judged) == {State.TIMED_OUT, State.BLOCKED}, row  # the rest are skipped
    timed_out = [o for o in data["outcomes"] if o["state"] == State.TIMED_OUT]
    assert len(timed_out) == 1 and timed_out[0]["message"] == "timeout: no result after 3 s"
    assert {cells["rope_interleaved"] for cells in data["matrix"].values()} <= {State.HOLDS, State.HOLDS_PARTIAL, State.NA,
                                                                               State.NOT_RUN}


def test_a_grad_mode_leak_is_restored_and_blamed_on_its_encoder(tmp_path):
    leaky = plugin(tmp_path, "leaky_rope", """
        torch.set_grad_enabled(False)
        raise RuntimeError("leaky forward")
    """)
    result = run_specs("--plugin", leaky, "--encoders", "learnable,rope_interleaved,leaky_rope",
                       "-k", "learnable_adds or gradcheck or backward_is_the_inverse or rotation_matches",
                       matrix_dir=tmp_path)
    data = report(tmp_path / "verdicts.json")
    assert data["matrix"]["ABS-1"]["learnable"] == State.HOLDS
    assert data["matrix"]["ROPE-1"]["rope_interleaved"] in (State.HOLDS, State.HOLDS_PARTIAL)
    assert data["matrix"]["contract"]["rope_interleaved"] in (State.HOLDS, State.HOLDS_PARTIAL)
    crashes = [o["message"] for o in data["outcomes"] if o["encoder"] == "leaky_rope"]
    assert crashes and all(m.startswith(("RuntimeError: leaky forward", "GlobalStateLeak")) for m in crashes)
    # specs that call it with autograd on (gradcheck, backward) see the leak; no_grad blocks restore it themselves
    assert "GlobalStateLeak: leaky_rope left torch's global state changed: grad mode True → False " \
           "(restored for the next spec)" in crashes, crashes
    assert result.returncode == 1


def test_a_wrong_shape_encoder_is_blocked_by_the_contract_not_judged(tmp_path):
    narrow = tmp_path / "narrow_rope.py"
    narrow.write_text(textwrap.dedent('''
        import posenc

        class NarrowRoPE(posenc.RotaryEmbedding):
            def forward(self, x, positions=None, *, offset=0):
                return super().forward(x, positions, offset=offset)[..., :-2]

        posenc.register(posenc.EncoderRecord(
            name="narrow_rope", kind="rotary", source="drops 2 of 16 features",
            build=lambda c: NarrowRoPE(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
            geometry=posenc.RotaryGeometry(), claims=posenc.rotary_claims()))
    '''))
    result = run_specs("--plugin", narrow, "--encoders", "narrow_rope", "-k", "not rotations_compose",
                       matrix_dir=tmp_path / "reports")
    data = report(tmp_path / "reports" / "verdicts.json")
    row = {claim: cells["narrow_rope"] for claim, cells in data["matrix"].items()}
    assert row["contract"] == State.UNEXPECTEDLY_FAILING
    assert row["ROPE-4"] == State.BLOCKED and row["ATT-4"] == State.BLOCKED
    judged = {state for claim, state in row.items() if claim != "contract"} - {State.NA, State.NOT_RUN}
    assert judged == {State.BLOCKED}, row
    blocked = [o for o in data["outcomes"] if o["state"] == State.BLOCKED]
    assert all(o["message"] == "blocked by the contract: narrow_rope maps shape (2, 5, 4, 16) to (2, 5, 4, 14); "
                               "the output must keep the input's shape" for o in blocked)
    assert result.returncode == 1


GARBAGE_ROPES = '''
import torch
import posenc


class AllNaN(posenc.RotaryEmbedding):
    def forward(self, x, positions=None, *, offset=0):
        return torch.full_like(super().forward(x, positions, offset=offset), float("nan"))


class NaNPast(posenc.RotaryEmbedding):
    """NaN at every position past 40 (of a 128-position call, say)."""

    def forward(self, x, positions=None, *, offset=0):
        y = super().forward(x, positions, offset=offset)
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device) + offset
        far = (positions > 40).reshape(*positions.shape, *([1] * (y.dim() - 2)))  # over (batch,) seq
        return torch.where(far, float("nan"), y)


class Raises(posenc.RotaryEmbedding):
    def forward(self, x, positions=None, *, offset=0):
        raise RuntimeError("this encoder never answers")


for name, module in (("all_nan_rope", AllNaN), ("nan_past_40_rope", NaNPast), ("raising_rope", Raises)):
    posenc.register(posenc.EncoderRecord(
        name=name, kind="rotary", source="tests/test_faults.py",
        build=lambda c, module=module: module(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
        geometry=posenc.RotaryGeometry(layout="interleaved"), claims=posenc.rotary_claims()))
'''


@pytest.fixture(scope="module")
def garbage_run(tmp_path_factory):
    """The default specs on an encoder that answers all NaN, one that answers NaN past position 40,
    and one that raises on every call: ``(result, report)``."""
    directory = tmp_path_factory.mktemp("garbage")
    (directory / "garbage_ropes.py").write_text(GARBAGE_ROPES)
    result = run_specs("--plugin", directory / "garbage_ropes.py",
                       "--encoders", "all_nan_rope,nan_past_40_rope,raising_rope", matrix_dir=directory / "reports")
    return result, report(directory / "reports" / "verdicts.json")


def _row(data, encoder):
    return {claim: cells[encoder] for claim, cells in data["matrix"].items()}


def test_an_all_nan_encoder_fails_the_contract_and_blocks_every_other_claim(garbage_run):
    result, data = garbage_run
    row = _row(data, "all_nan_rope")
    assert row["contract"] == State.UNEXPECTEDLY_FAILING, row
    judged = {state for claim, state in row.items() if claim != "contract"} - {State.NA, State.NOT_RUN}
    assert judged == {State.BLOCKED}, row  # never holds, never "depends on ROPE-9"
    blocked = {o["message"] for o in data["outcomes"] if o["encoder"] == "all_nan_rope" and o["state"] == State.BLOCKED}
    assert blocked == {"blocked by the contract: all_nan_rope answers finite input with non-finite values (640 of "
                       "640 entries: 640 NaN, 0 inf); the contract's finiteness fails first, and no other claim is "
                       "judged on them"}, blocked
    assert result.returncode == 1 and "no surprise" not in result.stdout


def test_nan_past_a_position_fails_the_contract_and_the_claims_that_read_it(garbage_run):
    _, data = garbage_run
    row = _row(data, "nan_past_40_rope")
    assert row["contract"] == State.UNEXPECTEDLY_FAILING, row
    contract = [o["message"] for o in data["outcomes"]
                if o["encoder"] == "nan_past_40_rope" and o["claim"] == "contract" and o["state"] != State.HOLDS]
    assert any("non-finite output in a call of length 128, from position 41" in m for m in contract), contract
    assert State.DEPENDS_ON_HISTORY not in row.values(), row
    assert row["ROPE-10a"] == State.UNEXPECTEDLY_FAILING, row  # its far positions read the NaN


def test_an_encoder_that_raises_on_every_call_holds_nothing(garbage_run):
    _, data = garbage_run
    row = _row(data, "raising_rope")
    del row["ROPE-5"]  # "no trainable parameters" is read off the module, which builds: it holds
    assert State.HOLDS not in row.values() and State.HOLDS_PARTIAL not in row.values(), row
    assert row["ROPE-11"] == State.UNEXPECTEDLY_FAILING, row  # both dtypes raise: not precision's excuse
    assert State.DEPENDS_ON_HISTORY not in row.values(), row


# ---------------------------------------------------------------- start-up errors

BROKEN_PLUGINS = {
    "syntax_error.py": ("def broken(:\n", "syntax_error.py:1: SyntaxError"),
    "raises_on_import.py": ("import posenc\n\nraise RuntimeError('no weights here')\n",
                            "raises_on_import.py:3: RuntimeError: no weights here"),
    "duplicate_name.py": ("import posenc\n\nposenc.register(posenc.get('rope_interleaved'))\n",
                          "duplicate_name.py:3: ValueError: an encoder named 'rope_interleaved' is already registered"),
    "exits.py": ("import sys\n\nsys.exit(0)\n", "exits.py:3: SystemExit: sys.exit(0) at import; a plug-in file "
                 "should only define and register encoders"),
    "exits_hard.py": ("import os\n\nos._exit(1)\n", "exits_hard.py:3: ExitAtImport: os._exit(1) at import; a "
                      "plug-in file should only define and register encoders"),
    "interrupts.py": ("raise KeyboardInterrupt\n", "interrupts.py:1: KeyboardInterrupt: KeyboardInterrupt raised at "
                      "import; a plug-in file should only define and register encoders"),
    "undeclared_claims.py": ("import posenc, torch\n\nposenc.register(posenc.EncoderRecord(name='x', build=None, "
                             "kind='rotary', source='', claims={}))\n",
                             "undeclared_claims.py:3: ValueError: encoder 'x' leaves claims undeclared: ABS-1"),
}


BAD_STARTS = [
    (("--encoders", "nosuch"), {}, "ERROR: --encoders: no encoder matches nosuch; registered: learnable"),
    (("--encoders", ","), {}, "ERROR: --encoders ',' names no encoder"),
    (("--device", "tpu"), {}, "ERROR: --device: unknown device 'tpu'; allowed: cpu, cuda"),
    ((), {"POSENC_DEVICE": "gpu"}, "ERROR: POSENC_DEVICE: unknown device 'gpu'; allowed: cpu, cuda"),
    ((), {"POSENC_PERF_DEVICES": "junk"}, "ERROR: POSENC_PERF_DEVICES: 'junk' is not a list of devices"),
    ((), {"POSENC_PERF_THREADS": "abc"}, "ERROR: POSENC_PERF_THREADS: 'abc' is not a thread count"),
    ((), {"POSENC_PERF_THREADS": "100000"}, "ERROR: POSENC_PERF_THREADS: 100000 threads exceeds the limit of"),
    ((), {"POSENC_MATRIX_DIR": ""}, "ERROR: POSENC_MATRIX_DIR: empty"),
    (("--hypothesis-profile", "nosuch"), {}, "ERROR: --hypothesis-profile: unknown Hypothesis profile 'nosuch'"),
    ((), {"POSENC_HYPOTHESIS_PROFILE": "nosuch"}, "ERROR: POSENC_HYPOTHESIS_PROFILE: unknown Hypothesis profile"),
    ((), {"POSENC_FUSED_STRICT": "maybe"}, "ERROR: POSENC_FUSED_STRICT: 'maybe'; allowed: 1, true, yes, on"),
    ((), {"POSENC_ENCODER": "learnable"}, "ERROR: unknown environment variable POSENC_ENCODER"),
    (("--plugin", "missing.py"), {}, "missing.py: file not found"),
]


@pytest.fixture(scope="module")
def start_ups(tmp_path_factory):
    """Every start-up error below, each ``pytest specs … --collect-only`` of its own, in one process
    (``tests/start_ups.py``): the directory they wrote to, and each case's (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("start_ups")
    cases = {}
    for i, (args, env, _) in enumerate(BAD_STARTS):
        matrix = [] if "POSENC_MATRIX_DIR" in env else ["--matrix-dir", str(root / f"bad-{i}")]
        cases[f"bad-{i}"] = [[*args, "--collect-only", *matrix], env]
    for name, (source, _) in BROKEN_PLUGINS.items():
        (root / name).write_text(source)
        cases[name] = [["--plugin", str(root / name), "--collect-only", "--matrix-dir", str(root / "reports")], {}]
    (root / "a-file").write_text("")
    cases["unwritable"] = [["--collect-only", "--matrix-dir", str(root / "a-file" / "reports")], {}]
    (root / "cases.json").write_text(json.dumps(cases))
    done = subprocess.run([sys.executable, "-m", "tests.start_ups", str(root / "cases.json"), str(root / "results.json")],
                          cwd=ROOT, env=spec_environment(), capture_output=True, text=True, preexec_fn=interruptible)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((root / "results.json").read_text())
    return root, {name: subprocess.CompletedProcess(cases[name][0], *found) for name, found in results.items()}


@pytest.mark.parametrize("case", range(len(BAD_STARTS)), ids=lambda i: str(BAD_STARTS[i][:2])[:40])
def test_a_bad_option_or_variable_stops_the_run_with_one_line(start_ups, case):
    message = BAD_STARTS[case][2]
    result = start_ups[1][f"bad-{case}"]
    assert result.returncode == 4, result.stdout[-1500:] + result.stderr[-1500:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    said = " ".join(result.stderr[result.stderr.find("ERROR:"):].split())  # wrapped to the terminal
    assert len(errors) == 1 and message in said, result.stderr[-1500:]
    assert "INTERNALERROR" not in result.stderr + result.stdout and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", BROKEN_PLUGINS)
def test_a_broken_plugin_is_named_with_file_line_and_error(start_ups, name):
    root, results = start_ups
    _, message = BROKEN_PLUGINS[name]
    result = results[name]
    assert result.returncode == 4, result.stdout[-1500:] + result.stderr[-1500:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    said = " ".join(result.stderr[result.stderr.find("ERROR:"):].split())  # wrapped to the terminal
    assert len(errors) == 1 and f"plug-in {root / name.split('.')[0]}" in said and message in said, \
        result.stderr[-1500:]
    assert "INTERNALERROR" not in result.stderr + result.stdout


def test_an_unwritable_report_directory_is_refused_before_any_spec_runs(start_ups):
    root, results = start_ups
    result = results["unwritable"]
    assert result.returncode == 4
    assert f"ERROR: --matrix-dir: cannot write reports to '{root / 'a-file' / 'reports'}'" in \
        " ".join(result.stderr.split())


def test_start_ups_in_one_process_give_what_a_process_each_gives(start_ups, tmp_path):
    """The shared process is faithful: one case run on its own prints the same error."""
    run_alone = run_specs(*BAD_STARTS[0][0], "--collect-only", matrix_dir=tmp_path)
    shared = start_ups[1]["bad-0"]
    assert (run_alone.returncode, run_alone.stderr) == (shared.returncode, shared.stderr)


# ---------------------------------------------------------------- two runs, one directory

def test_two_concurrent_runs_keep_their_own_reports_and_warn(tmp_path):
    reports, release = tmp_path / "reports", tmp_path / "release"
    waiting = plugin(tmp_path, "waiting_rope", f"""
        deadline = time.monotonic() + 120
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.05)
    """)
    first = run_specs("--plugin", waiting, "--encoders", "waiting_rope", *QUICK, matrix_dir=reports, background=True)
    try:
        deadline = time.monotonic() + 60
        while not (reports / ".active").exists() or not any((reports / ".active").iterdir()):
            assert time.monotonic() < deadline and first.poll() is None, "the first run never started"
            time.sleep(0.1)
        second = run_specs("--encoders", "rope_interleaved", *QUICK, matrix_dir=reports)
    finally:
        release.write_text("go")
        first_out, _ = first.communicate(timeout=300)
    assert second.returncode == 0 and first.returncode == 0, second.stdout[-1500:] + first_out[-1500:]
    assert "WARNING another run is writing to" in second.stdout
    assert "WARNING another run began writing to" in " ".join(first_out.split())  # the first learns of it too
    runs = sorted((reports / "runs").iterdir())
    assert len(runs) == 2
    statuses = [report(r / "verdicts.json")["header"] for r in runs]
    assert [h["status"] for h in statuses] == ["complete", "complete"]
    first_header, second_header = sorted(statuses, key=lambda h: h["started"])
    assert first_header["concurrent_runs"] == [second_header["run_id"]]
    assert second_header["concurrent_runs"] == [first_header["run_id"]]
    later = max(statuses, key=lambda h: h["started"])
    assert report(reports / "verdicts.json")["header"]["run_id"] == later["run_id"]  # the later start wins
    assert "holds a run that started later" in " ".join(first_out.split())  # the note may wrap


# ---------------------------------------------------------------- the library refuses what it cannot compute

def _raises(call, error, *words):
    with pytest.raises(error) as caught:
        call()
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_positions_past_the_exact_range_of_the_angle_dtype_are_refused():
    rope, x = posenc.RotaryEmbedding(8), torch.randn(1, 2, 1, 8)
    _raises(lambda: rope(x, torch.tensor([0, 10**9])), ValueError, "positions must be at most 16777216",
            "torch.float32 angles")
    rope(x.double(), torch.tensor([0, 10**9]))  # float64 angles form 1e9 exactly
    _raises(lambda: rope(x, torch.tensor([0.0, 1e19])), ValueError, "positions must be at most")
    _raises(lambda: posenc.LearnablePositionalEmbedding(8, 16)(torch.randn(1, 2, 16), torch.tensor([0.0, 1e19])),
            ValueError, "positions must be at most 9007199254740992")
    _raises(lambda: rope(x, offset=2**63 - 1), ValueError, "offset=9223372036854775807")


@pytest.mark.parametrize("base", [1e-300, float("inf"), float("nan"), 1.0, -10.0])
def test_a_base_outside_one_to_infinity_is_refused(base):
    _raises(lambda: posenc.RotaryEmbedding(8, base=base), ValueError, "base must be a finite number greater than 1")
    _raises(lambda: posenc.SinusoidalPositionalEncoding(8, base=base), ValueError, "base")


@pytest.mark.parametrize("options, words", [
    ({"initial_scale": -1.0}, ("initial_scale", "-1.0")),
    ({"initial_scale": float("nan")}, ("initial_scale", "nan")),
    ({"mix": (1.0,)}, ("mix must be two", "(1.0,)")),
    ({"mix": (0.7, float("inf"))}, ("mix must be two",)),
])
def test_the_dynamic_encoding_refuses_bad_scales_and_mixes_at_construction(options, words):
    _raises(lambda: posenc.DynamicPositionalEncoding(8, **options), ValueError, *words)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_attention_names_a_dtype_mismatch(dtype):
    for module in (posenc.RoPEAttention(16, 2), posenc.LinearAttentionRoPE(16, 2)):
        _raises(lambda module=module: module(torch.randn(1, 3, 16, dtype=dtype)), TypeError, f"input has dtype {dtype}",
                "torch.float32")


def test_fused_strict_flag_is_read_as_a_boolean(monkeypatch):
    def broken(*args):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(fused, "_kernel", lambda *a: broken)
    x = torch.randn(1, 4, 2, 8)
    for value in ("0", "false", "off", ""):
        monkeypatch.setenv("POSENC_FUSED_STRICT", value)
        with pytest.warns(RuntimeWarning, match="torch.compile failed"):
            fused.CompiledRotaryEmbedding(8)(x)
    monkeypatch.setenv("POSENC_FUSED_STRICT", "yes")
    _raises(lambda: fused.CompiledRotaryEmbedding(8)(x), RuntimeError, "no C++ compiler")
    monkeypatch.setenv("POSENC_FUSED_STRICT", "maybe")
    _raises(lambda: fused.CompiledRotaryEmbedding(8)(x), ValueError, "POSENC_FUSED_STRICT must be one of")


@pytest.mark.parametrize(("source", "said"), [
    ("N = 3\n", "N is not a model (type int); give a model class, a factory that returns a torch.nn.Module"),
    ("def N():\n    return 5\n", "N() returned type int, not a torch.nn.Module"),
])
def test_a_model_name_that_is_no_model_is_refused_with_what_it_is(tmp_path, source, said):
    (tmp_path / "not_a_model.py").write_text(source)
    result = run_specs("--model", f"{tmp_path / 'not_a_model.py'}:N", "--collect-only", matrix_dir=tmp_path / "r")
    assert result.returncode == 4, result.stderr[-1500:]
    assert said in " ".join(result.stderr.split()) and "Traceback" not in result.stderr, result.stderr[-1500:]
