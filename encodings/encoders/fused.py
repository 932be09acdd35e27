"""Fused RoPE: the rotation in one generated kernel (torch.compile / Inductor).

Same maths, angles and layout as :class:`RotaryEmbedding` with ``layout="interleaved"``
(000 §3.1, 004 §3.2): pair ``(x_2i, x_2i+1)`` at position ``m`` becomes
``(x_2i cos mθ_i − x_2i+1 sin mθ_i, x_2i sin mθ_i + x_2i+1 cos mθ_i)``, ``θ_i = base^(-2i/d)``,
angles formed in float32 (float64 for float64 input).

The eager module runs about ten kernels over ``x``-sized tensors (two strided halves, four
products, two sums, a stack, casts). Here ``cos``/``sin`` for ``(batch, seq, d/2)`` are formed
as in the eager module (a table ``2·heads`` times smaller than ``x``) and one kernel reads
``x`` once and writes ``y`` once. Inductor emits C++/OpenMP on CPU and Triton on CUDA.

Backward is the same kernel: ``∂L/∂x = R_mᵀ ∂L/∂y = R_{−m} ∂L/∂y`` (a rotation's adjoint
is its inverse: ``sin`` negated), so one compiled graph per dtype serves forward and backward.

Compilation happens once per (device type, dtype) on the first call; every size is dynamic
(unbacked), so new batch, sequence, head or head-dim sizes reuse the graph. That generic kernel
is what the specs run. ``static_shapes = True`` (set by the perf run's workloads) compiles one graph
per shape instead, specialised for the benchmark's sizes, as a model of fixed shapes would. If compilation
fails (no C++ compiler, an unsupported platform), the module warns once, falls back to the
eager rotation for that (device, dtype) and records it in
:attr:`CompiledRotaryEmbedding.backends`; ``POSENC_FUSED_STRICT=1`` raises instead. Float
positions that require grad (a learned position scale) take the eager path, which
differentiates through the positions.
"""

from __future__ import annotations

import os
import types
import warnings

import torch

from .positions import angle_dtype, resolve_positions
from .rotary import RotaryEmbedding, _check_heads_input

# Trust the CPU's reported vector ISA instead of dry-compiling a probe per ISA (about 20 s
# on a cold cache); compile in-process (a worker pool costs more than it saves here).
_INDUCTOR_OPTIONS = {"cpp.vec_isa_ok": True, "compile_threads": 1}


def strict_compilation() -> bool:
    """``POSENC_FUSED_STRICT``: 1/true/yes/on raise on a compiler failure; unset, 0/false/no/off fall back."""
    value = os.environ.get("POSENC_FUSED_STRICT", "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"POSENC_FUSED_STRICT must be one of 1, true, yes, on, 0, false, no, off; got {value!r}")


def _rotate_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE of ``x`` (R, H, D) with ``cos``, ``sin`` (R, D/2) in the angle dtype; one pass over ``x``."""
    torch._check(x.size(2) == 2 * cos.size(1))
    torch._check(cos.size(0) == x.size(0))
    xf = x.to(cos.dtype)
    a, b = xf[..., 0::2], xf[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).view(x.shape).to(x.dtype)


_COMPILED: dict[tuple[str, torch.dtype, bool], object] = {}


def _kernel(device_type: str, dtype: torch.dtype, static: bool = False):
    """One compiled function per (device type, dtype, static shapes), each with its own code object
    and so its own Dynamo cache and recompile budget."""
    key = (device_type, dtype, static)
    if key not in _COMPILED:
        name = f"_rotate_rows_{device_type}_{str(dtype)[6:]}{'_static' if static else ''}"
        code = _rotate_rows.__code__.replace(co_name=name)
        function = types.FunctionType(code, _rotate_rows.__globals__, code.co_name)
        _COMPILED[key] = torch.compile(function, dynamic=not static, fullgraph=True, options=_INDUCTOR_OPTIONS)
    return _COMPILED[key]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, static: bool = False) -> torch.Tensor:
    """``x`` (B, S, H, D), ``cos``/``sin`` (B|1, S, D/2): flattened to token rows so that one graph
    fits every shape (``static``: one graph per shape)."""
    import torch.fx.experimental._config as fx_config

    batch, seq, heads, dim = x.shape
    # detach(): tensors without a view base, so Dynamo guards on nothing but their own sizes
    rows = x.reshape(batch * seq, heads, dim).contiguous().detach()
    cos, sin = (t.expand(batch, seq, dim // 2).reshape(batch * seq, dim // 2).contiguous().detach()
                for t in (cos, sin))
    if static:
        return _kernel(x.device.type, x.dtype, True)(rows, cos, sin).view(batch, seq, heads, dim)
    for tensor in (rows, cos, sin):
        for d in range(tensor.dim()):  # unbacked: no specialisation on any size (1, 2, equal sizes, …)
            torch._dynamo.decorators.mark_unbacked(tensor, d)
    with fx_config.patch(use_duck_shape=False, backed_size_oblivious=True):
        out = _kernel(x.device.type, x.dtype)(rows, cos, sin)
    return out.view(batch, seq, heads, dim)


class _FusedRotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, static=False):
        ctx.save_for_backward(cos, sin)
        ctx.static = static
        return _rotate(x, cos, sin, static)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        # R_mᵀ = R_{−m}: the same kernel with sin negated; through apply, so double backward works too.
        return _FusedRotation.apply(grad, cos, -sin, ctx.static), None, None, None


class CompiledRotaryEmbedding(RotaryEmbedding):
    """Interleaved RoPE on ``(batch, seq, heads, head_dim)`` as one compiled kernel.

    ``backends`` maps ``(device type, dtype)`` to ``"inductor"`` or ``"eager (…reason…)"``.
    ``compile=False`` builds the same module on the eager path (for comparisons).
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0, compile: bool = True):
        super().__init__(head_dim, base=base, layout="interleaved")
        self.compile_enabled = compile
        self.static_shapes = False  # True: one graph per shape (the perf run), not one for every shape
        self.backends: dict[tuple[str, torch.dtype], str] = {}

    def _fused(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor | None:
        key = (x.device.type, x.dtype)
        if not self.backends.get(key, "inductor").startswith("inductor"):
            return None
        cos, sin = self.cos_sin(pos, angle_dtype(x.dtype))  # (B|1, S, D/2), as the eager module forms them
        try:
            out = _FusedRotation.apply(x, cos, sin, self.static_shapes)
        except Exception as error:  # noqa: BLE001 - any compiler failure means: use eager
            if strict_compilation():
                raise
            first_line = str(error).strip().partition("\n")[0]
            reason = f"{type(error).__name__}: {first_line}"
            self.backends[key] = f"eager ({reason})"
            warnings.warn(f"CompiledRotaryEmbedding: torch.compile failed for {key}, using eager RoPE: {reason}",
                          RuntimeWarning, stacklevel=3)
            return None
        self.backends[key] = "inductor (static shapes)" if self.static_shapes else "inductor"
        return out

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, *, offset: int = 0):
        _check_heads_input(x, self.head_dim)
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device,
                                angle_dtype=angle_dtype(x.dtype))
        if self.compile_enabled and not pos.requires_grad and x.numel():
            out = self._fused(x, pos)
            if out is not None:
                return out
        return super().forward(x, pos)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, compile={self.compile_enabled}"

