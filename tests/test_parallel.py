"""pytest-xdist: ``pytest specs -n N`` gives the serial run's reports, cell by cell."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc.harness.cases import parallel
from posenc.harness.catalogue.states import State

pytestmark = pytest.mark.xdist_group("parallel")  # its module fixture runs once, in one worker
ROOT = Path(__file__).resolve().parents[1]
SELECTION = ("--encoders", "learnable,rope_interleaved,rope_half_split,attention_rope,hybrid",
             "-k", "not rotations_compose and not gradcheck")


def run_specs(*args, matrix_dir: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env["POSENC_HYPOTHESIS_PROFILE"] = "ci"
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--tb=line",
               "--matrix-dir", str(matrix_dir), *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def serial_and_parallel(tmp_path_factory):
    out = tmp_path_factory.mktemp("xdist")
    serial = run_specs(*SELECTION, "-p", "no:xdist", matrix_dir=out / "serial")
    parallel_run = run_specs(*SELECTION, "-n", "2", "-vv", matrix_dir=out / "parallel")  # -q -vv: one line a test
    assert serial.returncode == 0, serial.stdout[-2000:]
    assert parallel_run.returncode == 0, parallel_run.stdout[-2000:]
    return out, serial.stdout, parallel_run.stdout


def _matrix_text(stdout: str) -> str:
    """The printed summary and grid, without the lines that name this run's own report files."""
    section = stdout[stdout.index("posenc verdicts"):].splitlines()[1:]
    ends = (i for i, line in enumerate(section) if re.match(r"=+ |\d+ (passed|failed|skipped|deselected)", line))
    section = section[:next(ends, len(section))]
    start = next(i for i, line in enumerate(section) if line.startswith("report:"))
    end = next(i for i in range(start, len(section)) if not section[i].strip())
    return "\n".join(section[:start] + section[end:]).strip("\n")  # -vv ends the last test's line first


def test_parallel_reports_equal_the_serial_ones_cell_by_cell(serial_and_parallel):
    out, serial_stdout, parallel_stdout = serial_and_parallel
    serial, parallel_ = (json.loads((out / name / "verdicts.json").read_text()) for name in ("serial", "parallel"))
    assert parallel_["matrix"] == serial["matrix"]
    assert State.HOLDS_PARTIAL in {s for row in serial["matrix"].values() for s in row.values()}  # -k deselected some
    assert sorted((o["test_id"], o["state"]) for o in parallel_["outcomes"]) == \
        sorted((o["test_id"], o["state"]) for o in serial["outcomes"])
    # the tables alike; the first line is each run's own status line (its run id and times)
    markdown = {name: (out / name / "verdicts.md").read_text().split("\n", 2) for name in ("serial", "parallel")}
    assert markdown["parallel"][2] == markdown["serial"][2]
    assert all(lines[0].startswith("**Run ") and ": complete** (" in lines[0] for lines in markdown.values()), markdown
    assert _matrix_text(parallel_stdout) == _matrix_text(serial_stdout)
    assert parallel_["header"]["status"] == "complete"


def test_each_encoders_specs_run_in_one_worker(serial_and_parallel):
    """Its compiled kernels, caches and timeout bookkeeping stay in one process: ``--dist loadgroup``
    keeps an encoder's group together (pytest 9.2 silently broke it, pytest-xdist#1386)."""
    _, _, parallel_stdout = serial_and_parallel
    workers: dict[str, set[str]] = {}
    for worker, group in re.findall(r"^\[(gw\d+)\].*\]@(\w+) *$", parallel_stdout, re.MULTILINE):
        workers.setdefault(group, set()).add(worker)
    assert set(workers) == set(SELECTION[1].split(",")), parallel_stdout[-3000:]
    assert all(len(ran_in) == 1 for ran_in in workers.values()), workers
    assert len(set().union(*workers.values())) == 2, workers  # and the groups are spread over both


class _Item:
    def __init__(self, nodeid: str, group: str | None):
        self.nodeid, self.group = nodeid, group

    def get_closest_marker(self, name):
        return pytest.mark.xdist_group(self.group).mark if name == "xdist_group" and self.group else None


@pytest.mark.parametrize("nodeids, warns", [
    (["specs/test_norm.py::test_rotation_preserves_norm[rope-float32]@rope"], False),  # grouped
    (["specs/test_norm.py::test_rotation_preserves_norm[rope-float32]"], True),  # named no group
])
def test_a_worker_warns_where_no_group_was_named(nodeids, warns, recwarn):
    parallel.GroupingCheck().pytest_collection_modifyitems(None, [_Item(n, "rope") for n in nodeids] + [_Item("x", None)])
    shown = [str(w.message) for w in recwarn.list]
    assert bool(shown) == warns and all("pytest-xdist#1386" in m for m in shown), shown


def test_workers_write_no_reports(serial_and_parallel):
    out, _, _ = serial_and_parallel
    assert len(list((out / "parallel" / "runs").iterdir())) == 1


def test_benchmarks_under_xdist_are_refused_with_one_line(tmp_path):
    result = run_specs("-m", "perf", "-n", "2", matrix_dir=tmp_path)
    assert result.returncode == 4
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    said = " ".join(result.stderr[result.stderr.find("ERROR:"):].split())  # wrapped to the terminal
    assert len(errors) == 1 and said == ("ERROR: -m perf with -n: timings taken by parallel workers on shared cores "
                                         "are not comparable; run the benchmarks without -n (or with -n 0)"), \
        result.stderr[-1000:]


@pytest.mark.parametrize("worker, count, gpu", [("gw0", 4, 0), ("gw3", 4, 3), ("gw5", 4, 1), ("gw7", 1, 0)])
def test_each_worker_takes_its_own_gpu(worker, count, gpu):
    assert parallel.worker_gpu(worker, count) == gpu


def test_a_cuda_worker_selects_its_gpu_from_its_worker_id(monkeypatch):
    """Faked on CPU: two GPUs, four workers."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert [parallel.assign_gpu(f"gw{i}") for i in range(4)] == [0, 1, 0, 1]
    assert chosen == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="no CUDA device"):
        parallel.worker_gpu("gw0", 0)
