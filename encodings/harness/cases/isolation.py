"""Torch's global state, captured before a spec and restored after it.

An encoder that switches off autograd, changes the default dtype, device or thread count, the
float32 matmul precision, or flips the deterministic flags would otherwise change the verdicts
of every spec that runs after it.
The random generators are restored silently: building a module draws from them by design. A
thread a spec starts and leaves running is remembered with its culprit, named at the run's end.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GlobalState:
    grad_enabled: bool
    default_dtype: torch.dtype
    num_threads: int
    deterministic: bool
    deterministic_warn_only: bool
    anomaly_detection: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    matmul_precision: str
    default_device: str


FLAGS = {
    "grad_enabled": "grad mode",
    "default_dtype": "default dtype",
    "num_threads": "thread count",
    "deterministic": "deterministic algorithms",
    "deterministic_warn_only": "deterministic warn-only",
    "anomaly_detection": "anomaly detection",
    "cudnn_benchmark": "cudnn.benchmark",
    "cudnn_deterministic": "cudnn.deterministic",
    "matmul_precision": "float32 matmul precision",
    "default_device": "default device",
}


class GlobalStateLeak(RuntimeError):
    """An encoder left torch's global state changed (the harness restored it)."""


def capture() -> tuple[GlobalState, torch.Tensor, list[torch.Tensor] | None]:
    state = GlobalState(
        grad_enabled=torch.is_grad_enabled(),
        default_dtype=torch.get_default_dtype(),
        num_threads=torch.get_num_threads(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        anomaly_detection=torch.is_anomaly_enabled(),
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        cudnn_deterministic=torch.backends.cudnn.deterministic,
        matmul_precision=torch.get_float32_matmul_precision(),
        default_device=str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu",
    )
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return state, torch.random.get_rng_state(), cuda_rng


def _apply(state: GlobalState) -> None:
    torch.set_grad_enabled(state.grad_enabled)
    torch.set_default_dtype(state.default_dtype)
    torch.set_num_threads(state.num_threads)
    torch.use_deterministic_algorithms(state.deterministic, warn_only=state.deterministic_warn_only)
    torch.set_anomaly_enabled(state.anomaly_detection)
    torch.backends.cudnn.benchmark = state.cudnn_benchmark
    torch.backends.cudnn.deterministic = state.cudnn_deterministic
    torch.set_float32_matmul_precision(state.matmul_precision)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None if state.default_device == "cpu" else state.default_device)


def restore(captured) -> list[str]:
    """Put the captured state back; return what had changed (``"grad mode True → False"``, …)."""
    before, cpu_rng, cuda_rng = captured
    after, _, _ = capture()
    changed = [f"{label} {getattr(before, field)} → {getattr(after, field)}"
               for field, label in FLAGS.items() if getattr(before, field) != getattr(after, field)]
    if changed:
        _apply(before)
    torch.random.set_rng_state(cpu_rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state_all(cuda_rng)
    return changed


#: Threads a spec started and left running: ident -> the encoder (or spec) whose spec started them.
STARTED_BY: dict[int, str] = {}


def running_threads() -> set[int]:
    return {t.ident for t in threading.enumerate()}


def note_threads(before: set[int], culprit: str) -> None:
    """Remember the threads started since ``before`` that still run (not daemons), as ``culprit``'s."""
    for thread in threading.enumerate():
        if thread.ident not in before and thread.is_alive() and not thread.daemon:
            STARTED_BY.setdefault(thread.ident, culprit)
