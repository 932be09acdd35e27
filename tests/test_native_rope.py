"""rope_inplace: its C kernel is the eager rotation, in place and as a copy, and the perf run times
the in-place path only after checking it against the call the specs judge."""

from __future__ import annotations

import io
import pickle
import warnings

import pytest
import torch

from posenc import get
from posenc.encoders.native import InPlaceRotaryEmbedding, build
from posenc.encoders.rotary import RotaryEmbedding
from posenc.harness.performance import profiling

def _kernel_builds() -> bool:
    try:
        build.load("rope_kernel")
    except build.KernelUnavailable:
        return False
    return True


requires_compiler = pytest.mark.skipif(not _kernel_builds(), reason="the kernel is built by a C compiler ($CC or cc)")


def _pair(dtype=torch.float32):
    return InPlaceRotaryEmbedding(16).to(dtype), RotaryEmbedding(16, layout="interleaved").to(dtype)


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads, seq", [(3, 7), (1, 1), (5, 33)])
def test_the_kernel_is_the_eager_rotation_with_its_gradient(dtype, heads, seq):
    native, eager = _pair(dtype)
    x = torch.randn(2, seq, heads, 16, dtype=dtype, requires_grad=True)
    positions = torch.randint(0, 5000, (2, seq))
    for call in (dict(), dict(positions=positions), dict(offset=70_001), dict(), dict(offset=70_001)):
        y, expected = native(x, **call), eager(x, **call)  # again: the tables kept from the first
        torch.testing.assert_close(y, expected)
        grad = torch.randn_like(y)
        torch.testing.assert_close(torch.autograd.grad(y, x, grad)[0], torch.autograd.grad(expected, x, grad)[0])
    assert native.backends == {("cpu", dtype): "native"}


@requires_compiler
def test_a_kept_table_is_not_taken_for_an_input_of_another_head_size():
    native, eager = _pair()
    x = torch.randn(2, 9, 3, 16, requires_grad=True)
    torch.testing.assert_close(native(x), eager(x))
    with pytest.raises(ValueError, match="head_dim"):
        native(torch.randn(2, 9, 3, 8, requires_grad=True))
    more_heads = torch.randn(1, 9, 5, 16, requires_grad=True)  # same length: the table serves any heads and batch
    torch.testing.assert_close(native(more_heads), eager(more_heads))


@requires_compiler
@pytest.mark.parametrize("head_dim", [2, 6, 8, 24, 40, 128])
def test_every_head_size_is_rotated_whole_vectors_and_rest(head_dim):
    """The kernel takes a head two vectors at a time and the rest pair by pair: sizes below, at
    and between its vector widths (8 floats, 4 doubles)."""
    for dtype in (torch.float32, torch.float64):
        native = InPlaceRotaryEmbedding(head_dim).to(dtype)
        eager = RotaryEmbedding(head_dim, layout="interleaved").to(dtype)
        x = torch.randn(2, 5, 3, head_dim, dtype=dtype)
        torch.testing.assert_close(native(x, offset=9), eager(x, offset=9))
        torch.testing.assert_close(native.rotate_(x.clone(), offset=9), eager(x, offset=9))
        assert native.backends == {("cpu", dtype): "native"}


@requires_compiler
@pytest.mark.parametrize("shape, dtype", [((8, 2048, 12, 64), torch.float32), ((32, 4096, 8, 24), torch.float32),
                                          ((16, 4096, 8, 24), torch.float64)], ids=["f32-64", "f32-24", "f64-24"])
def test_a_tensor_streamed_from_memory_is_rotated_as_one_read_from_cache(shape, dtype):
    """Above a quarter of the last-level cache the kernel takes the heads in order (50-100 MB
    here), whole vectors and the rest of each head."""
    native = InPlaceRotaryEmbedding(shape[-1]).to(dtype)
    eager = RotaryEmbedding(shape[-1], layout="interleaved").to(dtype)
    x = torch.randn(shape, dtype=dtype)
    expected = eager(x, offset=3)
    torch.testing.assert_close(native(x, offset=3), expected)
    torch.testing.assert_close(native.rotate_(x, offset=3), expected)
    assert native.backends == {("cpu", dtype): "native"}


@requires_compiler
@pytest.mark.parametrize("head_dim", [2, 6, 16, 24, 64, 70])
@pytest.mark.parametrize("streamed", [0, 1 << 40], ids=["streamed", "from-cache"])
def test_both_loop_orders_rotate_alike_at_every_head_size(monkeypatch, head_dim, streamed):
    """The loop order is chosen by size alone: forced either way, small tensors give the eager rotation."""
    from posenc.encoders.native import inplace

    monkeypatch.setattr(inplace, "streamed_above", lambda: streamed)
    native = InPlaceRotaryEmbedding(head_dim)
    eager = RotaryEmbedding(head_dim, layout="interleaved")
    x = torch.randn(2, 11, 3, head_dim)
    torch.testing.assert_close(native(x, offset=5), eager(x, offset=5))
    torch.testing.assert_close(native.rotate_(x.clone(), offset=5), eager(x, offset=5))


def test_the_last_level_cache_is_the_core_s_as_sysfs_lists_it(tmp_path, monkeypatch):
    """The largest data or unified level wins; instruction caches and unreadable entries do not count;
    with none listed, sysconf, and without that a fixed size."""
    from posenc.encoders.native import caches

    for index, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "512K"), (3, "Unified", "32768K"),
                                                 (4, "Instruction", "1G")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", f"{level}\n"), ("type", f"{kind}\n"), ("size", f"{size}\n")):
            (folder / name).write_text(text)
    (tmp_path / "index9").mkdir()  # unreadable: skipped
    assert caches.sysfs_last_level_bytes(tmp_path) == 32 << 20
    assert caches.parse_size("1M") == 1 << 20 and caches.parse_size("4096") == 4096
    with pytest.raises(ValueError, match="not a cache size"):
        caches.parse_size("lots")
    assert caches.sysfs_last_level_bytes(tmp_path / "none") is None
    monkeypatch.setattr(caches, "sysfs_last_level_bytes", lambda: None)
    monkeypatch.setattr(caches.os, "sysconf", lambda name: 0)
    caches.last_level_cache_bytes.cache_clear()
    try:
        assert caches.last_level_cache_bytes() == caches.FALLBACK_BYTES
    finally:
        caches.last_level_cache_bytes.cache_clear()


@requires_compiler
def test_double_backward_goes_through_the_kernel():
    native, _ = _pair(torch.float64)
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(native, (x,))
    assert native.backends == {("cpu", torch.float64): "native"}


@requires_compiler
def test_rotate_in_place_writes_where_x_lies_and_equals_forward():
    native, eager = _pair()
    x = torch.randn(2, 9, 3, 16)
    expected, address = eager(x, offset=11), x.data_ptr()
    for _ in range(2):  # the first call builds the launch, the second reuses it
        y = native.rotate_(x.clone(), offset=11)
        torch.testing.assert_close(y, expected)
    out = native.rotate_(x, offset=11)
    assert out is x and x.data_ptr() == address
    torch.testing.assert_close(x, expected)


@requires_compiler
def test_a_launch_kept_for_one_shape_is_not_reused_for_another():
    native, eager = _pair()
    for seq, offset in ((9, 0), (9, 4), (4, 0), (9, 0)):
        x = torch.randn(2, seq, 3, 16)
        torch.testing.assert_close(native.rotate_(x.clone(), offset=offset), eager(x, offset=offset))


@requires_compiler
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_without_a_graph_forward_writes_a_new_tensor_in_one_pass_and_leaves_x(strided):
    native, eager = _pair()
    x = torch.randn(2, 4, 9, 16).transpose(1, 2) if strided else torch.randn(2, 9, 4, 16)  # strided: made contiguous
    kept = x.clone()
    with torch.no_grad():
        for _ in range(2):  # the first call builds the launch, the second reuses it (a contiguous x)
            for call in (dict(), dict(offset=300)):
                y = native(x, **call)
                torch.testing.assert_close(y, eager(x, **call))
                assert y.data_ptr() != x.data_ptr() and y.is_contiguous()
    assert len(native._launches) == 2 and torch.equal(x, kept)
    assert native.backends == {("cpu", torch.float32): "native"}


@requires_compiler
def test_rotate_in_place_moves_the_version_so_a_graph_that_saved_x_refuses():
    native, _ = _pair()
    x, w = torch.randn(1, 4, 2, 16), torch.randn(16, requires_grad=True)
    loss = (x * w).sum()  # saves x for w's gradient
    native.rotate_(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(loss, w)
    with torch.inference_mode():
        frozen = torch.randn(1, 4, 2, 16)
    with pytest.raises(RuntimeError, match="inference tensor outside inference mode"):
        native.rotate_(frozen)


@requires_compiler
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.func's own use of torch.jit
def test_forward_mode_and_function_transforms_keep_their_tangents():
    native, eager = _pair()
    x, tangent = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 3, 16)
    for module in (native, eager):  # each with a launch built first, as a model's first call builds it
        with torch.no_grad():
            module(x)
    got, want = torch.func.jvp(native, (x,), (tangent,)), torch.func.jvp(eager, (x,), (tangent,))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.func.grad(lambda a: native(a).square().sum())(x),
                               torch.func.grad(lambda a: eager(a).square().sum())(x))


@requires_compiler
def test_a_module_that_has_run_pickles_and_rotates_alike_after():
    native, _ = _pair()
    x = torch.randn(1, 6, 2, 16)
    with torch.no_grad():
        expected = native(x)
    buffer = io.BytesIO()
    torch.save(native, buffer)
    for copy in (pickle.loads(pickle.dumps(native)), torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)):
        with torch.no_grad():
            torch.testing.assert_close(copy(x), expected)


def test_rotate_refuses_a_graph_tensor_and_a_strided_one():
    native, _ = _pair()
    with pytest.raises(ValueError, match="no autograd graph"):
        native.rotate_(torch.randn(1, 4, 2, 16, requires_grad=True))
    with pytest.raises(ValueError, match="contiguous"):
        native.rotate_(torch.randn(1, 2, 4, 16).transpose(1, 2))


def test_half_precision_takes_the_eager_rotation():
    native, eager = _pair(torch.bfloat16)
    x = torch.randn(1, 6, 2, 16, dtype=torch.bfloat16)
    torch.testing.assert_close(native(x), eager(x))
    assert ("cpu", torch.bfloat16) not in native.backends


def test_without_a_compiler_it_warns_once_and_rotates_eagerly(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("POSENC_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("POSENC_FUSED_STRICT", raising=False)
    build.load.cache_clear()
    from posenc.encoders.native import inplace
    inplace._kernel.cache_clear()
    try:
        native, eager = _pair()
        x = torch.randn(1, 5, 2, 16)
        with pytest.warns(RuntimeWarning, match="could not build rope_kernel.c"):
            y = native(x)
        torch.testing.assert_close(y, eager(x))
        assert native.backends[("cpu", torch.float32)].startswith("eager (could not build")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once: the second call does not try again
            native.rotate_(x.clone())
        monkeypatch.setenv("POSENC_FUSED_STRICT", "1")
        with pytest.raises(build.KernelUnavailable, match="no-such-compiler"):
            InPlaceRotaryEmbedding(16)(x)
    finally:
        build.load.cache_clear()
        inplace._kernel.cache_clear()


@requires_compiler
def test_the_perf_run_times_the_in_place_path_of_an_in_place_encoder():
    work = profiling.make_workload(get("rope_inplace"), seq=32, d_model=64, n_heads=4)
    before = [t.clone() for t in work.inputs]
    addresses = [t.data_ptr() for t in work.inputs]
    outputs = work.call()
    assert [t.data_ptr() for t in outputs] == addresses  # rotated where they lie
    assert not torch.equal(outputs[0], before[0])
    assert work.min_bytes == 2 * sum(t.numel() * t.element_size() for t in before)  # read once, written once
    backward = profiling.make_workload(get("rope_inplace"), seq=32, d_model=64, n_heads=4, backward=True)
    assert backward.forward()[0].data_ptr() != backward.inputs[0].data_ptr()  # with autograd: a copy


@requires_compiler
def test_an_in_place_path_that_is_not_forward_is_refused_before_it_is_timed(monkeypatch):
    def rotate_by_the_wrong_angle(self, x, positions=None, *, offset=0):
        return x.copy_(RotaryEmbedding.forward(self, x, positions, offset=offset + 1))

    monkeypatch.setattr(InPlaceRotaryEmbedding, "rotate_", rotate_by_the_wrong_angle)
    with pytest.raises(ValueError, match="rope_inplace: rotate_ .in place. differs from forward"):
        profiling.make_workload(get("rope_inplace"), seq=32, d_model=64, n_heads=4)


@requires_compiler
def test_one_module_called_from_many_threads_rotates_each_call_right():
    """Threads sharing one module fill and evict its kept tables and launches at once (more shapes
    than it keeps): every call still equals the eager rotation, and none raises."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    native, eager = _pair()
    shapes = [(1, seq, 2, 16) for seq in range(1, 25)]  # 24 shapes, 8 kept
    inputs = [torch.randn(shape) for shape in shapes]
    expected = [eager(x, offset=i % 3) for i, x in enumerate(inputs)]

    def rotate_all(worker: int) -> int:
        wrong = 0
        for round_ in range(40):
            for i in range(len(inputs)):
                j = (i + worker * 5 + round_) % len(inputs)
                x, offset = inputs[j], j % 3
                got = native(x, offset=offset) if worker % 2 else native.rotate_(x.clone(), offset=offset)
                wrong += not torch.allclose(got, expected[j], rtol=1e-5, atol=1e-6)
        return wrong

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(rotate_all, range(4))) == 0
    finally:
        sys.setswitchinterval(interval)
