"""RoPE rotated where q and k lie: one vectorised C pass, as inference engines apply it.

Same maths, angles and layout as :class:`RotaryEmbedding` with ``layout="interleaved"``
(000 §3.1, 004 §3.2): pair ``(x_2i, x_2i+1)`` at position ``m`` becomes
``(x_2i cos mθ_i − x_2i+1 sin mθ_i, x_2i sin mθ_i + x_2i+1 cos mθ_i)``, ``θ_i = base^(-2i/d)``,
angles formed as the eager module forms them. Written as ``y = x ⊙ C + swap(x) ⊙ S`` with
``C = (c_0, c_0, c_1, c_1, …)``, ``S = (−s_0, s_0, −s_1, s_1, …)`` and ``swap`` exchanging each
pair, it is one read and one write of ``x`` with three vector operations per load
(``rope_inplace.c``), the shape of vLLM's and FlashInfer's in-place RoPE kernels.

:meth:`InPlaceRotaryEmbedding.rotate_` rotates ``x`` itself (a tensor no autograd graph holds);
``forward`` returns a rotated copy, as every encoder does, through an autograd function whose
backward is the same kernel with ``S`` negated (``R_mᵀ = R_{−m}``). Float32 and float64 CPU
tensors take the kernel; other dtypes and devices, and float positions that require grad, take
the eager rotation. If the kernel cannot be built (no C compiler), the module warns once and
records ``eager (reason)`` in :attr:`backends`; ``POSENC_FUSED_STRICT=1`` raises instead.
"""

from __future__ import annotations

import ctypes
import functools
import warnings

import torch

from ..fused import strict_compilation
from ..positions import angle_dtype, resolve_positions
from ..rotary import RotaryEmbedding, _check_heads_input
from .build import KernelUnavailable, load

_SYMBOLS = {torch.float32: "rope_inplace_f32", torch.float64: "rope_inplace_f64"}
_KEPT = 8  # default-position tables and launches kept per module (one per shape and offset)


@functools.cache
def _kernel(dtype: torch.dtype):
    function = getattr(load("rope_inplace"), _SYMBOLS[dtype])
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, *[ctypes.c_int64] * 4, ctypes.c_int]
    function.restype = None
    return function


def _coefficients(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, 2·d)`` tables ``[C | S]`` and ``[C | −S]`` (the inverse rotation) from (B|1, S, d/2) cos, sin."""
    c = cos.reshape(-1, cos.shape[-1]).repeat_interleave(2, dim=-1)
    s = torch.stack((-sin, sin), dim=-1).reshape(c.shape)
    forward = torch.cat((c, s), dim=-1).to(dtype).contiguous()
    inverse = torch.cat((c, -s), dim=-1).to(dtype).contiguous()
    return forward, inverse


def _launch(shape: torch.Size, dtype: torch.dtype, table: torch.Tensor):
    """The kernel bound to one shape and table: called with the address of a contiguous ``x``."""
    batch, seq, heads, dim = shape
    kernel, table_address, table_rows = _kernel(dtype), table.data_ptr(), table.shape[0]

    def launch(address: int) -> None:
        kernel(address, table_address, table_rows, batch * seq, heads, dim, torch.get_num_threads())

    launch.table = table  # kept alive with the launch
    return launch


def _run(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The kernel on ``x`` (B, S, H, D), contiguous, in place."""
    _launch(x.shape, x.dtype, table)(x.data_ptr())
    return x


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, table, inverse):
        ctx.save_for_backward(table, inverse)
        return _run(x.detach().contiguous().clone(), table)

    @staticmethod
    def backward(ctx, grad):
        table, inverse = ctx.saved_tensors
        return _Rotation.apply(grad, inverse, table), None, None  # through apply: double backward too


def _kept(cache: dict, key, value):
    if len(cache) >= _KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


class InPlaceRotaryEmbedding(RotaryEmbedding):
    """Interleaved RoPE on ``(batch, seq, heads, head_dim)`` by a C kernel that works in place.

    ``backends`` maps ``(device type, dtype)`` to ``"native"`` or ``"eager (…reason…)"``.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0):
        super().__init__(head_dim, base=base, layout="interleaved")
        self.backends: dict[tuple[str, torch.dtype], str] = {}
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (dtype, seq, offset)
        self._launches: dict[tuple, object] = {}  # (dtype, shape, offset): rotate_ at default positions

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
        if default is not None and default in self._tables:
            return self._tables[default]
        tables = _coefficients(*self.cos_sin(pos, angle_dtype(dtype)), dtype)
        return _kept(self._tables, default, tables) if default is not None else tables

    def _positions(self, x, positions, offset):
        _check_heads_input(x, self.head_dim)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        default = (x.dtype, x.shape[1], offset) if positions is None else None
        return pos, default

    def rotate_(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0) -> torch.Tensor:
        """Rotate ``x`` in place and return it; ``x`` must be contiguous and outside any autograd graph."""
        if x.requires_grad or x._base is not None and x._base.requires_grad:
            raise ValueError("rotate_ rotates a tensor no autograd graph holds; use forward for a rotated copy")
        if not x.is_contiguous():
            raise ValueError(f"rotate_ needs a contiguous x, got strides {tuple(x.stride())}")
        key = (x.dtype, x.shape, offset) if positions is None and type(offset) is int and x.is_cpu else None
        launch = self._launches.get(key) if key is not None else None
        if launch is not None:  # a shape, dtype and offset seen before: its checks passed then
            launch(x.data_ptr())
            return x
        pos, default = self._positions(x, positions, offset)
        if not self._native(x, pos):
            return x.copy_(super().forward(x, pos))
        launch = _launch(x.shape, x.dtype, self._coefficients(pos, x.dtype, default)[0])
        if key is not None:
            _kept(self._launches, key, launch)
        launch(x.data_ptr())
        return x

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        pos, default = self._positions(x, positions, offset)
        if self._native(x, pos):
            return _Rotation.apply(x, *self._coefficients(pos, x.dtype, default))
        return super().forward(x, pos)

    def _apply(self, fn, *args, **kwargs):
        self._tables.clear()  # tables follow the module's device and dtype
        self._launches.clear()
        return super()._apply(fn, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, in_place=True"
