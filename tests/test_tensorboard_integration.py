"""TensorBoard shows what the perf harness writes (issue: traces in the PyTorch Profiler tab,
scalars and images from ``SummaryWriter``).

Writes a fresh profiler trace and fresh summaries into a temporary log directory with the
harness's own functions, starts ``tensorboard`` on 127.0.0.1 on a free port, and checks
through its HTTP API that the PyTorch Profiler plug-in lists the run and its views and that
the scalar and image tags are listed; then stops the server (its process group) by pid.
Everything is local: no network is needed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("torch_tb_profiler")

from posenc import get  # noqa: E402
from posenc.harness.performance import profiling  # noqa: E402
from posenc.harness.performance.summaries import write_summaries  # noqa: E402

pytestmark = pytest.mark.xdist_group("tensorboard")  # its module fixture runs once, in one worker

STARTUP_TIMEOUT = 90.0
ENCODERS = ("learnable", "rope_interleaved", "attention_rope")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(port: int, path: str, timeout: float = 5.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return json.loads(response.read().decode())


def _wait_for(predicate, what: str, proc, log_path, deadline: float):
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited with {proc.returncode} while waiting for {what}:\n"
                        f"{log_path.read_text()[-3000:]}")
        try:
            value = predicate()
            if value:
                return value
            last = "not yet"
        except (urllib.error.URLError, ConnectionError, OSError, json.JSONDecodeError) as error:
            last = repr(error)
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last: {last}):\n{log_path.read_text()[-3000:]}")


def _stop(proc) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("profiles")
    run = root / "run1"
    work = profiling.make_workload(get("rope_interleaved"), seq=32, d_model=64, n_heads=4)
    traces = profiling.write_trace(work.call, run / "rope_interleaved", "rope_interleaved", "cpu", steps=2)
    assert traces, "the profiler wrote no trace"
    tags = write_summaries(run / "summaries", [get(n) for n in ENCODERS], "cpu", lengths=(16, 32),
                           positions=(1, 100, 10_000))
    return root, tags


def test_tensorboard_lists_the_trace_scalars_and_images(logdir, tmp_path):
    root, tags = logdir
    port = _free_port()
    log_path = tmp_path / "tensorboard.log"
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--host", "127.0.0.1",
               "--port", str(port), "--load_fast", "false", "--reload_interval", "1"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        _wait_for(lambda: _get_json(port, "/data/plugins_listing"), "the server", proc, log_path, deadline)

        profiler_run = "run1/rope_interleaved"

        def profiler_runs():
            data = _get_json(port, "/data/plugin/pytorch_profiler/runs")
            return data if profiler_run in data["runs"] and not data["loading"] else None

        _wait_for(profiler_runs, f"the profiler run {profiler_run}", proc, log_path, deadline)
        query = urllib.parse.urlencode({"run": profiler_run})
        views = _get_json(port, f"/data/plugin/pytorch_profiler/views?{query}")
        assert "Overview" in views and "Operator" in views and "Trace" in views, views
        workers = _get_json(port, f"/data/plugin/pytorch_profiler/workers?{query}&view=Overview")
        assert "rope_interleaved" in workers, workers

        summaries = "run1/summaries"

        def listed(plugin, wanted):
            data = _get_json(port, f"/data/plugin/{plugin}/tags")
            return data if summaries in data and set(wanted) <= set(data[summaries]) else None

        scalars = _wait_for(lambda: listed("scalars", tags["scalars"]), "the scalar tags", proc, log_path, deadline)
        images = _wait_for(lambda: listed("images", tags["images"]), "the image tags", proc, log_path, deadline)
        assert any(t.startswith("roformer/") for t in scalars[summaries])
        assert any(t.startswith("precision/rope_interleaved/") for t in scalars[summaries])
        assert any(t.startswith("scaling/time_ms/") for t in scalars[summaries])
        assert {f"attention/{n}" for n in ENCODERS} <= set(images[summaries])
    finally:
        _stop(proc)
    assert proc.poll() is not None
