"""Benchmark histories: compare saved pytest-benchmark runs on time, memory, ×copy and kernels.

pytest-benchmark saves each ``--benchmark-autosave`` run as ``<storage>/<machine>/NNNN_*.json``;
every benchmark of ``specs/test_perf.py`` carries the harness's measurements in ``extra_info``.
This module reads those files and compares two runs, row by row:

* ``time`` - pytest-benchmark's median (shown); ``best`` - its minimum (gated: noise only adds);
* ``peak``, ``static`` - peak bytes of one call and bytes kept between calls (deterministic);
* ``xcopy`` - time of a copy of the same bytes over the time of the call, both timed interleaved
  in the same run: a machine that is slower for everyone moves both, so it survives noise;
* ``kernels`` - kernels one call runs (deterministic).

A gate (``peak:5%,kernels:0,xcopy:30%``) names, per metric, how much worse "after" may be than
"before": a percentage or an absolute amount. Timing gates (``best``, ``xcopy``, ``time``) must
all fail together for a regression: a call that really got slower is slower in the best case
*and* against a copy timed beside it, while noise rarely moves both. :data:`DEFAULT_GATE` is the
one whose false-alarm rate README reports.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

#: metric -> (where it lives, label, unit scale, unit, higher is better)
METRICS: dict[str, tuple[str, str, float, str, bool]] = {
    "time": ("stats.median", "median time", 1e3, "ms", False),
    "peak": ("extra_info.peak_bytes", "peak memory", 2.0**-20, "MiB", False),
    "static": ("extra_info.static_bytes", "static memory", 2.0**-20, "MiB", False),
    "xcopy": ("extra_info.roofline_ratio", "×copy", 1.0, "", True),
    "kernels": ("extra_info.kernel_count", "kernels", 1.0, "", False),
    "best": ("stats.min", "best time", 1e3, "ms", False),
}
SHOWN = ("time", "peak", "static", "xcopy", "kernels")  # columns of the comparison table
#: Timing metrics: their gates widen with the runs' own spread and must fail together.
TIMED = ("time", "best", "xcopy")
NOISE_K = 2.0
DEFAULT_GATE = "peak:5%,static:5%,kernels:0,best:30%,xcopy:25%"

#: ``python -m posenc compare``'s exit codes -> what each means (its ``--help`` and docs/how-to/profiling.md list them)
OK, REGRESSED, USAGE, BAD_RUN_FILE = 0, 1, 2, 3
EXIT_CODES = {
    OK: "compared, no regression beyond the gate",
    REGRESSED: "--fail: a benchmark regressed beyond the gate",
    USAGE: "bad option or gate, or no such saved run",
    BAD_RUN_FILE: "a run file cannot be compared: unreadable, not JSON, not a pytest-benchmark save, or no benchmarks",
}


@dataclass(frozen=True)
class Run:
    path: Path
    number: str
    commit: str
    datetime: str
    rows: dict[str, dict[str, float]]  # benchmark key -> metric -> value
    machine: dict = None  # posenc's machine info: torch, threads, CPU, GPUs (pytest-benchmark's machine_info)


#: What makes two runs' timings incomparable, as (label, posenc machine-info key).
MACHINE_FIELDS = (("torch version", "torch"), ("torch threads", "torch_threads"), ("CPU", "cpu"),
                  ("GPUs", "gpus"), ("CUDA", "cuda"))


def machine_differences(before: dict | None, after: dict | None) -> list[str]:
    """``label (before → after)`` for each machine fact in which two runs differ."""
    if not before or not after:
        return []
    return [f"{label} ({before[key]} → {after[key]})" for label, key in MACHINE_FIELDS
            if key in before and key in after and before[key] != after[key]]


def benchmark_key(benchmark: dict) -> str:
    info = benchmark.get("extra_info", {})
    if {"device", "mode", "batch", "encoder"} <= set(info):
        mode = info["mode"].replace("forward", "fwd").replace("backward", "bwd")
        dtype = "" if info.get("dtype", "float32") == "float32" else f" {info['dtype']}"
        return f"{info['device']} {mode} b{info['batch']}{dtype} {info['encoder']}"
    return benchmark["name"]


def _value(benchmark: dict, where: str):
    section, field = where.split(".")
    return benchmark.get(section, {}).get(field)


def _row(benchmark: dict) -> dict[str, float]:
    """The metrics of one benchmark in pytest-benchmark's shape, plus its ``spread`` (IQR / median)."""
    values = {m: _value(benchmark, spec[0]) for m, spec in METRICS.items()}
    stats = benchmark.get("stats", {})
    if stats.get("median"):
        values["spread"] = stats.get("iqr", 0.0) / stats["median"]
    return {m: float(v) for m, v in values.items() if v is not None}


class RunFileError(ValueError):
    """A saved run that cannot be compared: unreadable, not JSON, not a pytest-benchmark save, or empty.
    Its message is one line that starts with the file's path."""


#: A saved run larger than this is refused unread.
MAX_RUN_BYTES = 64 << 20


def _load(path: Path) -> dict:
    """The file's JSON object; a :class:`RunFileError` naming the file, and the line and column of bad
    JSON. Reading is bounded: a regular file only (a FIFO would hang the reader), of at most
    :data:`MAX_RUN_BYTES`; JSON nested past the parser's depth or with a number too long to read
    is refused."""
    try:
        if not path.is_file():
            raise RunFileError(f"{path}: not a regular file: a saved run is a JSON file")
        size = path.stat().st_size
        if size > MAX_RUN_BYTES:
            raise RunFileError(f"{path}: {size} bytes, more than a saved run's limit of {MAX_RUN_BYTES}")
        data = json.loads(path.read_text(encoding="utf-8"))
    except RunFileError:
        raise
    except json.JSONDecodeError as error:
        raise RunFileError(f"{path}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise RunFileError(f"{path}: not a pytest-benchmark save: JSON nested deeper than can be read") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise RunFileError(f"{path}: not a pytest-benchmark save: {str(error)[:120]}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunFileError(f"{path}: cannot be read: {error}") from None
    if not isinstance(data, dict):
        raise RunFileError(f"{path}: not a pytest-benchmark save: the JSON is a {type(data).__name__}, not an object")
    return data


#: The times a saved run must hold finite and positive; every other figure finite and not negative.
TIMES = ("stats.median", "stats.min")


def _finite(value) -> bool:
    """Finite as a float: NaN, infinities and integers past a float's range (10**400) are not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_benchmarks(path: Path, data: dict) -> list[dict]:
    """The ``benchmarks`` list of a pytest-benchmark save, each entry with a name and numeric stats."""
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list):
        keys = ", ".join(map(str, data)) or "none"
        raise RunFileError(f"{path}: not a pytest-benchmark save: no 'benchmarks' list (keys: {keys})")
    if not benchmarks:
        raise RunFileError(f"{path}: the run holds no benchmarks: nothing to compare with")
    for index, entry in enumerate(benchmarks):
        where = f"{path}: not a pytest-benchmark save: benchmark {index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise RunFileError(f"{where} has no 'name' string (got {str(entry)[:80]!r})")
        where += f" ({entry['name']})"
        for section in ("stats", "extra_info"):
            if not isinstance(entry.get(section, {}), dict):
                raise RunFileError(f"{where}: '{section}' is a {type(entry[section]).__name__}, not an object")
        if "stats" not in entry:
            raise RunFileError(f"{where} has no 'stats'")
        for spec in (*(spec for spec, *_ in METRICS.values()), "stats.iqr"):
            value = _value(entry, spec)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise RunFileError(f"{where}: {spec} is {value!r}, not a number")
            if value is not None and spec not in TIMES and not (_finite(value) and value >= 0):
                shown = f"{value!r}"[:40] + ("…" if len(f"{value!r}") > 40 else "")
                raise RunFileError(f"{where}: {spec} is {shown}: it must be finite and not negative")
        if _value(entry, METRICS["time"][0]) is None:
            raise RunFileError(f"{where}: stats has no 'median'")
        for spec in TIMES:
            value = _value(entry, spec)
            if value is not None and not (_finite(value) and value > 0):
                raise RunFileError(f"{where}: {spec} is {value!r}: a time must be finite and positive")
        try:
            benchmark_key(entry)
        except (AttributeError, TypeError) as error:
            raise RunFileError(f"{where}: its extra_info does not name a posenc benchmark ({error})") from None
    return benchmarks


def read_run(path: Path) -> Run:
    """A saved pytest-benchmark run; a :class:`RunFileError` when it is not one or holds no benchmarks."""
    path = Path(path)
    data = _load(path)
    rows = {benchmark_key(b): _row(b) for b in _check_benchmarks(path, data)}
    commit_info, machine_info = data.get("commit_info"), data.get("machine_info")
    commit = str(commit_info.get("id") or "")[:10] if isinstance(commit_info, dict) else ""
    machine = machine_info.get("posenc", {}) if isinstance(machine_info, dict) else {}
    number = path.name.split("_", 1)[0]
    return Run(path, number, commit, str(data.get("datetime", "")), rows, machine if isinstance(machine, dict) else {})


def run_in_progress(infos: list[dict]) -> Run:
    """This run's benchmarks from their ``extra_info`` (``seconds``, ``best_seconds``, ``spread``),
    before pytest-benchmark has saved them."""
    rows = {}
    for info in infos:
        stats = {"median": info["seconds"], "min": info.get("best_seconds", info["seconds"]),
                 "iqr": info.get("spread", 0.0) * info["seconds"]}
        benchmark = {"extra_info": info, "stats": stats}
        rows[benchmark_key(benchmark)] = _row(benchmark)
    from .machine import machine_info

    return Run(Path("this run"), "this run", "", "", rows, machine_info())


def saved_runs(storage: Path) -> list[Path]:
    """Every saved run under ``storage`` (a pytest-benchmark storage folder), oldest first."""
    storage = Path(str(storage).removeprefix("file://"))
    return sorted((p for p in storage.glob("*/[0-9][0-9][0-9][0-9]_*.json") if p.is_file()),
                  key=lambda p: (p.name, str(p.parent)))


def not_files(storage: Path) -> list[Path]:
    """What is named like a saved run but is no regular file (a FIFO, a folder): never opened."""
    storage = Path(str(storage).removeprefix("file://"))
    return sorted(p for p in storage.glob("*/[0-9][0-9][0-9][0-9]_*.json") if not p.is_file())


def find_run(storage: Path, reference: str) -> Path:
    """A run by file path, by number (``0003`` or ``3``), or ``latest`` / ``previous``. What is
    no regular file is refused by name, never opened (a FIFO would block the reader)."""
    if Path(reference).is_file() or (os.path.lexists(reference) and ("/" in reference or reference.endswith(".json"))):
        return Path(reference)  # what is no regular file, read_run refuses by name
    runs, odd = saved_runs(storage), not_files(storage)
    if not runs:
        raise LookupError(f"no saved benchmark runs under {storage} (run pytest -m perf --benchmark-autosave)"
                          + (f"; {len(odd)} named like one are not regular files" if odd else ""))
    if reference in ("latest", "previous"):
        index = -1 if reference == "latest" else -2
        if len(runs) < -index:
            raise LookupError(f"{reference}: only {len(runs)} saved run(s) under {storage}")
        return runs[index]
    if reference.isdigit():
        matches = [p for p in runs if p.name.startswith(f"{int(reference):04d}_")]
        if matches:
            return matches[-1]
    raise LookupError(f"no saved run {reference!r} under {storage}; saved: "
                      + ", ".join(p.name.split("_", 1)[0] for p in runs))


# ---------------------------------------------------------------- comparison and gates

#: The units an absolute gate amount takes, keyed by the unit METRICS shows the metric in, as factors
#: to the saved values (seconds and bytes); counts and ratios take a plain number.
UNITS = {
    "ms": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9},
    "MiB": {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30},
    "": {"": 1.0},
}


def _units(metric: str) -> dict[str, float]:
    return UNITS[METRICS[metric][3]]
GATE_HELP = ("METRIC:AMOUNT[,METRIC:AMOUNT…]; METRIC one of " + ", ".join(METRICS) + "; AMOUNT a percentage "
             "(peak:5%), or an amount in its unit: time and best in s, ms, us or ns (best:2ms), peak and static "
             "in B, KiB, MiB or GiB (peak:40MiB), kernels and xcopy as a plain number (kernels:0)")


@dataclass(frozen=True)
class Gate:
    metric: str
    amount: float  # a fraction for a relative gate, else seconds, bytes or a plain number
    relative: bool
    unit: str = ""  # how the amount was written

    def __str__(self) -> str:
        if self.relative:
            return f"{self.metric}:{self.amount * 100:g}%"
        return f"{self.metric}:{self.amount / _units(self.metric)[self.unit]:g}{self.unit}"


def parse_gate(text: str) -> list[Gate]:
    """``peak:5%,time:2ms,peak:40MiB,kernels:0`` -> gates; every error names the part and what is allowed."""
    gates = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = re.fullmatch(r"([a-z]+):([0-9]*\.?[0-9]+)(%|[a-zA-Zµ]*)", part)
        if not match or match.group(1) not in METRICS:
            raise ValueError(f"gate {part!r}: expected {GATE_HELP} (e.g. {DEFAULT_GATE})")
        metric, amount, unit = match.groups()
        if unit == "%":
            gates.append(Gate(metric, float(amount) / 100, True))
            continue
        units = _units(metric)
        if unit not in units:
            wanted = ", ".join(u for u in units if u) or "no unit"
            raise ValueError(f"gate {part!r}: {metric} takes a percentage or an amount in {wanted}"
                             + (f", e.g. {metric}:{amount}{next(iter(units))}" if "" not in units else ""))
        gates.append(Gate(metric, float(amount) * units[unit], False, unit))
    return gates


def worsening(metric: str, before: float, after: float) -> tuple[float, float]:
    """(absolute, relative) change for the worse: positive when ``after`` is worse."""
    higher_is_better = METRICS[metric][4]
    change = (before - after) if higher_is_better else (after - before)
    return change, (change / abs(before) if before else (float("inf") if change > 0 else 0.0))


def regressions(before: Run, after: Run, gates: list[Gate]) -> list[str]:
    """One line per benchmark that got worse by more than a gate allows, naming each metric.

    A relative gate on a timing metric widens to ``NOISE_K`` times the two runs' spread (IQR /
    median of the call's timings) when that is larger: a run that was itself noisy cannot prove
    a regression of the size of its noise. The timing gates of one benchmark count only when all
    of them fail.
    """
    lines = []
    for key in sorted(set(before.rows) & set(after.rows)):
        timed, failed_timed, failed = 0, [], []
        for gate in gates:
            b, a = before.rows[key].get(gate.metric), after.rows[key].get(gate.metric)
            if b is None or a is None:
                continue
            absolute, relative = worsening(gate.metric, b, a)
            allowed = gate.amount
            if gate.relative and gate.metric in TIMED:
                spread = before.rows[key].get("spread", 0.0) + after.rows[key].get("spread", 0.0)
                allowed = max(allowed, NOISE_K * spread)
            _, label, scale, unit, _ = METRICS[gate.metric]
            widened = f", widened to {allowed:.0%} by the runs' spread" if allowed != gate.amount else ""
            reason = (f"{label} {b * scale:.4g} → {a * scale:.4g} {unit}".rstrip()
                      + f" ({relative:+.1%} worse; gate {gate}{widened})")
            worse = (relative if gate.relative else absolute) > allowed
            if gate.metric in TIMED:
                timed += 1
                failed_timed += [reason] if worse else []
            elif worse:
                failed.append(reason)
        if timed and len(failed_timed) == timed:
            failed += failed_timed
        if failed:
            lines.append(f"REGRESSION {key}: " + " | ".join(failed))
    return lines


def comparison_rows(before: Run, after: Run, sort: bool = False) -> list[dict]:
    rows = []
    for key in sorted(set(before.rows) | set(after.rows)):
        row = {"benchmark": key}
        for metric in SHOWN:
            b, a = before.rows.get(key, {}).get(metric), after.rows.get(key, {}).get(metric)
            delta = None if b is None or a is None or b == 0 else (a - b) / abs(b)
            row.update({f"{metric}_before": b, f"{metric}_after": a, f"{metric}_delta": delta})
        rows.append(row)
    if sort:
        def worst(row):
            return max((abs(row[f"{m}_delta"]) for m in SHOWN if row[f"{m}_delta"] is not None), default=0.0)
        rows.sort(key=worst, reverse=True)
    return rows


def _cell(value, scale) -> str:
    return "-" if value is None else f"{value * scale:.4g}"


def _delta(value) -> str:
    return "" if value is None else f"{value:+.1%}"


def render_table(rows: list[dict]) -> str:
    """Before, after and delta per metric, one row per benchmark (fits in 160 columns)."""
    width = max([len(r["benchmark"]) for r in rows] + [9])
    header = f"{'benchmark':<{width}}"
    for metric in SHOWN:
        unit = METRICS[metric][3]
        header += f" {metric + (f' ({unit})' if unit else ''):>21}"
    lines = ["each cell: before→after, change", header, "-" * len(header)]
    for row in rows:
        line = f"{row['benchmark']:<{width}}"
        for metric in SHOWN:
            scale = METRICS[metric][2]
            pair = f"{_cell(row[f'{metric}_before'], scale)}→{_cell(row[f'{metric}_after'], scale)}"
            line += f" {pair:>14}{_delta(row[f'{metric}_delta']):>7}"
        lines.append(line)
    return "\n".join(lines)


def render_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["benchmark"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write_trend(storage: Path, logdir: Path, metrics=tuple(METRICS)) -> list[str]:
    """Every saved run as TensorBoard scalars ``history/<metric>/<benchmark>`` with the run number
    as step, so a trend over many commits shows in the Scalars tab (offline)."""
    from torch.utils.tensorboard import SummaryWriter

    tags = set()
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for path in saved_runs(storage):
            run = read_run(path)
            for key, values in run.rows.items():
                for metric in metrics:
                    if metric in values:
                        tag = f"history/{metric}/{key.replace(' ', '_')}"
                        writer.add_scalar(tag, values[metric] * METRICS[metric][2], global_step=int(run.number))
                        tags.add(tag)
    return sorted(tags)
