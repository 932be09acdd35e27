"""The perf run's figures, generated from committed measurement files.

* ``python -m posenc docs --perf-json BENCH.json`` keeps, from a pytest-benchmark JSON of
  ``pytest specs -m perf --benchmark-json BENCH.json``, what the perf tables show (per encoder and
  mode: median time and ×copy; at forward batch 1: peak memory, the operator behind it, static
  memory and kernels) and the machine it ran on, in ``docs/measurements/perf-cpu.json``.
* ``python -m posenc perf-benchmark`` (:func:`main`) measures how long ``pytest specs -m perf``
  takes, and whether its short length keeps the ratios of the full one. It runs the default (short)
  perf run ``--repeat`` times and the full-length run ``--full-repeat`` times, alternately (a
  drifting machine moves both), start-up included, each with ``--benchmark-json``; then, per benchmark (group and encoder), it compares ×copy (the
  call's time against a same-run copy of its bytes): the **noise** is the spread of the short runs'
  ×copy, (max − min) / median; the **agreement** is the full run's ×copy against the short runs'
  median, as a relative difference, *within the noise* where it is no larger than the noise (or
  than :data:`FLOOR`). ``--write`` keeps the figures in ``docs/measurements/perf-run.json``.

The docs' sections are rendered from those files, so every figure there is one that was measured.
A script, not a timed test: timings belong in a benchmark run on an idle machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from posenc.harness.performance import kernel_floors
from posenc.tools import cli

MEASUREMENTS = Path("docs/measurements/perf-cpu.json")
COLUMNS = (("forward", 1), ("forward", 8), ("forward+backward", 1), ("forward+backward", 8))


def measurements_from_benchmarks(benchmark_json: Path) -> dict:
    data = json.loads(Path(benchmark_json).read_text())
    machine = data.get("machine_info", {}).get("posenc", {})
    rows: dict[str, dict] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info", {})
        if {"encoder", "mode", "batch"} - set(info) or info.get("device") != "cpu":
            continue
        row = rows.setdefault(info["encoder"], {"encoder": info["encoder"]})
        row[f"{info['mode']} b{info['batch']}"] = {"ms": bench["stats"]["median"] * 1e3,
                                                   "xcopy": info.get("roofline_ratio")}
        if (info["mode"], info["batch"]) == ("forward", 1):
            row.update(peak_MiB=info["peak_bytes"] / 2**20, peak_op=info.get("peak_op", ""),
                       static_MiB=info.get("static_bytes", 0) / 2**20, kernels=info.get("kernel_count"))
    return {"machine": {key: machine.get(key) for key in ("cpu", "cpu_count", "torch_threads", "torch")},
            "date": data.get("datetime", "")[:10], "rows": list(rows.values())}


def perf_table_markdown(path: Path = MEASUREMENTS) -> str:
    if not Path(path).exists():
        return f"(no measurements: run `python -m posenc docs --perf-json BENCH.json`, see {path})\n"
    data = json.loads(Path(path).read_text())
    machine = data["machine"]
    lines = [f"Measured on {machine['cpu']} ({machine['cpu_count']} CPUs, {machine['torch_threads']} torch threads), "
             f"torch {machine['torch']}, {data['date']}. Times are medians; ×copy is the fraction of the same-run "
             "copy roofline; peak (above the call's start, with the operator that allocated its largest block), "
             "static memory and kernels are for forward at batch 1.", "",
             "| encoder | " + " | ".join(f"{'fwd' if m == 'forward' else 'fwd+bwd'} b{b} ms | ×copy" for m, b in COLUMNS)
             + " | peak MiB | peak by | static MiB | kernels |",
             "|---|" + "---:|---:|" * len(COLUMNS) + "---:|---|---:|---:|"]
    for row in data["rows"]:
        cells = []
        for mode, batch in COLUMNS:
            entry = row.get(f"{mode} b{batch}")
            cells += [f"{entry['ms']:.3f}", f"{entry['xcopy']:.3f}"] if entry else ["", ""]
        lines.append(f"| `{row['encoder']}` | " + " | ".join(cells)
                     + f" | {row.get('peak_MiB', 0):.2f} | {row.get('peak_op', '')} | {row.get('static_MiB', 0):.2f}"
                     f" | {row.get('kernels', '')} |")
    return "\n".join(lines) + "\n"


def write_measurements(benchmark_json: Path, path: Path = MEASUREMENTS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measurements_from_benchmarks(benchmark_json), indent=1) + "\n")
    return path


def documents_table_markdown(path: Path = MEASUREMENTS) -> str:
    """PERF-1 and PERF-2 side by side: the documents' V100 figures and this project's measurement of
    the documents' own code (forward, batch 1, from the same committed measurement file)."""
    from posenc.harness.catalogue.perf_rules import DOCUMENT_TABLE

    if not Path(path).exists():
        return f"(no measurements: run `python -m posenc docs --perf-json BENCH.json`, see {path})\n"
    data = json.loads(Path(path).read_text())
    rows = {row["encoder"]: row for row in data["rows"]}
    machine = data["machine"]
    lines = [f"Measured on {machine['cpu']} ({machine['cpu_count']} CPUs, {machine['torch_threads']} torch threads), "
             f"torch {machine['torch']}, {data['date']}; the documents' figures are 000 §4.1's, on a V100.", "",
             "| published code | forward ms, documents | forward ms, measured (median) | memory MB, documents | "
             "memory MB, measured (static + peak) |", "|---|---:|---:|---:|---:|"]
    for encoder, (ms, mb) in DOCUMENT_TABLE.items():
        row = rows.get(encoder, {})
        measured = row.get("forward b1", {}).get("ms")
        memory = (row.get("static_MiB", 0) + row.get("peak_MiB", 0)) * 2**20 / 1e6 if row else None
        lines.append(f"| `{encoder}` | {ms} | {'' if measured is None else f'{measured:.3f}'} | {mb} | "
                     f"{'' if memory is None else f'{memory:.2f}'} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- perf-benchmark: the run's duration

RUN_MEASUREMENTS = Path("docs/measurements/perf-run.json")
#: The bar the default perf run is held to, on an idle 2-core machine.
TARGET_SECONDS = 120.0
#: The smallest spread allowed a ratio of two medians (a copy's and a call's): 5%.
FLOOR = 0.05
#: The reference RoPEs whose forward ×copy the page states (in place, fused, and complex-number).
REFERENCES = ("rope_inplace", "rope_compiled", "rope_complex")


def _run(length: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    bench = out / "benchmarks.json"
    command = [sys.executable, "-m", "pytest", "specs", "-m", "perf", "-q", "-p", "no:cacheprovider",
               "--matrix-dir", str(out), "--matrix", "none", "--perf-length", length, "--benchmark-json", str(bench)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not bench.exists():
        raise RuntimeError(f"the {length} perf run wrote no benchmarks:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = json.loads(bench.read_text())
    ratios = {f"{b['group']} | {b['extra_info']['encoder']}": b["extra_info"]["roofline_ratio"]
              for b in data["benchmarks"] if "roofline_ratio" in b.get("extra_info", {})}
    print(f"  {length}: {wall:.1f} s, {len(ratios)} benchmarks", file=sys.stderr)
    return {"wall": wall, "ratios": ratios, "rc": done.returncode}


def schedule(repeat: int, full_repeat: int) -> list[tuple[str, int]]:
    """The runs in the order they are made: short and full alternate (``S F S F S``), so a
    machine that drifts over the measurement moves both lengths alike."""
    order = []
    for i in range(max(repeat, full_repeat)):
        order += [("short", i)] if i < repeat else []
        order += [("full", i)] if i < full_repeat else []
    return order


def measure(repeat: int, full_repeat: int) -> dict:
    from posenc.harness.performance import machine

    with tempfile.TemporaryDirectory() as scratch:
        runs = {"short": [], "full": []}
        for length, i in schedule(repeat, full_repeat):  # interleaved: a machine's drift hits both lengths
            out = Path(scratch) / f"{length}-{i}"
            out.mkdir()
            runs[length].append(_run(length, out))
    keys = sorted(set.intersection(*(set(r["ratios"]) for r in runs["short"] + runs["full"])))
    rows = {}
    for key in keys:
        short = [r["ratios"][key] for r in runs["short"]]
        full = statistics.median(r["ratios"][key] for r in runs["full"])
        middle = statistics.median(short)
        rows[key] = {"short": short, "full": full, "noise": (max(short) - min(short)) / middle,
                     "difference": abs(full - middle) / middle}
    return {"machine": machine.device_name("cpu"), "torch": __import__("torch").__version__,
            "threads": __import__("torch").get_num_threads(), "date": time.strftime("%Y-%m-%d"),
            "repeat": repeat, "full_repeat": full_repeat, "schedule": "alternate",
            "short_wall": [r["wall"] for r in runs["short"]], "full_wall": [r["wall"] for r in runs["full"]],
            "rows": rows, "floors": kernel_floors.measure()}


def _within(row: dict) -> bool:
    return row["difference"] <= max(row["noise"], FLOOR)


def expected_within(repeat: int, full_repeat: int = 1, draws: int = 20000) -> float:
    """How often the median of ``full_repeat`` more runs of the same measurement lies within
    ``repeat`` runs' spread of their median (``|x − median| ≤ max − min``), for Gaussian noise:
    what agreement looks like when the short and the full run measure one ratio (seeded, so the
    page is stable)."""
    import random

    generator = random.Random(0)
    hits = 0
    for _ in range(draws):
        runs = [generator.gauss(0.0, 1.0) for _ in range(repeat)]
        full = statistics.median(generator.gauss(0.0, 1.0) for _ in range(full_repeat))
        hits += abs(full - statistics.median(runs)) <= max(runs) - min(runs)
    return hits / draws


def run_levels(rows: list[dict], repeat: int) -> list[float]:
    """Each short run's level: the median over the benchmarks of its ×copy over the full run's. A
    run's ratios move together with the machine, so two runs differ as a whole by its drift."""
    return [statistics.median(r["short"][i] / r["full"] for r in rows) for i in range(repeat)]


def _level_sentence(rows: list[dict], repeat: int) -> str:
    levels = run_levels(rows, repeat)
    above = sum(r["full"] > statistics.median(r["short"]) for r in rows)
    offset, span = abs(statistics.median(levels) - 1), max(levels) - min(levels)
    verdict = ("within what the short runs differ by among themselves: the machine's drift between runs, which one "
               "full run cannot tell from a shift made by the short length" if offset <= span else
               "beyond what the short runs differ by among themselves: a shift the short length may have made")
    return (f"The full run lies above the short runs' median for {above} of {len(rows)}. A run's ratios move "
            f"together: each short run's ×copy over the full run's, median over the benchmarks, is "
            f"{', '.join(f'{v:.2f}' for v in levels)}; the full run is {offset:.0%} from their median, they span "
            f"{span:.0%}, {verdict}.")


def _reference_lines(data: dict) -> list[str]:
    lines = ["| reference, forward, float32 | batch 1 ×copy (short runs) | batch 8 ×copy (short runs) |",
             "|---|---|---|"]
    for name in REFERENCES:
        cells = []
        for batch in (1, 8):
            found = [row for key, row in data["rows"].items()
                     if key.endswith(f"| {name}") and key.startswith(f"cpu forward: batch {batch},")]
            cells.append(", ".join(f"{v:.2f}" for v in found[0]["short"]) if found else "not measured")
        lines.append(f"| `{name}` | {cells[0]} | {cells[1]} |")
    return lines


def run_table_markdown(path: Path = RUN_MEASUREMENTS) -> str:
    if not Path(path).exists():
        return f"(not measured yet: `python -m posenc perf-benchmark --write` keeps the figures in {path})\n"
    data = json.loads(Path(path).read_text())
    median = statistics.median
    rows = list(data["rows"].values())
    within = sum(_within(r) for r in rows)
    alone = sum(r["difference"] <= r["noise"] for r in rows)
    differences = sorted(r["difference"] for r in rows)
    noises = sorted(r["noise"] for r in rows)
    measured = (f"Measured on {data['machine']}, torch {data['torch']}, "
                f"{data['date']}: `pytest specs -m perf`, start-up included, {data['repeat']} short runs and "
                f"{data['full_repeat']} full-length run(s)"
                + (", made alternately." if data.get("schedule") == "alternate" else "."))
    worst = sorted(data["rows"].items(), key=lambda kv: -kv[1]["difference"])[:3]
    lines = [*textwrap.wrap(measured, 100, break_on_hyphens=False), "",
             "| run | wall time (median) | the runs |", "|---|---:|---|",
             f"| `pytest specs -m perf` (short, the default) | {median(data['short_wall']):.1f} s | "
             f"{', '.join(f'{t:.1f}' for t in data['short_wall'])} |",
             f"| `pytest specs -m perf --perf-length full` | {median(data['full_wall']):.1f} s | "
             f"{', '.join(f'{t:.1f}' for t in data['full_wall'])} |", "",
             *textwrap.wrap(f"×copy of the {len(rows)} benchmarks, short against full: the full run's value lies "
                            f"within the short runs' noise (their spread, at least {FLOOR:.0%}) for {within} of "
                            f"{len(rows)}; within their spread alone for {alone} ({alone / len(rows):.0%}), where "
                            f"the same measurement made again would lie in "
                            f"{expected_within(len(data['short_wall']), len(data['full_wall'])):.0%} of cases "
                            f"(Gaussian noise, simulated). "
                            f"{_level_sentence(rows, len(data['short_wall']))} "
                            f"The short runs' spread: median {median(noises):.1%}, "
                            f"largest {noises[-1]:.1%}; the difference from the full run: median "
                            f"{median(differences):.1%}, largest {differences[-1]:.1%}.", 100,
                            break_on_hyphens=False), "",
             "The largest differences:", "", "| group | encoder | short runs | full | difference | noise |",
             "|---|---|---|---:|---:|---:|"]
    for key, row in worst:
        group, _, encoder = key.partition(" | ")
        lines.append(f"| {group.split(', seq')[0]} | `{encoder}` | {', '.join(f'{v:.2f}' for v in row['short'])} | "
                     f"{row['full']:.2f} | {row['difference']:.1%} | {row['noise']:.1%} |")
    return "\n".join([*lines, "", *_reference_lines(data), *_floor_lines(data)]) + "\n"


def _floor_lines(data: dict) -> list[str]:
    """The kernels under the references, ×copy at each batch (``kernel_floors``), where measured."""
    floors = data.get("floors")
    if not floors:
        return []
    batches = sorted(floors, key=int)
    size = f"{kernel_floors.SEQ} × {kernel_floors.HEADS} × {kernel_floors.HEAD_DIM}"
    lines = ["", f"What bounds them: the kernels alone, measured after the runs, each timed right after a copy as in them, "
                 f"forward, float32, q and k of {size} (`posenc.harness.performance.kernel_floors`):", "",
             "| kernel | " + " | ".join(f"batch {b}: µs, ×copy" for b in batches) + " |",
             "|---|" + "---:|" * len(batches)]
    for name in floors[batches[0]]:
        rows = [floors[b][name] for b in batches]
        cells = [f"{r['microseconds']:.0f}" + ("" if name.startswith("compiled call") else f", {r['xcopy']:.2f}")
                 for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines[:1], *textwrap.wrap(lines[1], 100, break_on_hyphens=False), *lines[2:]]


def run_summary_markdown(path: Path = RUN_MEASUREMENTS) -> str:
    """One sentence for README: the perf run's wall time at both lengths, where it was measured."""
    if not Path(path).exists():
        return "(the perf run's wall time is not measured yet: `python -m posenc perf-benchmark --write`)\n"
    data = json.loads(Path(path).read_text())
    text = (f"The first line takes {statistics.median(data['short_wall']):.0f} s on {data['machine']} "
            f"({statistics.median(data['full_wall']):.0f} s at `--perf-length full`; {data['date']}).")
    best = REFERENCES[0]
    spans = []
    for batch in (1, 8):
        found = [row["short"] for key, row in data["rows"].items()
                 if key.endswith(f"| {best}") and key.startswith(f"cpu forward: batch {batch},")]
        if found:
            spans.append(f"{min(found[0]):.2f}-{max(found[0]):.2f} at batch {batch}")
    if spans:
        text += f" `{best}` (a C kernel, in place): ×copy {', '.join(spans)}."
    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc perf-benchmark",
                                description="how long pytest specs -m perf takes, and whether its short length "
                                            "keeps the full one's ratios")
    parser.add_argument("--repeat", type=int, default=3, help="short runs (default 3)")
    parser.add_argument("--full-repeat", type=int, default=1, help="full-length runs (default 1)")
    parser.add_argument("--write", action="store_true", help=f"keep the figures in {RUN_MEASUREMENTS}")
    args = parser.parse_args(argv)
    for name in ("repeat", "full_repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return cli.keep_measurements(measure(args.repeat, args.full_repeat), RUN_MEASUREMENTS, args.write,
                                 run_table_markdown)


if __name__ == "__main__":
    sys.exit(main())
