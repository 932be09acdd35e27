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
from pathlib import Path

import torch

from ..catalogue.records import EncoderRecord


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


def _is_spec_frame(spec: RunningSpec, frame) -> bool:
    return frame.f_code.co_name == spec.spec and frame.f_code.co_filename == spec.filename


def _arguments(spec: RunningSpec, frame) -> dict[str, object]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return {n: frame.f_locals[n] for n in names if n not in spec.fixtures and n in frame.f_locals}


def drawn_values(spec: RunningSpec) -> dict[str, object]:
    """The spec function's arguments other than fixtures, as they are now in its frame."""
    frame = sys._getframe(1)
    while frame is not None:
        if _is_spec_frame(spec, frame):
            return _arguments(spec, frame)
        frame = frame.f_back
    return {}


def drawn_from_traceback(spec: RunningSpec, traceback) -> dict[str, object]:
    """The same, read from an exception's traceback (a crash: the spec's frame has returned)."""
    found = {}
    while traceback is not None:
        if _is_spec_frame(spec, traceback.tb_frame):
            found = _arguments(spec, traceback.tb_frame)
        traceback = traceback.tb_next
    return found


def shorten(text: str, width: int = 200) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def first_line(text: str, width: int = 300) -> str:
    """The first line of ``text``, shortened: how failures are summarised in one line."""
    return shorten(text.strip().partition("\n")[0], width)


def _loaded_by(record) -> str:
    """The options that register ``record`` again: ``--plugin FILE``, ``--identify …``, ``--model …``, or none."""
    if record.origin == "built-in":
        return ""
    return f" {record.origin}" if record.origin.startswith(("--identify ", "--model ")) else f" --plugin {record.origin}"


def reproducer(spec: RunningSpec, drawn: dict[str, object] | None = None) -> str:
    """A command that reruns this spec on this encoder, with the drawn values it failed on."""
    plugin = _loaded_by(spec.record)
    drawn = drawn_values(spec) if drawn is None else drawn
    values = ", ".join(f"{name}={shorten(repr(value))}" for name, value in drawn.items())
    return f"pytest '{spec.nodeid}'{plugin}" + (f"  # {values}" if values else "")


def _literal(value) -> str:
    """``value`` as Python source (torch dtypes and tensors included)."""
    if isinstance(value, torch.Tensor):
        return f"torch.tensor({value.tolist()!r})"
    return repr(value)


def python_reproducer(spec: RunningSpec, fixtures: dict[str, object], drawn: dict[str, object]) -> str:
    """A standalone script that builds the encoder, calls the spec with these inputs and raises the
    failure again (a ClaimViolation prints the observed value against the expected one).

    ``python repro.py`` from anywhere: the script puts the spec folder's parent on ``sys.path``."""
    spec_file = Path(spec.filename)
    module = f"{spec_file.parent.name}.{spec_file.stem}"
    plugin = f"posenc.load_plugin({spec.record.origin!r})\n" if spec.record.origin != "built-in" else ""
    if spec.record.origin.startswith("--identify "):
        words = spec.record.origin.split()
        options = dict(zip(words[::2], words[1::2]))
        plugin = ("from posenc.harness.run.selection import identify_and_register  # noqa: E402\n"
                  f"identify_and_register({options['--identify']!r}, {options.get('--identify-protocol', 'single')!r}, "
                  f"{options.get('--identify-apply')!r}, {options.get('--identify-expect')!r})\n")
    if spec.record.origin.startswith("--model "):
        plugin = ("from posenc.harness.run.selection import register_model  # noqa: E402\n"
                  f"register_model({spec.record.origin.split(maxsplit=1)[1]!r})\n")
    arguments = {**{k: v for k, v in fixtures.items() if k != "record"}, **drawn}
    call = ", ".join(["record=record", *(f"{k}={_literal(v)}" for k, v in arguments.items())])
    return (
        f"# {spec.claim} on {spec.record.name}: {spec.spec}\n"
        f"import sys\n\nimport torch\n\nsys.path.insert(0, {str(spec_file.parent.parent)!r})\n"
        "import posenc  # noqa: E402\nfrom posenc.harness.cases.running import RunningSpec, running  # noqa: E402\n"
        f"from {module} import {spec.spec} as spec  # noqa: E402\n\n{plugin}"
        f"record = posenc.get({spec.record.name!r})\n"
        "test = getattr(getattr(spec, 'hypothesis', None), 'inner_test', spec)  # without Hypothesis\n"
        f"with running(RunningSpec({spec.claim!r}, {spec.spec!r}, {spec.nodeid!r}, test.__code__.co_filename, record)):\n"
        f"    test({call})\n"
    )
