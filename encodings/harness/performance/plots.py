"""Pictures that need no network: log-log scaling plots and trace timelines, drawn with Pillow.

TensorBoard's Images tab shows them offline (the profiler plug-in's own views need a charting
script from the internet), and README embeds the same PNG files.

* :func:`loglog_plot` - one line per encoder, cost against sequence length, both axes in
  powers of two / ten, raw points (no smoothing);
* :func:`timeline` - one profiled step of a Chrome trace (``*.pt.trace.json``): one lane per
  thread or CUDA stream, one box per operator or kernel (backward ones by their autograd node's
  name), the longest ones labelled, a legend of the colours of the operators with the most time,
  the bytes allocated above the step's start (from the trace's memory events, frees after the
  last operator included), and a millisecond axis.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def _font():
    from PIL import ImageFont

    return ImageFont.load_default()


def loglog_plot(series: dict[str, list[tuple[float, float]]], *, title: str, xlabel: str, ylabel: str,
                size: tuple[int, int] = (900, 560)):
    """Lines of ``(x, y)`` points on log-log axes; returns a ``PIL.Image``."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = _font()
    left, right, top, bottom = 80, size[0] - 250, 40, size[1] - 60
    points = [(x, y) for line in series.values() for x, y in line if x > 0 and y > 0]
    if not points:
        draw.text((left, top), f"{title}: no data", fill="black", font=font)
        return image
    lx = [math.log2(x) for x, _ in points]
    ly = [math.log10(y) for _, y in points]
    x0, x1 = math.floor(min(lx)), math.ceil(max(lx))
    y0, y1 = math.floor(min(ly)), math.ceil(max(ly))
    x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)

    def at(x, y):
        return (left + (math.log2(x) - x0) / (x1 - x0) * (right - left),
                bottom - (math.log10(y) - y0) / (y1 - y0) * (bottom - top))

    draw.rectangle([left, top, right, bottom], outline="black")
    for e in range(x0, x1 + 1):
        px = left + (e - x0) / (x1 - x0) * (right - left)
        draw.line([px, bottom, px, top], fill="#e0e0e0")
        draw.text((px - 12, bottom + 6), f"{2 ** e}", fill="black", font=font)
    for e in range(y0, y1 + 1):
        py = bottom - (e - y0) / (y1 - y0) * (bottom - top)
        draw.line([left, py, right, py], fill="#e0e0e0")
        draw.text((8, py - 6), f"1e{e}", fill="black", font=font)
    draw.text((left, 12), title, fill="black", font=font)
    draw.text(((left + right) // 2 - 40, bottom + 28), xlabel, fill="black", font=font)
    draw.text((8, top - 28), ylabel, fill="black", font=font)
    for i, (name, line) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        xy = [at(x, y) for x, y in line if x > 0 and y > 0]
        if len(xy) > 1:
            draw.line(xy, fill=color, width=2)
        for px, py in xy:
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=color)
        draw.rectangle([right + 16, top + 16 * i + 2, right + 28, top + 16 * i + 12], fill=color)
        draw.text((right + 34, top + 16 * i), name, fill="black", font=font)
    return image


BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
LEGEND_ENTRIES = 10


def _step_span(trace: dict) -> tuple[float, float] | None:
    """(start, end) in µs of the last profiled step, or None when the trace has no step markers."""
    steps = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e
             and str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        return None
    step = max(steps, key=lambda e: e["ts"])
    return step["ts"], step["ts"] + step["dur"]


def _step_events(trace: dict) -> list[dict]:
    """Complete events of the last profiled step (all of them when the trace has no step markers)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    span = _step_span(trace)
    if span is not None:
        start, end = span
        events = [e for e in events if start <= e["ts"] and e["ts"] + e["dur"] <= end + 1]
    return [e for e in events if e.get("cat") in ("cpu_op", "kernel", "gpu_memcpy", "gpu_memset", "user_annotation")
            and not str(e.get("name", "")).startswith("ProfilerStep#")]


def display_name(name: str) -> str:
    """An event's name as drawn: ``aten::`` dropped, a backward step named by its autograd node."""
    return str(name).removeprefix(BACKWARD_PREFIX).removeprefix("aten::")


def legend_entries(events: list[dict], count: int = LEGEND_ENTRIES) -> list[str]:
    """The drawn names with the most time in the step (nested time counted once per event), longest first."""
    totals: dict[str, float] = {}
    for e in events:
        totals[display_name(e.get("name", ""))] = totals.get(display_name(e.get("name", "")), 0.0) + e["dur"]
    return [name for name, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:count]]


def timeline(trace_path: str | Path, *, width: int = 1400, title: str = ""):
    """One step of a Chrome trace as a picture; returns a ``PIL.Image``."""
    from PIL import Image, ImageDraw

    trace = json.loads(Path(trace_path).read_text())
    events = _step_events(trace)
    font = _font()
    lanes: dict[tuple, list[dict]] = {}
    for e in events:
        lane = ("GPU" if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else "CPU", e.get("pid"), e.get("tid"))
        lanes.setdefault(lane, []).append(e)
    depth_rows: list[tuple[tuple, int, list[dict]]] = []
    for lane, items in sorted(lanes.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), str(kv[0][2]))):
        items.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack_ends: list[float] = []
        by_depth: dict[int, list[dict]] = {}
        for e in items:
            while stack_ends and stack_ends[-1] <= e["ts"]:
                stack_ends.pop()
            by_depth.setdefault(len(stack_ends), []).append(e)
            stack_ends.append(e["ts"] + e["dur"])
        for depth in sorted(by_depth)[:6]:
            depth_rows.append((lane, depth, by_depth[depth]))
    memory = _memory_curve(trace, events)
    legend = legend_entries(events)
    colors: dict[str, str] = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(legend)}
    legend_rows = math.ceil(len(legend) / 5)
    row_h, left, top, memory_h = 18, 150, 40, (70 if memory else 0)
    height = top + row_h * max(len(depth_rows), 1) + memory_h + 50 + 16 * legend_rows + 8
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    if not events:
        draw.text((10, 10), f"{title}: no operator events in the trace", fill="black", font=font)
        return image
    t0 = min(e["ts"] for e in events)
    t1 = max([e["ts"] + e["dur"] for e in events] + [ts for ts, _ in memory])  # frees after the last operator too
    span = max(t1 - t0, 1e-3)
    scale = (width - left - 20) / span
    draw.text((10, 10), f"{title}  (one step, {span / 1e3:.3f} ms; lanes: thread or stream, nesting depth)",
              fill="black", font=font)
    for row, (lane, depth, items) in enumerate(depth_rows):
        y = top + row * row_h
        draw.text((6, y + 3), f"{lane[0]} {lane[2]} d{depth}"[:22], fill="black", font=font)
        for e in items:
            x0 = left + (e["ts"] - t0) * scale
            x1 = max(x0 + 1, left + (e["ts"] + e["dur"] - t0) * scale)
            label = display_name(e.get("name", ""))
            color = colors.setdefault(label, PALETTE[len(colors) % len(PALETTE)])
            draw.rectangle([x0, y + 1, x1, y + row_h - 2], fill=color, outline="white")
            if x1 - x0 > 6 * len(label) + 4:
                draw.text((x0 + 2, y + 3), label, fill="white", font=font)
    if memory:  # bytes allocated over the step, as a step line under the lanes
        base_y, peak = top + row_h * len(depth_rows) + memory_h, max(v for _, v in memory) or 1
        low = min(v for _, v in memory)
        draw.text((6, base_y - memory_h + 4), f"MiB above start\n{low / 2**20:.2f} … {peak / 2**20:.2f}",
                  fill="black", font=font)
        points = []
        for ts, value in memory:
            x = left + (min(max(ts, t0), t1) - t0) * scale
            y = base_y - 6 - (value - low) / max(peak - low, 1) * (memory_h - 16)
            points += [(x, points[-1][1]), (x, y)] if points else [(x, y)]
        points.append((width - 20, points[-1][1]))
        draw.line(points, fill="#d62728", width=2)
    axis_y = top + row_h * len(depth_rows) + memory_h + 8
    draw.line([left, axis_y, width - 20, axis_y], fill="black")
    ticks = 10
    for i in range(ticks + 1):
        x = left + i * (width - left - 20) / ticks
        draw.line([x, axis_y, x, axis_y + 4], fill="black")
        draw.text((x - 14, axis_y + 8), f"{i * span / ticks / 1e3:.3f}", fill="black", font=font)
    draw.text((width - 80, axis_y + 24), "ms", fill="black", font=font)
    legend_y = axis_y + 40
    for i, name in enumerate(legend):  # the colours of the operators with the most time, five per row
        x, y = left + (i % 5) * ((width - left - 20) // 5), legend_y + 16 * (i // 5)
        draw.rectangle([x, y + 2, x + 10, y + 12], fill=colors[name])
        draw.text((x + 14, y), name[:36], fill="black", font=font)
    return image


def _memory_curve(trace: dict, events: list[dict]) -> list[tuple[float, float]]:
    """(time, bytes allocated above the step's start) from the trace's ``[memory]`` events within the
    step (its marker's span, so frees after the last operator count; else the operators' span)."""
    if not events:
        return []
    span = _step_span(trace) or (min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events))
    memory = sorted((e for e in trace.get("traceEvents", []) if e.get("name") == "[memory]"
                     and "Total Allocated" in e.get("args", {}) and span[0] <= e["ts"] <= span[1]),
                    key=lambda e: e["ts"])
    if not memory:
        return []
    start = float(memory[0]["args"]["Total Allocated"]) - float(memory[0]["args"].get("Bytes", 0))
    return [(e["ts"], float(e["args"]["Total Allocated"]) - start) for e in memory]


def top_operators_from_trace(trace_path: str | Path, count: int = 10) -> list[tuple[str, float, int]]:
    """(name, total ms, calls) of the operators with the most time in one step of the trace,
    counting each event's own time (its duration minus that of the events nested in it)."""
    events = sorted(_step_events(json.loads(Path(trace_path).read_text())), key=lambda e: (e["ts"], -e["dur"]))
    own: dict[str, list[float]] = {}
    stacks: dict[tuple, list[dict]] = {}  # one nesting stack per thread or CUDA stream
    for e in events:
        stack = stacks.setdefault((e.get("pid"), e.get("tid")), [])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            own[stack[-1]["name"]][0] -= e["dur"]
        own.setdefault(e["name"], [0.0, 0])
        own[e["name"]][0] += e["dur"]
        own[e["name"]][1] += 1
        stack.append(e)
    ranked = sorted(own.items(), key=lambda kv: -kv[1][0])[:count]
    return [(name, total / 1e3, calls) for name, (total, calls) in ranked]
