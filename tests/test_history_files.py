"""Saved runs that cannot be compared are refused, never trusted: ``compare`` names the file and exits
with its own code, and ``--perf-compare`` stops the run at start-up, before any benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.harness.performance import history
from tests.spec_runs import interruptible

ROOT = Path(__file__).resolve().parents[1]
#: One benchmark as pytest-benchmark saves it, with the harness's measurements in extra_info.
BENCHMARK = {"name": "test_benchmark[b1-forward-cpu-rope_interleaved]", "group": None,
             "stats": {"min": 0.001, "median": 0.0011, "iqr": 0.0001, "rounds": 5},
             "extra_info": {"device": "cpu", "mode": "forward", "batch": 1, "encoder": "rope_interleaved",
                            "peak_bytes": 4096, "static_bytes": 0, "roofline_ratio": 0.5, "kernel_count": 7}}
#: (file text, what the one-line refusal says) for each way a saved run can be unusable.
BAD_RUNS = {
    "empty run": (json.dumps({"benchmarks": [], "datetime": "2024-01-01"}), "the run holds no benchmarks"),
    "no benchmarks list": (json.dumps({"results": [BENCHMARK]}), "not a pytest-benchmark save: no 'benchmarks' list"),
    "not an object": (json.dumps([BENCHMARK]), "not a pytest-benchmark save: the JSON is a list"),
    "entry without a name": (json.dumps({"benchmarks": [{"stats": {"median": 1.0}}]}), "benchmark 0 has no 'name'"),
    "entry without stats": (json.dumps({"benchmarks": [{"name": "x"}]}), "benchmark 0 (x) has no 'stats'"),
    "stats not numbers": (json.dumps({"benchmarks": [{**BENCHMARK, "stats": {"median": "fast"}}]}),
                          "stats.median is 'fast', not a number"),
    "malformed JSON": ('{\n  "benchmarks": [\n    {"name": "x",}\n', "not valid JSON: Expecting property name "
                       "enclosed in double quotes at line 3 column 18"),
    "a NaN median": (json.dumps({"benchmarks": [{**BENCHMARK, "stats": {**BENCHMARK["stats"], "median": float("nan")}}]}),
                     "stats.median is nan: a time must be finite and positive"),
    "a zero median": (json.dumps({"benchmarks": [{**BENCHMARK, "stats": {**BENCHMARK["stats"], "median": 0.0}}]}),
                      "stats.median is 0.0: a time must be finite and positive"),
    "a negative minimum": (json.dumps({"benchmarks": [{**BENCHMARK, "stats": {**BENCHMARK["stats"], "min": -1.0}}]}),
                           "stats.min is -1.0: a time must be finite and positive"),
    "an infinite median": ('{"benchmarks": [{"name": "x", "stats": {"median": 1e400}}]}',
                           "stats.median is inf: a time must be finite and positive"),
    "a median past a float's range": ('{"benchmarks": [{"name": "x", "stats": {"median": 1' + "0" * 400 + '}}]}',
                                      "stats.median is 1000"),
    "a NaN peak": (json.dumps({"benchmarks": [{**BENCHMARK, "extra_info": {**BENCHMARK["extra_info"],
                                                                           "peak_bytes": float("nan")}}]}),
                   "extra_info.peak_bytes is nan: it must be finite and not negative"),
    "a negative peak": (json.dumps({"benchmarks": [{**BENCHMARK, "extra_info": {**BENCHMARK["extra_info"],
                                                                                "peak_bytes": -5}}]}),
                        "extra_info.peak_bytes is -5: it must be finite and not negative"),
    "nested past any parser": ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than can be read"),
    "a 400-digit integer": ('{"benchmarks": [{"name": "x", "stats": {"median": 1' + "0" * 5000 + '}}]}',
                            "Exceeds the limit"),
}


def storage(tmp: Path, newest: str) -> Path:
    """A storage folder with a good run 0001 and ``newest`` as run 0002; the path of run 0002."""
    machine = tmp / "benchmarks" / "Linux-CPython-3.11-64bit"
    machine.mkdir(parents=True)
    (machine / "0001_abc_20240101_000000.json").write_text(json.dumps({"benchmarks": [BENCHMARK]}))
    newest_path = machine / "0002_def_20240102_000000.json"
    newest_path.write_text(newest)
    return newest_path


@pytest.fixture
def compare(posenc_here):
    """``python -m posenc compare --storage DIR/benchmarks ARGS``, as ``compare(DIR, *ARGS)``."""
    return lambda tmp, *args: posenc_here("compare", "--storage", tmp / "benchmarks", *args)


def refusal(result: subprocess.CompletedProcess) -> str:
    """The one line ``compare`` refused with, after checking the exit code is its own."""
    assert result.returncode == 3, (result.returncode, result.stderr)  # the documented code, neither 0, 1 nor 2
    assert history.BAD_RUN_FILE == 3 and history.BAD_RUN_FILE not in (history.OK, history.REGRESSED, history.USAGE)
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in result.stderr
    return line


def test_compare_refuses_an_empty_newest_run(tmp_path, compare):
    newest = storage(tmp_path, BAD_RUNS["empty run"][0])
    line = refusal(compare(tmp_path, "--fail"))
    assert str(newest) in line and "the run holds no benchmarks" in line, line
    assert str(newest) in refusal(compare(tmp_path, "--trend", str(tmp_path / "trend")))  # the trend reads it too


@pytest.mark.parametrize("case", [c for c in BAD_RUNS if c not in ("empty run", "malformed JSON")])
def test_compare_refuses_a_file_that_is_not_a_pytest_benchmark_save(tmp_path, compare, case):
    text, message = BAD_RUNS[case]
    newest = storage(tmp_path, text)
    line = refusal(compare(tmp_path, "1", "2", "--fail"))
    assert line == f"error: {newest}: {message}" or (line.startswith(f"error: {newest}: ") and message in line), line


def test_compare_names_a_malformed_file_and_the_line_and_column_of_its_error(tmp_path, compare):
    newest = storage(tmp_path, BAD_RUNS["malformed JSON"][0])
    line = refusal(compare(tmp_path, "--fail"))
    assert line == f"error: {newest}: {BAD_RUNS['malformed JSON'][1]}", line
    assert line == refusal(compare(tmp_path, "1", str(newest)))  # named by path, the same


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs: POSIX only")
def test_compare_never_reads_a_fifo_named_like_a_saved_run(tmp_path, compare):
    """A special file named like a run is never opened (reading a FIFO waits for a writer forever)."""
    newest = storage(tmp_path, json.dumps({"benchmarks": [BENCHMARK]}))
    fifo = newest.with_name("0003_ghi_20240103_000000.json")
    os.mkfifo(fifo)
    done = compare(tmp_path, "0001", "latest")
    assert done.returncode == 0, done.stderr  # latest is the newest regular file, 0002
    assert history.saved_runs(tmp_path / "benchmarks")[-1] == newest
    with pytest.raises(history.RunFileError, match="not a regular file"):
        history.read_run(fifo)
    assert "left out, not regular files: " + str(fifo) in done.stderr
    assert f"{fifo}: not a regular file" in refusal(compare(tmp_path, "0001", str(fifo)))  # named: refused by name
    for saved in history.saved_runs(tmp_path / "benchmarks"):
        saved.unlink()
    alone = compare(tmp_path)  # the FIFO alone: no saved runs, and it says why
    assert alone.returncode == 2 and "1 named like one are not regular files" in alone.stderr, alone.stderr


def test_compare_still_compares_good_runs(tmp_path, compare):
    storage(tmp_path, json.dumps({"benchmarks": [BENCHMARK]}))
    assert compare(tmp_path, "--fail").returncode == 0


def test_the_exit_codes_are_listed_in_the_help_and_the_docs(compare, tmp_path):
    shown = compare(tmp_path, "--help").stdout
    page = (ROOT / "docs" / "how-to" / "profiling.md").read_text()
    for code, meaning in history.EXIT_CODES.items():
        assert f"  {code}  {meaning}" in shown and f"- `{code}`: {meaning}" in page, (code, meaning)


def test_perf_compare_checks_its_saved_run_at_start_up_before_any_benchmark(tmp_path):
    """Each bad file stops ``pytest specs -m perf --perf-compare FILE`` with one line naming it, at
    configure time: nothing is collected, no benchmark runs (the old harness ran them all first)."""
    cases, newest = {}, {}
    for i, (case, (text, _)) in enumerate(BAD_RUNS.items()):
        newest[case] = storage(tmp_path / f"case-{i}", text)
        cases[case] = [["-m", "perf", "-p", "no:xdist", "--encoders", "rope_interleaved", "-k",
                        "(test_benchmark and b1 and not backward) or pass_the_gate",
                        "--benchmark-min-rounds=1", "--benchmark-max-time=0.01",
                        f"--benchmark-storage=file://{tmp_path / f'case-{i}' / 'benchmarks'}",
                        "--matrix-dir", str(tmp_path / f"case-{i}" / "reports"), "--perf-compare", "latest"], {}]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    done = subprocess.run([sys.executable, "-m", "tests.start_ups", str(tmp_path / "cases.json"),
                           str(tmp_path / "results.json")], cwd=ROOT, env=environment, capture_output=True,
                          text=True, preexec_fn=interruptible)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    for case, (code, out, err) in results.items():
        errors = [line for line in err.splitlines() if line.startswith("ERROR:")]
        assert code == pytest.ExitCode.USAGE_ERROR and len(errors) == 1, (case, code, out[-1500:], err[-1500:])
        said = " ".join(err[err.find("ERROR:"):].split())  # wrapped to the terminal, the path whole
        assert f"--perf-compare latest: {newest[case]}: " in said, said
        assert " ".join(BAD_RUNS[case][1].split()) in said, said
        assert "passed" not in out and "failed" not in out and "Traceback" not in out + err  # nothing ran
