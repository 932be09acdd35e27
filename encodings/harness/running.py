"""The spec that is running: its claim, its name and the encoder it judges.

The pytest plug-in enters :func:`running` around every spec call, so the assertion helpers
(``specs/support.py``) know which claim a failure refutes and how to rerun it without the
spec naming either. :func:`reproducer` reads the spec's own arguments (the values Hypothesis
drew) from its frame.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from .records import EncoderRecord


@dataclass(frozen=True)
class RunningSpec:
    claim: str
    spec: str  # the spec function's name
    nodeid: str
    filename: str  # the spec module's file, to find the spec's frame
    record: EncoderRecord
    fixtures: tuple[str, ...] = ()  # arguments the node id already fixes (record, dtype, …)


_CURRENT: ContextVar[RunningSpec | None] = ContextVar("posenc_running_spec", default=None)


@contextmanager
def running(spec: RunningSpec):
    token = _CURRENT.set(spec)
    try:
        yield spec
    finally:
        _CURRENT.reset(token)


def current() -> RunningSpec:
    spec = _CURRENT.get()
    if spec is None:
        raise RuntimeError("no spec is running: the claim helpers work inside a spec that "
                           "the posenc pytest plug-in parametrizes with an encoder record")
    return spec


def drawn_values(spec: RunningSpec) -> dict[str, object]:
    """The spec function's arguments other than fixtures, as they are now in its frame."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == spec.spec and code.co_filename == spec.filename:
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            return {n: frame.f_locals[n] for n in names if n not in spec.fixtures and n in frame.f_locals}
        frame = frame.f_back
    return {}


def shorten(text: str, width: int = 200) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def first_line(text: str, width: int = 300) -> str:
    """The first line of ``text``, shortened: how failures are summarised in one line."""
    return shorten(text.strip().partition("\n")[0], width)


def reproducer(spec: RunningSpec) -> str:
    """A command that reruns this spec on this encoder, with the drawn values it failed on."""
    plugin = f" --plugin {spec.record.origin}" if spec.record.origin != "built-in" else ""
    values = ", ".join(f"{name}={shorten(repr(value))}" for name, value in drawn_values(spec).items())
    return f"pytest '{spec.nodeid}'{plugin}" + (f"  # {values}" if values else "")
