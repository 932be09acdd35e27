"""The measuring instruments of the perf specs (``posenc.harness.profiling``, ``posenc.encoders.fused``), on CPU.

Exact, deterministic checks: peak memory of known allocation patterns, static bytes of a module
with a parameter, a buffer and a cache, minimum bytes of a workload, operator and kernel counts,
trace files, the RoFormer bound, and that the fused RoPE really runs compiled and equals the
eager rotation (forward and gradient). No timing thresholds here: those belong in benchmarks.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from torch import nn

from posenc import get
from posenc.encoders import fused
from posenc.harness import machine, profiling
from posenc.harness.reference import reference_frequencies, roformer_bound

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


# torch.compile on CPU generates C++: without a compiler the fused RoPE falls back to eager.
requires_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                       reason="torch.compile on CPU needs a C++ compiler")


@requires_compiler
def test_fused_rope_runs_compiled_and_launches_fewer_kernels():
    compiled = profiling.make_workload(get("rope_compiled"), seq=32, d_model=64, n_heads=4)
    eager = profiling.make_workload(get("rope_interleaved"), seq=32, d_model=64, n_heads=4)
    assert compiled.module.backends == {("cpu", torch.float32): "inductor"}
    assert profiling.count_ops(compiled.call, "cpu")["kernel_count"] < \
        profiling.count_ops(eager.call, "cpu")["kernel_count"]


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
