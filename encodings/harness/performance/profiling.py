"""Timing, memory, roofline and trace helpers for the performance specs (``pytest specs -m perf``).

* **Workload** - one encoder at one size, as the documents benchmark it (000 §4.1: seq 512,
  d_model 768): additive and attention encoders on ``x``; rotary encoders on ``q`` and ``k``,
  as inside attention. ``forward`` runs under ``torch.no_grad()``; ``forward+backward`` also
  back-propagates a fixed output gradient.
* **Time** - wall time of one call; on CUDA the call synchronises before it returns, so the
  host clock measures device time (``cuda_event_times`` cross-checks with CUDA events).
* **Peak memory** - bytes allocated at the peak of one call above those allocated before it:
  on CUDA from the caching allocator's peak statistics, on CPU from the profiler's memory
  events (every allocation and free, in order). Not RSS.
* **Static memory** - parameters, buffers and tensors the module keeps between calls (caches).
* **Roofline** - the bytes a call must move at least, ``B = |inputs| + |outputs| + |parameters|``
  (forward+backward adds ``|grad outputs| + |grad inputs| + |parameter grads|``, so ``2·B``);
  achieved bandwidth ``B / t``; and its ratio to a copy of ``B`` bytes timed the same way on the
  same device in the same run, ``t_copy / t``, which survives a noisy machine.
* **Counts** - operators dispatched and kernels run by one call, from the profiler.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import nn

from ..references.protocols import build_subject
from ..catalogue.records import BuildConfig, EncoderRecord

#: The documents' configuration (000 §4.1).
DOC_SEQ, DOC_D_MODEL, DOC_HEADS = 512, 768, 12


@dataclass(frozen=True)
class PerfLength:
    """How long a perf run times each thing: a benchmark's rounds (``--benchmark-max-time``, at
    least ``--benchmark-min-rounds``), the scaling table, ROPE-12's variants, the warm-up, LIN-1's curves,
    PERF-1's ranking."""

    benchmark_max_time: float  # each benchmark's rounds, with a same-run copy timed before each
    benchmark_min_rounds: int
    scaling_min_time: float  # the scaling table's interleaved lengths
    scaling_min_rounds: int
    overhead_min_time: float  # ROPE-12's interleaved variants, per length
    overhead_min_rounds: int
    warmup: int  # calls of a benchmark's workload before it is timed
    curve_min_time: float  # LIN-1's timed curves (lengths interleaved), per module
    curve_min_rounds: int
    ranking_min_time: float  # PERF-1's three encoders, interleaved
    ranking_min_rounds: int


#: ``--perf-length``: ``short`` bounds the rounds, which moves no ratio beyond its noise
#: (``python -m posenc perf-benchmark`` measures both); ``full`` is pytest-benchmark's own length.
PERF_LENGTHS = {"short": PerfLength(0.12, 3, 0.15, 3, 0.6, 6, 1, 0.3, 3, 0.5, 30),
                "full": PerfLength(1.0, 5, 1.0, 5, 2.0, 30, 2, 1.0, 5, 2.0, 30)}


@functools.cache
def _on_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def synchronize(device: str | torch.device) -> None:
    """Wait for ``device``'s queued work; on CPU nothing to wait for (asked once per device, since a
    timed call of tens of microseconds would otherwise time the question)."""
    if _on_cuda(device):
        torch.cuda.synchronize(device)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# ---------------------------------------------------------------- workloads

@dataclass
class Workload:
    """A ready-to-time call of one encoder; ``call()`` synchronises on CUDA."""

    name: str
    kind: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    backward: bool
    device: str
    grads: tuple[torch.Tensor, ...] = ()
    min_bytes: int = 0
    static: dict = field(default_factory=dict)
    warmup_seconds: float = 0.0  # the last warm-up call, timed (a call of this workload's own mode)
    in_place: bool = False  # forward alone times ``module.rotate_`` (checked against ``module``)

    def forward(self):
        """The encoder on each input; an in-place workload rotates its own inputs, as an inference
        engine rotates the q and k it just made."""
        if self.in_place:
            return tuple(self.module.rotate_(t) for t in self.inputs)
        return tuple(self.module(t) for t in self.inputs)

    def _drop_grads(self):
        for t in self.inputs:
            t.grad = None
        self.module.zero_grad(set_to_none=True)

    def call(self, sync: bool = True):
        """One timed call; ``sync=False`` only enqueues the work (for CUDA-event timing)."""
        if self.backward:
            self._drop_grads()
            torch.autograd.backward(self.forward(), self.grads)
            if sync:
                synchronize(self.device)
            self._drop_grads()  # freed inside the call: every call starts from the same memory
            return None
        with torch.no_grad():
            out = self.forward()
        if sync:
            synchronize(self.device)
        return out


def check_in_place(name: str, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Before the in-place path is timed: ``module.rotate_(x)`` must give ``module(x)``, the call the
    specs judge, on the benchmark's own inputs (float tolerances of their dtype)."""
    with torch.no_grad():
        for x in inputs:
            expected, got = module(x), module.rotate_(x.clone())
            try:
                torch.testing.assert_close(got, expected)
            except AssertionError as error:
                raise ValueError(f"{name}: rotate_ (in place) differs from forward, the call the specs judge, "
                                 f"so its in-place path is not timed: {str(error).strip().splitlines()[-1]}") from None


#: glibc's ``mallopt`` parameters: buffers below the mmap threshold come from the heap.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@functools.cache
def steady_allocator() -> bool:
    """Let glibc's malloc serve buffers up to 32 MiB (its largest mmap threshold) from its heap and
    keep freed memory (trim threshold 1 GiB), as a caching allocator (CUDA's, jemalloc) would.
    Otherwise each output above the default threshold (128 KiB, raised only to the last size freed)
    is a fresh mapping whose pages fault on first write, and a benchmark of a 1.5 MiB output times
    the kernel's page faults, not the encoder. Once per process; False where there is no glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20) and libc.mallopt(_M_TRIM_THRESHOLD, 2**30))
    except (OSError, AttributeError):
        return False


def make_workload(record: EncoderRecord, *, batch: int = 1, seq: int = DOC_SEQ, d_model: int = DOC_D_MODEL,
                  n_heads: int = DOC_HEADS, dtype: torch.dtype = torch.float32, device: str = "cpu",
                  backward: bool = False, seed: int = 0, max_len: int | None = None, warmup: int = 2,
                  fixed_shapes: bool = False) -> Workload:
    """Build ``record`` at this size, warm it up (caches filled, kernels compiled) and measure its
    bytes, with the allocator steady (:func:`steady_allocator`). ``fixed_shapes``: a compiled encoder
    is compiled for this size alone, as a model of fixed shapes compiles it (``fused.py``)."""
    steady_allocator()
    module = build_subject(record, dtype=dtype, device=device, d_model=d_model, n_heads=n_heads, max_len=max_len or seq)
    for part in module.modules() if fixed_shapes else ():
        if hasattr(part, "static_shapes"):
            part.static_shapes = True
    generator = torch.Generator(device="cpu").manual_seed(seed)
    shape = record.input_shape(batch, seq, BuildConfig(d_model=d_model, n_heads=n_heads))
    count = 2 if record.kind == "rotary" else 1  # rotary: q and k
    inputs = tuple(
        torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
        .requires_grad_(backward)
        for _ in range(count)
    )
    grads = tuple(torch.randn(shape, generator=generator).to(device=device, dtype=dtype) for _ in inputs) \
        if backward else ()
    work = Workload(record.name, record.kind, module, inputs, backward, device, grads)
    if not backward and hasattr(module, "rotate_"):
        check_in_place(record.name, module, inputs)
        work.in_place = True
    for _ in range(max(warmup, 1)):  # the last call's outputs give the bytes; backward's match its grads
        start = time.perf_counter()
        outputs = work.call()
        work.warmup_seconds = time.perf_counter() - start
    params = [p for p in module.parameters() if p.requires_grad]
    once = tensor_bytes(inputs) + tensor_bytes(grads if backward else outputs) + tensor_bytes(params)
    work.min_bytes = 2 * once if backward else once
    work.static = static_memory(module)
    return work


# ---------------------------------------------------------------- static memory

def static_memory(module: nn.Module) -> dict[str, int]:
    """Bytes the module holds between calls: parameters, buffers, and tensors cached in attributes.

    Each storage is counted once.
    """
    seen: set[int] = set()
    totals = {"parameter_bytes": 0, "buffer_bytes": 0, "cache_bytes": 0}

    def add(tensor, kind):
        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            return
        seen.add(storage.data_ptr())
        totals[kind] += storage.nbytes()

    for m in module.modules():
        for p in m._parameters.values():
            add(p, "parameter_bytes")
        for b in m._buffers.values():
            add(b, "buffer_bytes")
    for m in module.modules():
        for name, value in vars(m).items():
            if name in ("_parameters", "_buffers", "_modules"):
                continue
            values = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) \
                else (value,)
            for v in values:
                add(v, "cache_bytes")
    totals["static_bytes"] = sum(totals.values())
    return totals


# ---------------------------------------------------------------- peak memory

def _memory_events(prof) -> list[tuple[int, int]]:
    """``(time, bytes)`` of every CPU allocation (+) and free (−) the profiler recorded, in order."""
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    # an allocation and a free on one timestamp (the clock's resolution): the allocation first, so a
    # short-lived buffer still counts at the peak instead of cancelling out unseen
    return sorted(((e.start_ns(), e.nbytes()) for e in events), key=lambda pair: (pair[0], pair[1] < 0))


@dataclass(frozen=True)
class PeakSource:
    """The allocation that took one call's memory to its peak, and the operator that made it."""

    peak_bytes: int  # above the call's start
    op: str  # the innermost operator running when the allocation was made ("outside any operator" if none)
    nbytes: int  # that allocation's size

    def __str__(self) -> str:
        return f"{operator_label(self.op)} {self.nbytes / 2**20:.2f} MiB"


def operator_label(name: str) -> str:
    """An operator's name as the tables show it: ``aten::`` dropped, and a compiled graph's span,
    named by a cache key that changes from build to build, shown as ``compiled graph``."""
    return "compiled graph" if name.startswith("## Call CompiledFxGraph") else name.removeprefix("aten::")


def peak_source_from_trace(events: list[dict], cuda: bool = False) -> PeakSource:
    """The largest allocation alive at the peak of a chrome trace's memory events (``[memory]``
    instants with ``Addr`` and ``Bytes``, allocations positive, frees negative), counted from the
    trace's start, and the innermost operator whose span holds the moment it was made."""
    device = 1 if cuda else 0
    memory = sorted((e for e in events if e.get("name") == "[memory]"
                     and e.get("args", {}).get("Device Type", 0) == device),
                    key=lambda e: (e["ts"], int(e["args"]["Bytes"]) < 0))  # allocations first on a tie
    live: dict[int, tuple[int, float]] = {}
    running = peak = 0
    at_peak: dict[int, tuple[int, float]] = {}
    for event in memory:
        address, nbytes = event["args"]["Addr"], int(event["args"]["Bytes"])
        running += nbytes
        if nbytes > 0:
            live[address] = (nbytes, event["ts"])
        else:
            live.pop(address, None)
        if running > peak:
            peak, at_peak = running, dict(live)
    if not at_peak:
        return PeakSource(0, "no allocation", 0)
    nbytes, when = max(at_peak.values())
    spans = [(e["dur"], e["name"]) for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
             and e["ts"] <= when <= e["ts"] + e["dur"]]
    return PeakSource(int(peak), min(spans)[1] if spans else "outside any operator", nbytes)


def peak_source(fn: Callable[[], object], device: str) -> PeakSource:
    """Which operator allocated the largest block alive at one ``fn()``'s peak (from the trace's
    memory events: every allocation and free, with its address)."""
    return profile_call(fn, device)[0]


def profile_call(fn: Callable[[], object], device: str) -> tuple[PeakSource, dict[str, int]]:
    """:func:`peak_source` and :func:`count_ops` of one profiled ``fn()``: a perf run profiles each
    benchmark's call once."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    on_cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities, profile_memory=True) as prof:
        out = fn()
        synchronize(device)
    del out
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return peak_source_from_trace(events, cuda=on_cuda), _counts(prof, on_cuda)


def peak_memory(fn: Callable[[], object], device: str) -> int:
    """Bytes allocated at the peak of one ``fn()`` above those allocated just before it (outputs kept)."""
    if torch.device(device).type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = fn()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return int(peak)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    running = peak = 0
    for _, nbytes in _memory_events(prof):
        running += nbytes
        peak = max(peak, running)
    return int(peak)


# ---------------------------------------------------------------- time

def time_call(fn: Callable[[], object], *, min_time: float = 0.2, min_reps: int = 5, max_reps: int = 10_000,
              warmup: int = 1) -> list[float]:
    """Seconds per call of ``fn`` (which must synchronise on CUDA), one sample per call."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < min_reps or (time.perf_counter() - start < min_time and len(samples) < max_reps):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return samples


def median(samples) -> float:
    return float(statistics.median(samples))


def cuda_event_times(fn: Callable[[], object], reps: int = 20, warmup: int = 3) -> list[float]:
    """Seconds per call between CUDA events recorded around each call; ``fn`` should only enqueue
    work (no host synchronisation inside, or the idle time until the end event is counted too)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e-3)
    return out


def interleaved_samples(fns: Mapping[str, Callable[[], object]], *, min_time: float = 1.0,
                        min_rounds: int = 15, max_rounds: int = 2000) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round, timed in alternation (the order
    rotates every round) so drift hits all alike; sample ``i`` of every function is round ``i``."""
    names = list(fns)
    for name in names:
        fns[name]()
    samples = {name: [] for name in names}
    start, rounds = time.perf_counter(), 0
    while rounds < min_rounds or (time.perf_counter() - start < min_time and rounds < max_rounds):
        order = names[rounds % len(names):] + names[: rounds % len(names)]
        for name in order:
            t0 = time.perf_counter_ns()
            fns[name]()
            samples[name].append((time.perf_counter_ns() - t0) * 1e-9)
        rounds += 1
    return samples


def interleaved_medians(fns: Mapping[str, Callable[[], object]], **options) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternation (:func:`interleaved_samples`)."""
    return {name: median(s) for name, s in interleaved_samples(fns, **options).items()}


def ratio_interval(numerator: list[float], denominator: list[float], *, confidence: float = 0.95,
                   resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Median of the per-round ratios ``numerator[i] / denominator[i]`` and its bootstrap
    percentile confidence interval: ``(estimate, low, high)``."""
    import random

    ratios = [a / b for a, b in zip(numerator, denominator)]
    generator = random.Random(seed)
    medians = sorted(statistics.median(generator.choices(ratios, k=len(ratios))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    low, high = medians[int(tail * resamples)], medians[min(int((1 - tail) * resamples), resamples - 1)]
    return statistics.median(ratios), low, high


def paired_spread(numerator: list[float], denominator: list[float]) -> float:
    """IQR / median of the per-round ratios ``numerator[i] / denominator[i]``: how much two calls
    timed in alternation disagree from round to round (``perf_rules.BUSY_SPREAD``)."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    quartiles = statistics.quantiles(ratios, n=4)
    return (quartiles[2] - quartiles[0]) / statistics.median(ratios)


# ---------------------------------------------------------------- roofline

def copy_call(nbytes: int, device: str) -> Callable[[], object]:
    """A call that copies ``nbytes / 2`` bytes (so it moves ``nbytes``: read plus write)."""
    numel = max(nbytes // 2 // 4, 1)
    src = torch.rand(numel, device=device)
    dst = torch.empty_like(src)

    def call():
        dst.copy_(src)
        synchronize(device)

    return call


def roofline(min_bytes: int, seconds: float, copy_seconds: float) -> dict[str, float]:
    return {
        "bandwidth_GBps": min_bytes / seconds / 1e9,
        "copy_bandwidth_GBps": min_bytes / copy_seconds / 1e9,
        "roofline_ratio": copy_seconds / seconds,
    }


# ---------------------------------------------------------------- profiler counts and traces

#: Operators that only make views, metadata or uninitialised buffers: no kernel runs.
NO_KERNEL_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::transpose",
    "aten::permute", "aten::t", "aten::detach", "aten::alias", "aten::empty", "aten::empty_strided",
    "aten::empty_like", "aten::resize_", "aten::lift_fresh", "aten::view_as_real", "aten::view_as_complex",
    "aten::unflatten", "aten::flatten", "aten::split", "aten::chunk", "aten::narrow", "aten::unbind",
    "aten::result_type", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::resolve_conj",
    "aten::resolve_neg", "aten::set_", "aten::contiguous", "aten::to", "aten::type_as", "aten::numpy_T",
    "aten::split_with_sizes", "aten::unsafe_split", "aten::expand_as", "aten::view_as", "aten::_has_compatible_shallow_copy_type",
})


def _aten_ancestor(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


_DISPATCH: dict[tuple[str, str], bool] = {}


def _registered_for(name: str, key: str) -> bool:
    """Whether any overload of the operator ``name`` has a kernel for dispatch key ``key``."""
    if (name, key) not in _DISPATCH:
        packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
        found = False
        for overload in (packet.overloads() if packet is not None else ()):
            qualified = name if overload == "default" else f"{name}.{overload}"
            try:
                found = found or torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)
            except RuntimeError:
                continue
        _DISPATCH[(name, key)] = found
    return _DISPATCH[(name, key)]


def computes(event) -> bool:
    """An ``aten::`` operator that runs a kernel of its own on the CPU.

    Counted: operators with a CPU kernel (``cumsum``, ``mul``, ``addmm``, ``cat`` …) and
    ``CompositeExplicitAutograd`` operators that do their own work (``copy_``). Not counted:
    views, allocations and other metadata operators (:data:`NO_KERNEL_OPS`); operators that
    only call others, ``CompositeImplicitAutograd`` ones (``linear``, ``softmax``, ``to``) and
    explicit composites whose work a computing child does (``stack`` by ``cat``, ``_to_copy``
    by ``copy_``).
    """
    name = event.name
    if not name.startswith("aten::") or name in NO_KERNEL_OPS:
        return False
    if _registered_for(name, "CPU"):
        return True
    if _registered_for(name, "CompositeExplicitAutograd"):
        return not _computing_below(event)
    return False


def counts_as_kernel(event) -> bool:
    """A computing operator, counted once: an operator that hands its work to its own ``out=``
    variant (``aten::arange`` inside ``aten::arange``) is the same kernel, counted at the inner call."""
    return computes(event) and not any(child.name == event.name and computes(child) for child in event.cpu_children)


def _computing_below(event) -> bool:
    return any(computes(child) or _computing_below(child) for child in event.cpu_children)


def count_ops(fn: Callable[[], object], device: str) -> dict[str, int]:
    """Operators dispatched (``aten::`` calls not nested in another) and kernels run by one ``fn()``.

    Kernels: on CUDA the device kernels the profiler saw; on CPU the ``aten::`` operators that
    :func:`computes` accepts, plus each call of a compiled graph (counted as one: Inductor's C++
    kernels are not recorded individually).
    """
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda:
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        fn()
    return _counts(prof, on_cuda)


def _counts(prof, on_cuda: bool) -> dict[str, int]:
    events = prof.events()
    aten = [e for e in events if e.name.startswith("aten::")]
    ops = sum(1 for e in aten if not _aten_ancestor(e))
    if on_cuda:
        kernels = sum(1 for e in prof.profiler.kineto_results.events()
                      if e.device_type() == torch.autograd.DeviceType.CUDA and e.activity_type() == "kernel")
    else:
        compiled = [e for e in events if e.name.startswith("## Call CompiledFxGraph")]
        kernels = sum(1 for e in aten if counts_as_kernel(e)) + len(compiled)
    return {"op_count": ops, "kernel_count": kernels, "top_ops": top_operators(prof, on_cuda)}


def top_operators(prof, on_cuda: bool, count: int = 3) -> list[tuple[str, float]]:
    """The operators with the largest self time in one call, and their share of it."""
    rows = [(e.key, e.self_device_time_total if on_cuda else e.self_cpu_time_total)
            for e in prof.key_averages() if e.key.startswith("aten::") or e.key.startswith("## Call")]
    total = sum(t for _, t in rows) or 1.0
    return [(name, time / total) for name, time in sorted(rows, key=lambda r: -r[1])[:count] if time > 0]


def write_trace(fn: Callable[[], object], directory: str | Path, worker_name: str, device: str,
                steps: int = 3) -> list[Path]:
    """A torch.profiler trace of ``steps`` calls (after one warm-up step), with shapes and memory,
    written by ``tensorboard_trace_handler`` into ``directory``; returns the files written."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    before = set(directory.glob("*.pt.trace.json*"))
    activities = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=tensorboard_trace_handler(str(directory), worker_name=worker_name),
                 record_shapes=True, profile_memory=True) as prof:
        for _ in range(1 + steps):
            fn()
            prof.step()
    return sorted(set(directory.glob("*.pt.trace.json*")) - before)


# ---------------------------------------------------------------- fits

def loglog_slope(xs, ys) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-300)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
