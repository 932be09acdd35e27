"""Benchmark histories: comparison of saved runs, and gates that fail only on real regressions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc.harness.performance import history

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("history")  # the saved runs below are built once, in one worker

PROBE = '''
import os
import torch
import posenc


class ProbeRoPE(posenc.RotaryEmbedding):
    """A correct RoPE that, when PROBE_EXTRA_FLOATS is set, also fills a scratch buffer per call."""

    def forward(self, x, positions=None, *, offset=0):
        extra = int(os.environ.get("PROBE_EXTRA_FLOATS", "0"))
        if extra:
            scratch = torch.ones(extra, device=x.device)
            x = x + scratch[:1] * 0
        return super().forward(x, positions, offset=offset)


posenc.register(posenc.EncoderRecord(
    name="probe_rope", kind="rotary", source="tests/test_history.py",
    build=lambda c: ProbeRoPE(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
    geometry=posenc.RotaryGeometry(), claims=posenc.rotary_claims()))
'''
ONE_BENCHMARK = ("-m", "perf", "-k", "(test_benchmark and b1 and not backward) or pass_the_gate", "--encoders", "probe_rope",
                 "--benchmark-min-rounds=5", "--benchmark-max-time=0.2")


def run_perf(tmp: Path, *args, extra_floats: int = 0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env["PROBE_EXTRA_FLOATS"] = str(extra_floats)
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               "--plugin", str(tmp / "probe_rope.py"), "--matrix-dir", str(tmp / "reports"),
               f"--benchmark-storage=file://{tmp / 'benchmarks'}", *ONE_BENCHMARK, *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def histories(tmp_path_factory):
    """Two saved runs of one benchmark; the second allocates 4 MiB more per call."""
    tmp = tmp_path_factory.mktemp("history")
    (tmp / "probe_rope.py").write_text(textwrap.dedent(PROBE))
    for extra in (0, 1 << 20):
        result = run_perf(tmp, "--benchmark-autosave", extra_floats=extra)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return tmp


@pytest.fixture
def compare(posenc_here):
    """``python -m posenc compare --storage DIR/benchmarks ARGS``, as ``compare(DIR, *ARGS)``."""
    return lambda tmp, *args: posenc_here("compare", "--storage", tmp / "benchmarks", *args)


def test_comparison_shows_the_memory_regression(histories, compare):
    shown = compare(histories, "1", "2")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("cpu fwd b1 probe_rope"))
    assert "+" in row and max(len(line) for line in shown.stdout.splitlines()) <= 160
    rows = json.loads(compare(histories, "1", "2", "--json").stdout)["rows"]
    (probe,) = rows
    assert probe["peak_after"] - probe["peak_before"] >= 4 * 2**20 * 0.99  # the 4 MiB scratch buffer
    assert probe["kernels_after"] > probe["kernels_before"]  # filling it and adding it are kernels too
    assert compare(histories, "1", "2", "--csv").stdout.splitlines()[0].startswith("benchmark,time_before")


def test_memory_gate_fails_with_one_line(histories, compare):
    gated = compare(histories, "1", "2", "--fail", "peak:5%")
    assert gated.returncode == 1
    line, verdict = gated.stderr.splitlines()
    assert line.startswith("REGRESSION cpu fwd b1 probe_rope: peak memory") and "gate peak:5%" in line
    assert verdict == "FAILED: 1 benchmark regression(s) beyond the gate peak:5%"  # the last line says so
    assert compare(histories, "2", "1", "--fail", "peak:5%").returncode == 0  # less memory is no regression


def entries(text: str, head: str) -> list[str]:
    """Each printed entry that starts with ``head``, its wrapped continuation lines joined to it."""
    found, open_entry = [], False
    for line in text.splitlines():
        if line.startswith(head):
            found.append(line)
            open_entry = True
        elif open_entry and line.startswith("    "):
            found[-1] += " " + line.strip()
        else:
            open_entry = False
    return found


def test_the_gate_inside_pytest_ends_on_a_failed_gate_test_with_one_entry_per_regression(histories):
    result = run_perf(histories, "--perf-compare", "1", "--perf-fail", "peak:5%,kernels:0", extra_floats=1 << 20)
    assert result.returncode == 1, result.stdout[-2000:]
    regressions = entries(result.stdout, "REGRESSION")
    assert len(regressions) == 1, regressions  # one entry for the one benchmark …
    assert "peak memory" in regressions[0] and "kernels" in regressions[0]  # … naming both metrics
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stdout.rstrip().splitlines()[-1].strip("= ")
    assert last.startswith("1 failed, 1 passed"), last  # the gate test, after the benchmark
    assert "test_benchmarks_pass_the_gate" in result.stdout and "1 benchmark regression(s) against saved run" in result.stdout
    clean = run_perf(histories, "--perf-compare", "1", "--perf-fail", "peak:5%,kernels:0")
    assert clean.returncode == 0, clean.stdout[-2000:]
    assert clean.stdout.rstrip().splitlines()[-1].strip("= ").startswith("2 passed")
    assert "test_benchmarks_pass_the_gate" not in run_perf(histories).stdout  # deselected without --perf-compare


def test_compare_warns_when_the_runs_differ_in_threads_torch_or_device(histories, tmp_path, compare):
    saved = sorted((histories / "benchmarks").glob("*/0002_*.json"))[0]
    other = tmp_path / "benchmarks" / saved.parent.name
    other.mkdir(parents=True)
    for path in sorted((histories / "benchmarks").glob("*/000[12]_*.json")):
        data = json.loads(path.read_text())
        if path.name.startswith("0002"):
            threads = data["machine_info"]["posenc"]["torch_threads"] + 1  # whatever the saved run had
            data["machine_info"]["posenc"].update(torch_threads=threads, torch="9.9.9")
        (other / path.name).write_text(json.dumps(data))
    shown = compare(tmp_path, "1", "2")
    warnings = [line for line in shown.stderr.splitlines() if line.startswith("warning: the runs differ in")]
    assert len(warnings) == 2 and any("torch threads" in w and f"→ {threads})" in w for w in warnings), shown.stderr
    assert any("torch version" in w and "9.9.9" in w for w in warnings)
    assert not [line for line in compare(histories, "1", "2").stderr.splitlines() if line.startswith("warning")]


def test_trend_over_saved_runs_goes_to_tensorboard(histories, compare, tmp_path):
    result = compare(histories, "--trend", str(tmp_path / "trend"))
    assert result.returncode == 0 and f"trend: {len(history.METRICS)} scalar tags" in result.stderr
    assert list((tmp_path / "trend").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("text, message", [
    ("peak:5%,kernels:0", None), ("peak:40MiB,time:1ms,best:2.5us,static:512B,xcopy:0.5", None),
    ("speed:5%", "METRIC one of time, peak"), ("peak", "METRIC:AMOUNT"),
    ("peak:40", "peak takes a percentage or an amount in B, KiB, MiB, GiB, e.g. peak:40B"),
    ("time:1", "time takes a percentage or an amount in s, ms"), ("kernels:3MiB", "kernels takes a percentage or"),
])
def test_gate_parsing(text, message):
    if message is None:
        assert [str(g) for g in history.parse_gate(text)] == text.split(",")
    else:
        with pytest.raises(ValueError, match=message):
            history.parse_gate(text)


def test_gate_amounts_are_read_in_their_units():
    peak, time, kernels = history.parse_gate("peak:40MiB,time:1ms,kernels:2")
    assert (peak.amount, time.amount, kernels.amount) == (40 * 2**20, 1e-3, 2)
    before, after = _run(peak=100 * 2**20, time=0.010), _run(peak=139 * 2**20, time=0.0109)
    assert history.regressions(before, after, [peak, time]) == []
    worse = history.regressions(before, _run(peak=141 * 2**20, time=0.0112), [peak, time])
    assert len(worse) == 1 and "gate peak:40MiB" in worse[0] and "gate time:1ms" in worse[0]


def _run(**metrics) -> history.Run:
    return history.Run(Path("x"), "1", "", "", {"cpu fwd b1 x": metrics})


def test_gates_judge_the_direction_of_each_metric():
    before = _run(time=1.0, peak=100.0, xcopy=0.5, kernels=4)
    assert history.regressions(before, _run(time=5.0, peak=100.0, xcopy=0.5, kernels=4),
                               history.parse_gate(history.DEFAULT_GATE)) == []  # raw time is not gated
    worse = history.regressions(before, _run(time=1.0, peak=106.0, xcopy=0.2, kernels=5),
                                history.parse_gate("peak:5%,xcopy:50%,kernels:0"))
    (line,) = worse
    assert sorted(r.split()[0] for r in line.split(": ", 1)[1].split(" | ")) == ["kernels", "peak", "×copy"]
    assert history.regressions(before, _run(time=1.0, peak=90.0, xcopy=0.9, kernels=3),
                               history.parse_gate("peak:0B,xcopy:0,kernels:0")) == []


def test_a_timing_gate_widens_with_the_runs_own_spread():
    gates = history.parse_gate("xcopy:50%")
    quiet = history.regressions(_run(xcopy=0.5, spread=0.01), _run(xcopy=0.2, spread=0.01), gates)
    noisy = history.regressions(_run(xcopy=0.5, spread=0.2), _run(xcopy=0.2, spread=0.2), gates)
    assert len(quiet) == 1 and noisy == []  # 60% worse: beyond 50%, within 2 × (0.2 + 0.2)
    assert history.regressions(_run(peak=100.0, spread=5.0), _run(peak=120.0, spread=5.0),
                               history.parse_gate("peak:5%")) != []  # memory never widens


def test_timing_gates_report_only_when_every_timing_metric_got_worse():
    gates = history.parse_gate("best:50%,xcopy:50%")
    noisy_copy = history.regressions(_run(best=1.0, xcopy=0.5), _run(best=1.05, xcopy=0.2), gates)
    slower = history.regressions(_run(best=1.0, xcopy=0.5), _run(best=2.1, xcopy=0.2), gates)
    assert noisy_copy == []  # the copy beside it was noisy, the call itself was not slower
    assert len(slower) == 1 and "gate best:50%" in slower[0] and "gate xcopy:50%" in slower[0]


@pytest.mark.parametrize("factor, alarms", [(1.2, 0), (1.5, 1), (2.0, 1)])
def test_the_default_gate_catches_a_call_that_became_one_and_a_half_times_slower(factor, alarms):
    gates = history.parse_gate(history.DEFAULT_GATE)
    before = _run(best=1.0, xcopy=0.4, spread=0.02)
    after = _run(best=1.0 * factor, xcopy=0.4 / factor, spread=0.02)
    assert len(history.regressions(before, after, gates)) == alarms
