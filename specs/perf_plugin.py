"""pytest plug-in of the performance specs; its hooks are imported by ``specs/conftest.py``.

Options:

* ``--profile``: every benchmark also writes a torch.profiler trace (shapes, memory) into
  ``<profile-dir>/<run id>/<benchmark>/`` through ``tensorboard_trace_handler``, and the
  TensorBoard summaries (attention patterns, RoFormer decay, precision, scaling) go to
  ``<profile-dir>/<run id>/summaries``;
* ``--profile-dir DIR`` (default ``profiles``), ``--profile-run-id ID`` (default: a timestamp);
* ``--perf-devices cpu,cuda`` (``POSENC_PERF_DEVICES``; default ``auto``: CPU, and CUDA when present);
* ``--perf-threads N`` (``POSENC_PERF_THREADS``): ``torch.set_num_threads(N)`` for the session.

At the end of the run it prints a table per benchmark group (one row per encoder) and the
complexity and claim measurements; ``--benchmark-autosave`` histories get the torch, CUDA,
CPU and GPU names in their machine info.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from posenc import profiling
from posenc.pytest_plugin import selected_records

_PERF = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("posenc-perf", "positional-encoding benchmarks and profiles")
    group.addoption("--profile", action="store_true", default=False,
                    help="write torch.profiler traces and TensorBoard summaries for the perf specs")
    group.addoption("--profile-dir", default="profiles", help="root of the profile log directory")
    group.addoption("--profile-run-id", default="", help="run directory name (default: a timestamp)")
    group.addoption("--perf-devices", default=os.environ.get("POSENC_PERF_DEVICES", "auto"),
                    help="comma-separated devices for the benchmarks: cpu, cuda, or auto")
    group.addoption("--perf-threads", type=int, default=int(os.environ.get("POSENC_PERF_THREADS", "0")),
                    help="torch.set_num_threads for the session (0: torch's default)")


def pytest_configure(config):
    threads = config.getoption("perf_threads", default=0)
    if threads:
        torch.set_num_threads(threads)
    wanted = config.getoption("perf_devices", default="auto")
    if wanted == "auto":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = [d.strip() for d in wanted.split(",") if d.strip()]
        if "cuda" in devices and not torch.cuda.is_available():
            raise pytest.UsageError("--perf-devices cuda: CUDA is not available on this machine")
    run_dir = None
    if config.getoption("profile", default=False):
        run_id = config.getoption("profile_run_id") or time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(config.getoption("profile_dir")) / run_id
    config.stash[_PERF] = {"devices": devices, "run_dir": run_dir, "benchmarks": [], "notes": []}


def perf_state(config) -> dict:
    return config.stash[_PERF]


def pytest_generate_tests(metafunc):
    if "perf_record" in metafunc.fixturenames:
        records = selected_records(metafunc.config)
        metafunc.parametrize("perf_record", records, ids=[r.name for r in records])
    if "perf_device" in metafunc.fixturenames:
        metafunc.parametrize("perf_device", perf_state(metafunc.config)["devices"])


@pytest.fixture(scope="session")
def perf_session(request) -> dict:
    """Session state: ``benchmarks`` and ``notes`` (lists printed in the summary), ``run_dir``."""
    return perf_state(request.config)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    info = profiling.machine_info()
    machine_info["torch"] = info["torch"]
    machine_info["cuda"] = info["cuda"]
    machine_info["gpu"] = ", ".join(info["gpus"]) or "none"
    machine_info["posenc"] = info


# ---------------------------------------------------------------- summary

def _mib(n) -> str:
    return f"{n / 2**20:7.2f}"


def _summary_lines(benchmarks: list[dict]) -> list[str]:
    lines = []
    groups: dict[str, list[dict]] = {}
    for b in benchmarks:
        groups.setdefault(b["group"], []).append(b)
    header = (f"{'encoder':34s} {'median ms':>10s} {'×fastest':>8s} {'peak MiB':>8s} {'static MiB':>10s} "
              f"{'min MB':>7s} {'GB/s':>7s} {'×copy':>6s} {'ops':>5s} {'kernels':>7s}")
    for group, rows in groups.items():
        lines += ["", group, header]
        fastest = min(r["seconds"] for r in rows)
        for r in sorted(rows, key=lambda r: r["seconds"]):
            lines.append(
                f"{r['encoder']:34s} {r['seconds'] * 1e3:10.3f} {r['seconds'] / fastest:8.2f} "
                f"{_mib(r['peak_bytes'])} {_mib(r['static_bytes']):>10s} {r['min_bytes'] / 1e6:7.2f} "
                f"{r['bandwidth_GBps']:7.2f} {r['roofline_ratio']:6.3f} {r['op_count']:5d} {r['kernel_count']:7d}"
            )
        by_name = {r["encoder"]: r for r in rows}
        if "rope_compiled" in by_name and "rope_interleaved" in by_name:
            fused, eager = by_name["rope_compiled"], by_name["rope_interleaved"]
            lines.append(f"fused RoPE: time rope_compiled / rope_interleaved = {fused['seconds'] / eager['seconds']:.3f}, "
                         f"{fused['roofline_ratio']:.3f} of the copy roofline "
                         f"(eager {eager['roofline_ratio']:.3f}); kernels {fused['kernel_count']} vs {eager['kernel_count']}")
    return lines


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(_PERF, None)
    if not state or not (state["benchmarks"] or state["notes"]):
        return
    terminalreporter.section("posenc performance (per group: one row per encoder)")
    if state["benchmarks"]:
        device_names = sorted({b["device_name"] for b in state["benchmarks"]})
        terminalreporter.write_line("measured on: " + "; ".join(device_names) + f"; torch {torch.__version__}")
        terminalreporter.write_line("×copy = achieved bandwidth of the minimum bytes / bandwidth of a copy of "
                                    "the same bytes, same device, same run")
        for line in _summary_lines(state["benchmarks"]):
            terminalreporter.write_line(line)
    for note in state["notes"]:
        terminalreporter.write_line(note)
    if state["run_dir"] is not None and state["run_dir"].exists():
        _write_summary_text(state["run_dir"], state["benchmarks"], state["notes"])
        terminalreporter.write_line(f"profiles: {state['run_dir']}  (tensorboard --logdir {state['run_dir'].parent})")


def _write_summary_text(run_dir, benchmarks, notes) -> None:
    """The summary table in TensorBoard's Text tab: an offline cluster sees it without the
    profiler plug-in's Overview, whose charts load from the internet."""
    from torch.utils.tensorboard import SummaryWriter

    lines = _summary_lines(benchmarks) + [""] + list(notes)
    with SummaryWriter(log_dir=str(run_dir / "summaries")) as writer:
        writer.add_text("benchmarks", "```\n" + "\n".join(lines).strip() + "\n```")
