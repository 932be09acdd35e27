"""The measuring instruments of the perf specs (``posenc.harness.performance.profiling``, ``posenc.encoders.fused``), on CPU.

Exact, deterministic checks: peak memory of known allocation patterns, static bytes of a module
with a parameter, a buffer and a cache, minimum bytes of a workload, operator and kernel counts,
trace files, the RoFormer bound, and that the fused RoPE really runs compiled and equals the
eager rotation (forward and gradient). No timing thresholds here: those belong in benchmarks.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pytest
import torch
from torch import nn

from posenc import get
from posenc.encoders import fused
from posenc.harness.performance import machine, profiling
from posenc.harness.references.reference import reference_frequencies, roformer_bound

F32 = 4


def test_peak_memory_follows_allocations_and_frees_exactly():
    def fn():
        a = torch.ones(1000)
        b = torch.ones(2000)
        del a
        c = torch.ones(500)
        return b, c

    assert profiling.peak_memory(fn, "cpu") == (1000 + 2000) * F32

    def temporary():
        t = torch.empty(2**18)
        del t
        return torch.ones(10)

    assert profiling.peak_memory(temporary, "cpu") == 2**18 * F32


def test_an_allocation_and_its_free_on_one_timestamp_count_at_the_peak():
    """The profiler's clock can give a short-lived buffer's allocation and free one timestamp, in
    either order: the allocation is counted first (a CI run measured a peak of 0 so)."""
    import types

    def event(ns, nbytes):
        return types.SimpleNamespace(name=lambda: "[memory]", device_type=lambda: torch.autograd.DeviceType.CPU,
                                     start_ns=lambda: ns, nbytes=lambda: nbytes)

    prof = types.SimpleNamespace(profiler=types.SimpleNamespace(kineto_results=types.SimpleNamespace(
        events=lambda: [event(5, -2048), event(5, 2048)])))
    assert profiling._memory_events(prof) == [(5, 2048), (5, -2048)]
    trace = [{"name": "[memory]", "ts": 5, "args": {"Addr": 1, "Bytes": b, "Device Type": 0}} for b in (-2048, 2048)]
    assert profiling.peak_source_from_trace(trace).peak_bytes == 2048


def test_peak_memory_is_deterministic_for_an_encoder():
    work = profiling.make_workload(get("rope_interleaved"), seq=64, d_model=64, n_heads=4)
    peaks = {profiling.peak_memory(work.call, "cpu") for _ in range(3)}
    assert len(peaks) == 1 and peaks.pop() >= 2 * 64 * 64 * F32  # at least the two outputs


def test_static_memory_counts_parameters_buffers_and_caches_once():
    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(10))
            self.register_buffer("table", torch.zeros(5, dtype=torch.float64))
            self._cache = {"k": torch.zeros(3), "alias": self.weight.data[:4]}

    static = profiling.static_memory(Cached())
    assert static == {"parameter_bytes": 40, "buffer_bytes": 40, "cache_bytes": 12, "static_bytes": 92}


def test_minimum_bytes_of_a_workload():
    rotary = profiling.make_workload(get("rope_interleaved"), batch=2, seq=16, d_model=64, n_heads=4)
    x = 2 * 16 * 64 * F32
    assert rotary.min_bytes == 2 * (x + x)  # q and k read, both written
    trained = profiling.make_workload(get("learnable"), batch=2, seq=16, d_model=64, n_heads=4, backward=True)
    assert trained.min_bytes == 2 * (x + x + 16 * 64 * F32)  # x, y, table; twice for the backward
    assert trained.static["parameter_bytes"] == 16 * 64 * F32


def test_roofline_ratio_is_copy_time_over_call_time():
    r = profiling.roofline(10**9, seconds=0.5, copy_seconds=0.1)
    assert r["bandwidth_GBps"] == pytest.approx(2.0)
    assert r["copy_bandwidth_GBps"] == pytest.approx(10.0)
    assert r["roofline_ratio"] == pytest.approx(0.2)


def test_one_profiled_call_gives_the_peak_and_the_counts_of_two():
    """The perf run profiles a benchmark's call once: its memory events do not change the counts."""
    from posenc.harness.catalogue.registry import get

    for name, backward in (("rope_interleaved", False), ("attention_rope", True)):
        work = profiling.make_workload(get(name), seq=64, d_model=64, n_heads=4, backward=backward)
        source, counts = profiling.profile_call(work.call, "cpu")
        alone = profiling.count_ops(work.call, "cpu")
        assert (counts["op_count"], counts["kernel_count"]) == (alone["op_count"], alone["kernel_count"]), name
        assert str(source) == str(profiling.peak_source(work.call, "cpu")), name
        assert 0 < work.warmup_seconds < 10, name


def test_op_and_kernel_counts():
    x = torch.randn(64)
    counts = profiling.count_ops(lambda: (x + 1).view(8, 8).mul(2), "cpu")
    # add and mul, each with the copy_ that wraps its Python scalar; the view runs no kernel
    assert (counts["op_count"], counts["kernel_count"]) == (3, 4)


X, A, LINEAR = torch.randn(64), torch.randn(3, 4), torch.nn.Linear(4, 5)


@pytest.mark.parametrize("call, kernels", [
    (lambda: torch.cumsum(X, 0), {"aten::cumsum"}),  # computes, though it calls aten::to
    (lambda: X * 2, {"aten::mul", "aten::copy_"}),  # the scalar is copied into a tensor first
    (lambda: LINEAR(A), {"aten::addmm", "aten::copy_"}),  # linear is composite; addmm copies the bias
    (lambda: A.softmax(-1), {"aten::_softmax"}),  # softmax is composite
    (lambda: torch.stack((X, X)), {"aten::cat"}),  # stack's work is cat's
    (lambda: X.to(torch.float64), {"aten::copy_"}),  # to and _to_copy only allocate and dispatch
], ids=["cumsum", "mul-scalar", "linear", "softmax", "stack", "to"])
def test_cpu_kernel_counts_match_the_operators_in_the_trace(tmp_path, call, kernels):
    """Each counted kernel is an operator event of the profiler's own trace, and no other is."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        counted = profiling.count_ops(call, "cpu")["kernel_count"]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            call()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    operators = [e["name"] for e in events if e.get("cat") == "cpu_op"]
    computing = [name for name in operators if name in kernels]
    assert counted == len(computing) == len(kernels), (counted, operators)


def test_an_operator_calling_its_own_out_variant_is_one_kernel():
    """aten::arange dispatches to aten::arange (out=): two operator events of one name, one kernel."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.arange(10)
    assert [e.name for e in prof.events()].count("aten::arange") == 2
    assert profiling.count_ops(lambda: torch.arange(10), "cpu")["kernel_count"] == 1
    assert profiling.count_ops(lambda: torch.arange(10.0) * 2, "cpu")["kernel_count"] == 3  # + copy_ of the scalar, mul


# torch.compile on CPU generates C++: without a compiler the fused RoPE falls back to eager.
requires_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                       reason="torch.compile on CPU needs a C++ compiler")


@requires_compiler
def test_fused_rope_runs_compiled_and_launches_fewer_kernels():
    compiled = profiling.make_workload(get("rope_compiled"), seq=32, d_model=64, n_heads=4, fixed_shapes=True)
    eager = profiling.make_workload(get("rope_interleaved"), seq=32, d_model=64, n_heads=4)
    assert compiled.module.backends == {("cpu", torch.float32): "inductor (static shapes)"}
    generic = profiling.make_workload(get("rope_compiled"), seq=32, d_model=64, n_heads=4)  # as the specs run it
    assert generic.module.backends == {("cpu", torch.float32): "inductor"}
    assert profiling.count_ops(compiled.call, "cpu")["kernel_count"] < \
        profiling.count_ops(eager.call, "cpu")["kernel_count"]


@requires_compiler
def test_the_perf_runs_static_graph_answers_as_the_specs_dynamic_one():
    """The benchmark's graph (one per shape) and the specs' (one for every shape) are the same rotation."""
    torch.manual_seed(0)
    x = torch.randn(2, 9, 3, 8, requires_grad=True)
    dynamic, static = fused.CompiledRotaryEmbedding(8), fused.CompiledRotaryEmbedding(8)
    static.static_shapes = True
    y_d, y_s = dynamic(x), static(x)
    assert (dynamic.backends, static.backends) == ({("cpu", torch.float32): "inductor"},
                                                   {("cpu", torch.float32): "inductor (static shapes)"})
    torch.testing.assert_close(y_s, y_d)  # float32's tolerance: the two kernels may vectorise differently
    grad = torch.randn_like(y_d)
    torch.testing.assert_close(torch.autograd.grad(y_s, x, grad)[0], torch.autograd.grad(y_d, x, grad)[0])


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_rope_equals_eager_rope_and_its_gradient(dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 7, 2, 8, dtype=dtype, requires_grad=True)
    positions = torch.tensor([[0, 1, 2, 9, 100, 5000, 3]])
    compiled = fused.CompiledRotaryEmbedding(8).to(dtype)
    eager = get("rope_interleaved").make(dtype=dtype, d_model=16, n_heads=2)
    y_c, y_e = compiled(x, positions), eager(x, positions)
    assert compiled.backends[("cpu", dtype)] == "inductor"
    torch.testing.assert_close(y_c, y_e)
    grad = torch.randn_like(y_c)
    (g_c,) = torch.autograd.grad(y_c, x, grad)
    (g_e,) = torch.autograd.grad(y_e, x, grad)
    torch.testing.assert_close(g_c, g_e)


def test_fused_rope_falls_back_to_eager_when_compilation_fails(monkeypatch):
    def broken(*args):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(fused, "_kernel", lambda *a: broken)
    monkeypatch.delenv("POSENC_FUSED_STRICT", raising=False)
    module = fused.CompiledRotaryEmbedding(8)
    x = torch.randn(1, 4, 2, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = module(x)
    assert module.backends[("cpu", torch.float32)].startswith("eager (RuntimeError: no C++ compiler")
    assert any("torch.compile failed" in str(w.message) for w in caught)
    torch.testing.assert_close(y, fused.CompiledRotaryEmbedding(8, compile=False)(x))
    monkeypatch.setenv("POSENC_FUSED_STRICT", "1")
    with pytest.raises(RuntimeError, match="no C"):
        fused.CompiledRotaryEmbedding(8)(x)


def test_trace_has_shapes_and_memory(tmp_path):
    work = profiling.make_workload(get("learnable"), seq=16, d_model=32, n_heads=2)
    files = profiling.write_trace(work.call, tmp_path / "bench", "bench", "cpu", steps=2)
    assert len(files) == 1 and files[0].name.startswith("bench.") and files[0].name.endswith(".pt.trace.json")
    trace = json.loads(files[0].read_text())
    events = trace["traceEvents"]
    assert any("Input Dims" in e.get("args", {}) for e in events)
    assert any(e.get("name") == "[memory]" for e in events)


def test_roformer_bound_at_distance_zero_is_the_mean_of_one_to_half_d():
    d = 64
    theta = reference_frequencies(d, 10000.0)
    assert float(roformer_bound(theta, [0])[0]) == pytest.approx((d / 2 + 1) / 2)
    assert float(roformer_bound(theta, [1000])[0]) < float(roformer_bound(theta, [0])[0])


def test_machine_info_names_torch_cuda_and_gpus():
    info = machine.machine_info()
    assert info["torch"] == torch.__version__
    assert "cuda" in info and isinstance(info["gpus"], list)


def test_the_scaling_table_stops_at_a_declared_table_and_says_why():
    from specs.test_complexity import SCALING_LENGTHS, scaling_lengths

    assert scaling_lengths(get("rope_interleaved")) == SCALING_LENGTHS
    published = get("published_rope")  # 000 §3.2's cache of 2048 rows
    assert published.limits.max_position == 2048
    assert scaling_lengths(published) == tuple(n for n in SCALING_LENGTHS if n <= 2048)
    short = dataclasses.replace(published, max_position=600)
    with pytest.raises(pytest.skip.Exception, match="n/a: .*positions below 600: fewer than three"):
        scaling_lengths(short)
    with pytest.raises(pytest.skip.Exception, match="n/a: .*head_dim ≥ 2 up to 16; the scaling table runs at head_dim 64"):
        scaling_lengths(dataclasses.replace(published, max_head_dim=16))


def test_a_timed_curve_gives_the_memory_curve_a_fresh_workload_gives():
    """The scaling table and LIN-1 read peak memory off the workloads their time curve timed: the
    same peaks as workloads built for memory alone, on a module whose peak grows with length."""
    from specs import test_complexity as complexity

    lengths, config = (64, 128, 256), dict(d_model=32, n_heads=2)
    record = get("attention_rope")
    complexity._CURVES.clear()
    complexity.time_curve(record, "cpu", lengths, config, min_time=0.0, min_rounds=1)
    kept = complexity.memory_curve(record, "cpu", lengths, config)
    complexity._CURVES.clear()
    fresh = complexity.memory_curve(record, "cpu", lengths, config)
    complexity._CURVES.clear()
    assert kept == fresh and fresh[-1] > fresh[0]


class _PlantedScratch(nn.Module):
    """A correct RoPE that also fills a 32 MiB scratch buffer on every call."""

    def __init__(self, head_dim):
        super().__init__()
        self.rope = get("rope_interleaved").make(d_model=head_dim * 2, n_heads=2)

    def forward(self, x, positions=None, *, offset=0):
        scratch = torch.empty(8 * 2**20)  # 32 MiB of float32
        scratch.fill_(0.0)
        return self.rope(x, positions, offset=offset) + scratch[0]


def test_a_planted_allocation_is_named_as_the_source_of_the_peak():
    planted = dataclasses.replace(get("rope_interleaved"), name="planted_scratch",
                                  build=lambda c: _PlantedScratch(c.head_dim))
    work = profiling.make_workload(planted, seq=64, d_model=64, n_heads=4)
    source = profiling.peak_source(work.call, "cpu")
    assert (source.op, source.nbytes) == ("aten::empty", 32 * 2**20), source
    assert str(source) == "empty 32.00 MiB"
    assert source.peak_bytes == profiling.peak_memory(work.call, "cpu")  # the same peak, above the call's start
    clean = profiling.peak_source(profiling.make_workload(get("rope_interleaved"), seq=64, d_model=64, n_heads=4).call,
                                  "cpu")
    assert clean.nbytes < 2**20 and clean.op != "aten::empty", clean


def test_the_summary_table_names_the_peaks_source():
    from posenc.harness.performance.perf_report import summary_lines

    row = {"group": "g", "encoder": "planted_scratch", "seconds": 1e-3, "peak_bytes": 33 * 2**20,
           "peak_op": "empty 32.00 MiB", "static_bytes": 0, "min_bytes": 10**6, "bandwidth_GBps": 1.0,
           "roofline_ratio": 0.5, "op_count": 3, "kernel_count": 2, "top_ops": [("aten::fill_", 0.9)],
           "copy_seconds": 5e-4, "copy_bandwidth_GBps": 2.0}
    _, group, best, header, line = summary_lines([row])
    assert "peak by" in header and "empty 32.00 MiB" in line and len(line) <= 160
    assert best == "best ×copy: planted_scratch 0.50, against a copy of its 1.00 MB in 0.500 ms (2.0 GB/s)"


def _synthetic_trace():
    """One profiled step: a forward op, a backward node, and 1 MiB allocated then freed after the last op."""
    mib = 2**20
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0.0, "dur": 100.0, "cat": "user_annotation", "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::mul", "ts": 10.0, "dur": 20.0, "cat": "cpu_op", "pid": 1, "tid": 1},
        {"ph": "X", "name": "autograd::engine::evaluate_function: MulBackward0", "ts": 40.0, "dur": 40.0,
         "cat": "cpu_op", "pid": 1, "tid": 1},
        {"ph": "i", "name": "[memory]", "ts": 12.0, "args": {"Addr": 1, "Bytes": mib, "Total Allocated": 9 * mib,
                                                             "Device Type": 0}},
        {"ph": "i", "name": "[memory]", "ts": 95.0, "args": {"Addr": 1, "Bytes": -mib, "Total Allocated": 8 * mib,
                                                             "Device Type": 0}},
    ]
    return {"traceEvents": events}


def test_the_timeline_counts_memory_above_the_steps_start_and_keeps_frees_after_the_last_op(tmp_path):
    from posenc.harness.performance import plots

    trace = _synthetic_trace()
    events = plots._step_events(trace)
    assert plots._memory_curve(trace, events) == [(12.0, 2.0**20), (95.0, 0.0)]  # 8 MiB before the step is not shown
    assert plots.legend_entries(events) == ["MulBackward0", "mul"]  # backward nodes by name, most time first
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    image = plots.timeline(path, title="synthetic")
    assert image.size[0] == 1400 and image.size[1] > 150


def test_the_peak_source_reads_a_traces_memory_events():
    source = profiling.peak_source_from_trace(_synthetic_trace()["traceEvents"])
    assert (source.peak_bytes, source.nbytes, source.op) == (2**20, 2**20, "aten::mul")


def test_a_peak_inside_a_compiled_graph_is_named_without_its_cache_key():
    source = profiling.PeakSource(peak_bytes=2**20, op="## Call CompiledFxGraph feiknye23344rjwj ##", nbytes=2**20)
    assert str(source) == "compiled graph 1.00 MiB"


def test_the_perf_benchmark_alternates_short_and_full_runs():
    """A machine that drifts over the measurement moves both lengths alike: the full runs sit
    between the short ones, never all after them."""
    from posenc.tools.perf_figures import schedule

    assert schedule(3, 1) == [("short", 0), ("full", 0), ("short", 1), ("short", 2)]
    assert schedule(3, 2) == [("short", 0), ("full", 0), ("short", 1), ("full", 1), ("short", 2)]
    assert [length for length, _ in schedule(1, 3)].count("full") == 3


def test_agreement_of_the_two_lengths_is_judged_against_what_noise_alone_gives(tmp_path):
    """A fourth run lands within three runs' spread of their median about three times in four; a
    full run that differs from the short runs as a whole by more than they differ among themselves
    is named a possible shift, one within it the machine's drift."""
    from posenc.tools.perf_figures import expected_within, run_levels, run_summary_markdown, run_table_markdown

    assert 0.72 < expected_within(3) < 0.78 and expected_within(5) > expected_within(3)
    assert expected_within(3, full_repeat=3) > expected_within(3)  # a median of full runs moves less
    rows = {f"cpu forward: batch 1, seq 512 | e{i}": {"short": [1.0, 1.02, 0.99], "full": 1.3 + i / 100,
                                                       "noise": 0.03, "difference": 0.3} for i in range(12)}
    data = {"machine": "m", "torch": "t", "date": "d", "repeat": 3, "full_repeat": 1, "short_wall": [1.0, 1.0, 1.0],
            "full_wall": [2.0], "rows": rows}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    text = " ".join(run_table_markdown(path).split())
    assert "for 0 of 12; within their spread alone for 0 (0%), where the same measurement made again would lie in 74%" in text, text
    assert "above the short runs' median for 12 of 12." in text, text
    assert "the full run is 26% from their median, they span 2%, beyond what the short runs differ by" in text, text
    drifting = [{"short": [0.9, 1.0, 1.1], "full": 0.95 + i / 1000} for i in range(12)]
    assert [round(v, 2) for v in run_levels(drifting, 3)] == [0.94, 1.05, 1.15]
    for row in rows.values():
        row.update(short=[0.9, 1.0, 1.1], full=0.95)
    path.write_text(json.dumps(data))
    text = " ".join(run_table_markdown(path).split())
    assert "within what the short runs differ by among themselves" in text, text
    data["rows"]["cpu forward: batch 8, seq 512 | rope_inplace"] = {"short": [0.95, 0.91, 1.16], "full": 1.0,
                                                                    "noise": 0.3, "difference": 0.0}
    path.write_text(json.dumps(data))
    summary = " ".join(run_summary_markdown(path).split())
    assert summary.endswith("`rope_inplace` (a C kernel, in place): ×copy 0.91-1.16 at batch 8."), summary


def test_the_kernel_floors_compute_the_rope_they_stand_for_and_are_stated_per_batch():
    """The complex kernels and ``rope_inplace``'s (into new outputs, and in place on q and k, which
    it rotates in norm) timed as floors give ``rope_complex``'s q and k; the clone, the real multiply
    and the copy move the same bytes, of q and k; the page states each kernel at each batch, the
    one-element compiled call in microseconds only."""
    from posenc.harness.performance import kernel_floors
    from posenc.tools.perf_figures import _floor_lines

    kernels = kernel_floors._kernels(1)
    rope = kernels["rope_complex"]()
    for name in ("complex multiply, broadcast over heads", "complex multiply, phasors per head"):
        for got, want in zip(kernels[name](), rope):
            assert torch.equal(got, want), name
    forward = kernels["rope_inplace's kernel into new outputs (forward)"]()
    q_and_k = [t.clone() for t in kernels["new outputs, nothing computed (clone)"]()]
    rotated = kernels["rope_inplace, in place"]()  # q and k themselves, rotated once
    for name, got_q_and_k in (("forward", forward), ("in place", rotated)):
        for got, want in zip(got_q_and_k, rope):
            torch.testing.assert_close(got, want, msg=lambda m: f"rope_inplace {name}: {m}")
    assert all(torch.equal(a, b) for a, b in zip(rotated, kernels["new outputs, nothing computed (clone)"]()))
    for before, after in zip(q_and_k, rotated):  # a rotation keeps each pair's norm
        torch.testing.assert_close(after.norm(dim=-1), before.norm(dim=-1))
    for name in ("real multiply (x·x)", "new outputs, nothing computed (clone)"):
        assert sum(t.numel() for t in kernels[name]()) * 4 * 2 == 4 * 512 * 12 * 64 * 4, name
    q_and_k = kernels["new outputs, nothing computed (clone)"]()
    assert all(torch.equal(t * t, square) for t, square in zip(q_and_k, kernels["real multiply (x·x)"]()))
    floors = {b: {n: {"microseconds": 10.0 * int(b), "xcopy": 0.5} for n in kernels} for b in ("1", "8")}
    lines = _floor_lines({"floors": floors})
    assert "| rope_complex | 10, 0.50 | 80, 0.50 |" in lines
    assert "| compiled call, one element | 10 | 80 |" in lines
    assert _floor_lines({}) == []


def test_each_kernel_floor_is_timed_right_after_a_copy_as_the_perf_run_times_an_encoder():
    """The perf run times a copy as each round's setup, then the encoder: the floors pair them alike
    (a copy's cache state decides its speed at batch 1), taking the kernels in turn."""
    from posenc.harness.performance import kernel_floors

    log = []
    kernels = {"copy": lambda: log.append("copy"), "a": lambda: log.append("a"), "b": lambda: log.append("b")}
    samples = kernel_floors._after_copies(kernels, kernels["copy"], min_time=0.0, min_rounds=3)
    timed = log[4:]  # after one warm-up pair each
    assert timed[0::2] == ["copy"] * 6 and timed[1::2] == ["a", "b", "b", "a", "a", "b"], timed
    assert all(len(before) == len(own) == 3 for before, own in samples.values()) and set(samples) == {"a", "b"}
