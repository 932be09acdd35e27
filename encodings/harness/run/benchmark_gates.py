"""The benchmarks' side of a run: pytest-benchmark's tables narrowed, machine info, and
``--perf-compare``: this run's benchmarks against a saved run, judged by
``specs/test_perf.py::test_benchmarks_pass_the_gate``, which the harness runs last, so that a
regression fails a test and the run ends on a red line. The saved run is read and checked at
start-up (``options.read``): a file that cannot be compared stops the run before any benchmark."""

from __future__ import annotations

from decimal import Decimal

from ..performance import history, machine
from ..performance.profiling import PERF_LENGTHS
from .session import PerfSession


def configure_benchmarks(config, length: str) -> None:
    """pytest-benchmark's tables with a few columns and short names, so nothing is wider than 160
    columns (``--benchmark-columns`` and ``--benchmark-name long`` bring its full tables back), and
    its rounds bounded by ``--perf-length`` unless ``--benchmark-max-time`` or ``--benchmark-min-rounds`` is given."""
    if getattr(config.option, "benchmark_columns", "absent") is None:
        config.option.benchmark_columns = ["median", "iqr", "rounds"]
    if getattr(config.option, "benchmark_name", None) == "normal":
        config.option.benchmark_name = "short"
    bounds = PERF_LENGTHS[length]
    for option, value in (("benchmark_max_time", bounds.benchmark_max_time),
                          ("benchmark_min_rounds", bounds.benchmark_min_rounds)):
        flag = "--" + option.replace("_", "-")
        if hasattr(config.option, option) and not any(str(a).startswith(flag) for a in config.invocation_params.args):
            setattr(config.option, option, Decimal(str(value)) if option.endswith("time") else value)


def update_machine_info(machine_info: dict) -> None:
    info = machine.machine_info()
    machine_info["torch"] = info["torch"]
    machine_info["cuda"] = info["cuda"]
    machine_info["gpu"] = ", ".join(info["gpus"]) or "none"
    machine_info["posenc"] = info


GATE_TEST = "test_benchmarks_pass_the_gate"


def order_gate_last(config, items: list) -> None:
    """The gate test runs after every benchmark, and is deselected without ``--perf-compare``."""
    gates = [item for item in items if getattr(item, "originalname", None) == GATE_TEST]
    if not gates:
        return
    for item in gates:
        items.remove(item)
    if config.getoption("perf_compare", default=None) is None:
        config.hook.pytest_deselected(items=gates)
    else:
        items.extend(gates)


def gate_this_run(perf: PerfSession) -> str | None:
    """Compare this run's benchmarks with ``--perf-compare``'s saved run; the saved run's name."""
    if perf.compare_with is None:
        return None
    compare(perf, perf.compare_with, perf.gates)
    return f"saved run {perf.compare_with.name}"


def compare(perf: PerfSession, saved_path, gates) -> bool:
    """Compare with the saved run at ``saved_path``; True when a gate found a regression."""
    current = history.run_in_progress(perf.benchmarks)
    try:
        saved = history.read_run(saved_path)  # checked at start-up (options.read); read again in case it changed
    except history.RunFileError as error:
        perf.regressions = [f"REGRESSION check impossible: {error}"]
        return True
    for difference in history.machine_differences(saved.machine, current.machine):
        perf.note(f"WARNING the runs differ in {difference}: their timings are not comparable")
    perf.regressions = history.regressions(saved, current, list(gates))
    compared = len(set(saved.rows) & set(current.rows))
    perf.notes.append(f"compared {compared} benchmarks with saved run {saved.number} ({saved_path.name}), "
                      f"gate {','.join(map(str, gates))}: {len(perf.regressions)} regression(s)")
    if not compared:
        perf.regressions.append(f"REGRESSION check impossible: no benchmark of this run is in saved run {saved.number}")
    return bool(perf.regressions)
