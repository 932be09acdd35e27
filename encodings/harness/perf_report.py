"""The performance summary printed at the end of a ``-m perf`` run, and its copy for TensorBoard.

One table per benchmark group, one row per encoder: median time, ratio to the fastest, peak and
static memory, minimum bytes moved, bandwidth and its ratio to a same-run copy, operator and
kernel counts; then the notes of the claim measurements (PERF-1, PERF-2, LIN-1, ROPE-12).
"""

from __future__ import annotations

import torch


def _mib(n) -> str:
    return f"{n / 2**20:7.2f}"


def summary_lines(benchmarks: list[dict]) -> list[str]:
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


def report(terminalreporter, perf) -> None:
    """The benchmark tables and the claim measurements of this run, and their TensorBoard copy."""
    if not (perf.benchmarks or perf.notes):
        return
    terminalreporter.section("posenc performance (per group: one row per encoder)")
    if perf.benchmarks:
        device_names = sorted({b["device_name"] for b in perf.benchmarks})
        terminalreporter.write_line("measured on: " + "; ".join(device_names) + f"; torch {torch.__version__}")
        terminalreporter.write_line("×copy = achieved bandwidth of the minimum bytes / bandwidth of a copy of "
                                    "the same bytes, same device, same run")
        for line in summary_lines(perf.benchmarks):
            terminalreporter.write_line(line)
    for note in perf.notes:
        terminalreporter.write_line(note)
    if perf.run_dir is not None and perf.run_dir.exists():
        _write_summary_text(perf.run_dir, perf.benchmarks, perf.notes)
        terminalreporter.write_line(f"profiles: {perf.run_dir}  (tensorboard --logdir {perf.run_dir.parent})")


def _write_summary_text(run_dir, benchmarks, notes) -> None:
    """The summary table in TensorBoard's Text tab: an offline cluster sees it without the
    profiler plug-in's Overview, whose charts load from the internet."""
    from torch.utils.tensorboard import SummaryWriter

    lines = summary_lines(benchmarks) + [""] + list(notes)
    with SummaryWriter(log_dir=str(run_dir / "summaries")) as writer:
        writer.add_text("benchmarks", "```\n" + "\n".join(lines).strip() + "\n```")
