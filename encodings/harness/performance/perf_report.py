"""The performance summary printed at the end of a ``-m perf`` run, and its copy for TensorBoard.

Printed last, after pytest-benchmark's own (narrowed) tables:

* one table per benchmark group, one row per encoder: median time, ratio to the fastest, peak
  memory above the call's start and the operator that allocated the largest block alive at the
  peak, static memory, minimum bytes moved, bandwidth and ×copy, operator and kernel counts, and
  the operator with the largest share of the call's time;
* the notes of the claim measurements (PERF-1, PERF-2, LIN-1, ROPE-12);
* the scaling table: time and peak memory against sequence length for every RoPE and attention
  module, with log-log slopes;
* regressions against a saved run, one line each (``--perf-compare``).

With ``--profile`` the same tables go to TensorBoard's Text tab, the log-log plots and each
benchmark's timeline to its Images tab: all of it readable with no network.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from . import plots, profiling
from ..verdicts.width import terminal_width, wrap



def _mib(n) -> str:
    return f"{n / 2**20:7.2f}"


def _top(row: dict) -> str:
    top = row.get("top_ops") or []
    return f"{profiling.operator_label(top[0][0])[:18]} {top[0][1]:.0%}" if top else ""


def summary_lines(benchmarks: list[dict]) -> list[str]:
    lines = []
    groups: dict[str, list[dict]] = {}
    for b in benchmarks:
        groups.setdefault(b["group"], []).append(b)
    header = (f"{'encoder':32s} {'median ms':>9s} {'×fast':>6s} {'peak MiB':>8s} {'peak by':22s} {'stat MiB':>8s} "
              f"{'min MB':>7s} {'GB/s':>7s} {'×copy':>6s} {'ops':>4s} {'kern':>4s}  top operator")
    for group, rows in groups.items():
        lines += ["", group, best_line(rows), header]
        fastest = min(r["seconds"] for r in rows)
        for r in sorted(rows, key=lambda r: r["seconds"]):
            lines.append(
                f"{r['encoder'][:32]:32s} {r['seconds'] * 1e3:9.3f} {r['seconds'] / fastest:6.2f} "
                f"{_mib(r['peak_bytes']):>8s} {r.get('peak_op', '')[:22]:22s} {_mib(r['static_bytes']):>8s} "
                f"{r['min_bytes'] / 1e6:7.2f} "
                f"{r['bandwidth_GBps']:7.2f} {r['roofline_ratio']:6.3f} {r['op_count']:4d} {r['kernel_count']:4d}  "
                f"{_top(r)}"
            )
        by_name = {r["encoder"]: r for r in rows}
        if "rope_compiled" in by_name and "rope_interleaved" in by_name:
            fused, eager = by_name["rope_compiled"], by_name["rope_interleaved"]
            lines.append(f"fused RoPE: time rope_compiled / rope_interleaved = {fused['seconds'] / eager['seconds']:.3f}, "
                         f"×copy {fused['roofline_ratio']:.3f} (eager {eager['roofline_ratio']:.3f}); "
                         f"kernels {fused['kernel_count']} vs {eager['kernel_count']}")
    return lines


def best_line(rows: list[dict]) -> str:
    """The group's answer first: its best ×copy, beside the copy it is measured against."""
    best = max(rows, key=lambda r: r["roofline_ratio"])
    return (f"best ×copy: {best['encoder']} {best['roofline_ratio']:.2f}, against a copy of its "
            f"{best['min_bytes'] / 1e6:.2f} MB in {best['copy_seconds'] * 1e3:.3f} ms "
            f"({best['copy_bandwidth_GBps']:.1f} GB/s)")


def duration_line(perf) -> str:
    """How long the run took to its summary, and at which ``--perf-length``."""
    other = "full" if perf.length == "short" else "short"
    return (f"perf run: {len(perf.benchmarks)} benchmarks, {time.perf_counter() - perf.started:.0f} s to this "
            f"summary ({perf.length} length; --perf-length {other} for the other)")


def scaling_lines(scaling: list[dict]) -> list[str]:
    """Time and peak memory against sequence length, one row per encoder, with log-log slopes:
    one table per device and configuration."""
    lines = []
    tables: dict[tuple, list[dict]] = {}
    for row in scaling:
        tables.setdefault((row["device"], row["d_model"], row["n_heads"], tuple(row["lengths"])), []).append(row)
    for (device, d_model, n_heads, lengths), rows in tables.items():
        lines += ["", f"scaling: forward at batch 1, d_model {d_model}, {n_heads} heads, float32, {device}; "
                      "each cell: median ms / peak MiB; slope k of cost ∝ n^k",
                  f"{'encoder':32s}" + "".join(f" {f'n={n}':>15s}" for n in lengths) + f" {'k time':>7s} {'k mem':>6s}"]
        for row in sorted(rows, key=lambda r: r["encoder"]):
            cells = "".join(f" {f'{t * 1e3:.3g} / {p / 2**20:.3g}':>15s}"
                            for t, p in zip(row["seconds"], row["peak_bytes"]))
            lines.append(f"{row['encoder'][:32]:32s}{cells} {row['time_slope']:7.2f} {row['memory_slope']:6.2f}")
    return lines


def scaling_plots(scaling: list[dict]) -> dict[str, object]:
    def series(field, scale):
        return {f"{r['encoder']} ({r['device']})": [(n, v * scale) for n, v in zip(r["lengths"], r[field])]
                for r in scaling}

    return {
        "scaling_time": plots.loglog_plot(series("seconds", 1e3), title="forward time against sequence length",
                                          xlabel="sequence length n", ylabel="median ms"),
        "scaling_peak_memory": plots.loglog_plot(series("peak_bytes", 2.0**-20),
                                                 title="peak memory against sequence length",
                                                 xlabel="sequence length n", ylabel="peak MiB"),
    }


def report(terminalreporter, perf) -> None:
    """The benchmark tables, claim notes, scaling table and regressions, and their TensorBoard copy."""
    if not (perf.benchmarks or perf.notes or perf.scaling or perf.regressions):
        return
    fit = terminal_width()
    table = terminalreporter.write_line  # a table's rows are never wrapped (perf tables fit 160 columns)

    def write(line, **markup):
        for piece in wrap(line, fit):
            terminalreporter.write_line(piece, **markup)

    terminalreporter.section("posenc performance (per group: one row per encoder)", fullwidth=fit)
    if perf.benchmarks:
        write(duration_line(perf))
        device_names = sorted({b["device_name"] for b in perf.benchmarks})
        write("measured on: " + "; ".join(device_names) + f"; torch {torch.__version__}")
        write("×copy = time of a copy of the call's minimum bytes / time of the call, timed interleaved")
        for line in summary_lines(perf.benchmarks):
            table(line)
    for note in perf.notes:
        write(note)
    for line in scaling_lines(perf.scaling):
        table(line)
    for regression in perf.regressions:
        write(regression, red=True)
    if perf.run_dir is not None:
        perf.run_dir.mkdir(parents=True, exist_ok=True)
        written = write_tensorboard(perf)
        write(f"profiles: {perf.run_dir} ({written}; tensorboard --logdir {perf.run_dir.parent})")


def _as_tensor(image) -> torch.Tensor:
    rgb = image.convert("RGB")
    return torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(rgb.height, rgb.width, 3)


def write_tensorboard(perf) -> str:
    """Tables to the Text tab, scaling plots and timelines to the Images tab (all offline)."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir: Path = perf.run_dir
    images = 0
    with SummaryWriter(log_dir=str(run_dir / "summaries")) as writer:
        lines = summary_lines(perf.benchmarks) + [""] + list(perf.notes) + scaling_lines(perf.scaling)
        writer.add_text("benchmarks", "```\n" + "\n".join(lines).strip() + "\n```")
        if perf.scaling:
            for name, image in scaling_plots(perf.scaling).items():
                image.save(run_dir / f"{name}.png")
                writer.add_image(f"scaling/{name}", _as_tensor(image), dataformats="HWC")
                images += 1
        for bench in perf.benchmarks:
            if "timeline" not in bench:
                continue
            from PIL import Image

            tag = Path(bench["timeline"]).parent.name
            writer.add_image(f"timeline/{tag}", _as_tensor(Image.open(bench["timeline"])), dataformats="HWC")
            top = plots.top_operators_from_trace(bench["trace"][0])
            table = "| operator | own ms in one step | calls |\n|---|---|---|\n" + "\n".join(
                f"| `{name}` | {ms:.4f} | {calls} |" for name, ms, calls in top)
            writer.add_text(f"top_operators/{tag}", table)
            images += 1
    return f"{images} images and the tables in TensorBoard"
