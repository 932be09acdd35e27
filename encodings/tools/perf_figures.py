"""README's table of measured benchmarks, generated from a committed measurement file.

``python -m posenc docs --perf-json BENCH.json`` keeps, from a pytest-benchmark JSON of
``pytest specs -m perf --benchmark-json BENCH.json``, what the table shows (per encoder and
mode: median time and ×copy; at forward batch 1: peak memory, the operator behind it, static
memory and kernels) and the machine it ran on, in ``docs/measurements/perf-cpu.json``; README's
``perf-table`` section is rendered from that file, so every figure there is one that was measured.
"""

from __future__ import annotations

import json
from pathlib import Path

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
