"""RoPE rotated where q and k lie: one vectorised C pass, as inference engines apply it.

Same maths, angles and layout as :class:`RotaryEmbedding` with ``layout="interleaved"``
(000 §3.1, 004 §3.2): pair ``(x_2i, x_2i+1)`` at position ``m`` becomes
``(x_2i cos mθ_i − x_2i+1 sin mθ_i, x_2i sin mθ_i + x_2i+1 cos mθ_i)``, ``θ_i = base^(-2i/d)``,
angles formed as the eager module forms them. Written as ``y = x ⊙ C + swap(x) ⊙ S`` with
``C = (c_0, c_0, c_1, c_1, …)``, ``S = (−s_0, s_0, −s_1, s_1, …)`` and ``swap`` exchanging each
pair, it is one read of ``x`` and one write, with a shuffle, a multiply and a fused multiply-add
per vector (``rope_kernel.c``), the shape of vLLM's and FlashInfer's in-place RoPE kernels.

:meth:`InPlaceRotaryEmbedding.rotate_` rotates ``x`` itself (a tensor no autograd graph holds);
``forward`` returns a new tensor, as every encoder does, written by the same kernel in one pass,
through an autograd function where a graph is recorded, whose backward is the same kernel with
``S`` negated (``R_mᵀ = R_{−m}``). Float32 and float64 CPU
tensors take the kernel; other dtypes and devices, and float positions that require grad, take
the eager rotation. If the kernel cannot be built (no C compiler), the module warns once and
records ``eager (reason)`` in :attr:`backends`; ``POSENC_FUSED_STRICT=1`` raises instead.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import warnings

import torch
from torch.autograd import forward_ad

from ..fused import strict_compilation
from ..positions import angle_dtype, resolve_positions
from ..rotary import RotaryEmbedding, _check_heads_input
from .build import KernelUnavailable, load
from .caches import last_level_cache_bytes

_SYMBOLS = {torch.float32: "rope_f32", torch.float64: "rope_f64"}
_KEPT = 8  # default-position tables and launches kept per module (one per shape and offset)
_KEEPING = threading.Lock()  # threads sharing a module fill and evict its kept entries one at a time


@functools.cache
def _kernel(dtype: torch.dtype):
    function = getattr(load("rope_kernel"), _SYMBOLS[dtype])
    function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 4 + [ctypes.c_int, ctypes.c_int64]
    function.restype = None
    return function


def streamed_above() -> int:
    """Bytes of ``x`` above which the kernel streams it from memory: a quarter of the last-level cache."""
    return last_level_cache_bytes() // 4


def _coefficients(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, d)`` tables ``[cos | sin]`` and ``[cos | −sin]`` (the inverse rotation) from (B|1, S, d/2)
    cos, sin; the kernel makes ``C`` and ``S`` from them in registers."""
    cos, sin = cos.reshape(-1, cos.shape[-1]), sin.reshape(-1, sin.shape[-1])
    forward = torch.cat((cos, sin), dim=-1).to(dtype).contiguous()
    inverse = torch.cat((cos, -sin), dim=-1).to(dtype).contiguous()
    return forward, inverse


def _launch(shape: torch.Size, dtype: torch.dtype, table: torch.Tensor):
    """The kernel bound to one shape and table: called with the addresses of a contiguous ``x`` and
    of ``y`` (``x``'s own address: in place)."""
    batch, seq, heads, dim = shape
    kernel, table_address, table_rows = _kernel(dtype), table.data_ptr(), table.shape[0]
    rows, streamed, threads = batch * seq, streamed_above(), torch.get_num_threads

    def launch(source: int, target: int) -> None:
        kernel(source, target, table_address, table_rows, rows, heads, dim, threads(), streamed)

    launch.table = table  # kept alive with the launch
    return launch


def _rotated(x: torch.Tensor, launch) -> torch.Tensor:
    """A new tensor: ``x`` (contiguous) rotated in one pass, read once and written once."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    launch(x.data_ptr(), out.data_ptr())
    return out


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, table, inverse):
        ctx.save_for_backward(table, inverse)
        x = x.detach().contiguous()
        return _rotated(x, _launch(x.shape, x.dtype, table))

    @staticmethod
    def backward(ctx, grad):
        table, inverse = ctx.saved_tensors
        return _Rotation.apply(grad, inverse, table), None, None  # through apply: double backward too


def _kept(cache: dict, key, value):
    with _KEEPING:
        if key not in cache and len(cache) >= _KEPT:
            cache.pop(next(iter(cache)), None)
        cache[key] = value
    return value


_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_bump_version = torch.autograd.graph.increment_version


def _traced(x: torch.Tensor) -> bool:
    """Forward-mode AD or a torch.func transform sees ``x``: the kernel, which writes raw memory,
    would drop its tangent, so the eager rotation runs."""
    return forward_ad._current_level >= 0 or _wrapped(x)


def _table_key(x: torch.Tensor, positions, offset) -> tuple | None:
    """What a table at default positions is kept by, ``(dtype, length, offset)``; None for given
    positions, an offset that is not an int, or a tensor off the CPU (nothing is kept for them)."""
    if positions is not None or type(offset) is not int or not x.is_cpu:
        return None
    return x.dtype, x.shape[1], offset


class InPlaceRotaryEmbedding(RotaryEmbedding):
    """Interleaved RoPE on ``(batch, seq, heads, head_dim)`` by a C kernel that works in place.

    ``backends`` maps ``(device type, dtype)`` to ``"native"`` or ``"eager (…reason…)"``.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0):
        super().__init__(head_dim, base=base, layout="interleaved")
        self.backends: dict[tuple[str, torch.dtype], str] = {}
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (dtype, seq, offset)
        self._launches: dict[tuple, object] = {}  # (dtype, shape, offset): calls at default positions

    def _native(self, x: torch.Tensor, pos: torch.Tensor) -> bool:
        key = (x.device.type, x.dtype)
        if x.device.type != "cpu" or x.dtype not in _SYMBOLS or pos.requires_grad or not x.numel():
            return False
        if self.backends.get(key, "native") != "native":
            return False
        try:
            _kernel(x.dtype)
        except KernelUnavailable as error:
            if strict_compilation():
                raise
            self.backends[key] = f"eager ({error})"
            warnings.warn(f"InPlaceRotaryEmbedding: {error}; using eager RoPE", RuntimeWarning, stacklevel=3)
            return False
        self.backends[key] = "native"
        return True

    def _coefficients(self, pos: torch.Tensor, dtype: torch.dtype, default: tuple | None):
        kept = self._tables.get(default) if default is not None else None  # one lookup: a thread may evict
        if kept is not None:
            return kept
        tables = _coefficients(*self.cos_sin(pos, angle_dtype(dtype)), dtype)
        return _kept(self._tables, default, tables) if default is not None else tables

    def _positions(self, x, positions, offset):
        _check_heads_input(x, self.head_dim)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        return pos, _table_key(x, positions, offset)

    def _kept_launch(self, x: torch.Tensor, positions, offset):
        """The launch of an earlier call at default positions with this shape, dtype and offset: its
        input was checked then. None where there is none."""
        key = _table_key(x, positions, offset)
        return self._launches.get((x.dtype, x.shape, offset)) if key is not None else None

    def _kept_tables(self, x: torch.Tensor, positions, offset):
        """The tables of an earlier call at default positions with this dtype, length and offset."""
        key = _table_key(x, positions, offset) if x.dim() == 4 else None
        return self._tables.get(key) if key is not None else None

    def _new_launch(self, x: torch.Tensor, pos: torch.Tensor, default: tuple | None, offset: int):
        launch = _launch(x.shape, x.dtype, self._coefficients(pos, x.dtype, default)[0])
        if default is not None:
            _kept(self._launches, (x.dtype, x.shape, offset), launch)
        return launch

    def rotate_(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0) -> torch.Tensor:
        """Rotate ``x`` in place and return it; ``x`` must be contiguous and outside any autograd graph.
        Its version counter moves, as any in-place op's does, so a graph that saved ``x`` (or an
        alias of it) refuses to differentiate through the old values."""
        if x.requires_grad or x._base is not None and x._base.requires_grad:
            raise ValueError("rotate_ rotates a tensor no autograd graph holds; use forward for a rotated copy")
        if not x.is_contiguous():
            raise ValueError(f"rotate_ needs a contiguous x, got strides {tuple(x.stride())}")
        inference = x.is_inference()
        if inference and not torch.is_inference_mode_enabled():
            raise RuntimeError("rotate_: an in-place update to an inference tensor outside inference mode is not allowed")
        traced = _traced(x)
        launch = None if traced else self._kept_launch(x, positions, offset)
        if launch is None:
            pos, default = self._positions(x, positions, offset)
            if traced or not self._native(x, pos):
                return x.copy_(super().forward(x, pos))
            launch = self._new_launch(x, pos, default, offset)
        address = x.data_ptr()
        launch(address, address)
        if not inference:
            _bump_version(x)
        return x

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        graph, traced = x.requires_grad and torch.is_grad_enabled(), _traced(x)
        tables = self._kept_tables(x, positions, offset) if graph and not traced else None
        if tables is not None:  # a graph at default positions seen before: no positions to make
            _check_heads_input(x, self.head_dim)
            return _Rotation.apply(x, *tables)
        launch = None if graph or traced else self._kept_launch(x, positions, offset)
        if launch is not None and x.is_contiguous():  # no graph to record: the kernel straight into y
            return _rotated(x, launch)
        pos, default = self._positions(x, positions, offset)
        if traced or not self._native(x, pos):
            return super().forward(x, pos)
        if not graph:
            return _rotated(x.contiguous(), self._new_launch(x, pos, default, offset))
        return _Rotation.apply(x, *self._coefficients(pos, x.dtype, default))

    def __getstate__(self):  # launches hold ctypes functions: a pickled module builds them anew
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        return {**state, "_tables": {}, "_launches": {}}

    def _apply(self, fn, *args, **kwargs):
        self._tables.clear()  # tables follow the module's device and dtype
        self._launches.clear()
        return super()._apply(fn, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, in_place=True"
