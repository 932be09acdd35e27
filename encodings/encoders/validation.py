"""Input validation shared by every encoder.

Each check raises ``TypeError`` or ``ValueError`` whose message names the
limit that was broken, so a user never gets silent garbage.
"""

from __future__ import annotations

import math
import numbers

import torch


def require_float(x: torch.Tensor, what: str = "input") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"{what} must have a floating-point dtype (float16, bfloat16, float32 or float64), "
            f"got {x.dtype}"
        )


def require_rank(x: torch.Tensor, rank: int, layout: str, what: str = "input") -> None:
    if x.dim() != rank:
        raise ValueError(
            f"{what} must have rank {rank} with layout {layout}, got rank {x.dim()} "
            f"with shape {tuple(x.shape)}"
        )


def require_last_dim(x: torch.Tensor, size: int, name: str, what: str = "input") -> None:
    if x.shape[-1] != size:
        raise ValueError(
            f"{what} last dimension must equal {name}={size}, got {x.shape[-1]} "
            f"(shape {tuple(x.shape)})"
        )


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def require_positive_int(value: int, name: str, meaning: str = "") -> None:
    """``value`` is a whole number ≥ 1 (a count or a length); ``meaning`` says what it limits."""
    if not (_is_int(value) and value > 0):
        raise ValueError(f"{name} must be a positive integer{f' ({meaning})' if meaning else ''}, got {value!r}")


def require_even(value: int, name: str) -> None:
    if not _is_int(value) or value <= 0 or value % 2 != 0:
        raise ValueError(f"{name} must be a positive even number (rotations act on pairs), got {value}")


def require_divisible(d_model: int, n_heads: int) -> int:
    require_positive_int(d_model, "d_model")
    require_positive_int(n_heads, "n_heads")
    if d_model % n_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; "
            f"head_dim = d_model / n_heads must be an integer"
        )
    return d_model // n_heads


def require_positive(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def require_base(base: float) -> None:
    """θ_i = base^(−2i/d) must fall from 1 towards 0 and stay finite: ``1 < base < ∞``."""
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number greater than 1 (θ_i = base^(-2i/d)), got {base!r}")


def require_same_dtype(x: torch.Tensor, parameter: torch.Tensor, what: str = "input") -> None:
    if x.dtype != parameter.dtype:
        raise TypeError(
            f"{what} has dtype {x.dtype} but the module's parameters are {parameter.dtype}; "
            f"convert one of them (module.to({x.dtype}) or {what}.to({parameter.dtype}))"
        )
