"""Judging one spec run against its declaration: the state it reaches, its message and reproducers.

The state follows from the case's declaration (:class:`~.parametrization.SpecCase`) and what the
spec raised, never from pytest's xfail bookkeeping:

* nothing raised: ``holds``, or ``unexpectedly holds`` where a refutation was declared;
* the declared refutation's error: ``refuted``; any other ClaimViolation: ``unexpectedly failing``,
  as is a :class:`~..catalogue.claims.GeometryContradiction` whatever was declared;
* :class:`~..references.contract.SpecTimeout` (or a run past pytest-timeout's limit): ``timed out``;
* the skips of the harness: ``blocked``, ``excluded``, ``undecided``, ``depends on ROPE-9``;
* anything else: ``crashed``.
"""

from __future__ import annotations

import inspect

import pytest

from ..catalogue.claims import ClaimViolation, GeometryContradiction, revision_hint
from ..references.contract import Blocked, DependsOnHistory, Excluded, SpecTimeout, Undecided
from ..verdicts.matrix import Outcome
from .parametrization import SpecCase
from .running import RunningSpec, drawn_from_traceback, first_line, python_reproducer, reproducer, shorten
from ..catalogue.states import State
from ..whole_models.model_plan import CONFIGURED
from ..verdicts.width import terminal_width, wrap, wrap_all

#: Fixtures a standalone reproducer can pass as values.
VALUE_FIXTURES = ("record", "dtype", "device")
_SKIPS = ((Blocked, State.BLOCKED), (Excluded, State.EXCLUDED), (Undecided, State.UNDECIDED),
          (DependsOnHistory, State.DEPENDS_ON_HISTORY))


def judge(case: SpecCase, excinfo, duration: float, timeout: float | None, when: str = "call") -> State | None:
    """The state of one run phase; None for a skip that is not the harness's (pytest's own). A
    declared refutation is judged on the spec's call only: setup and teardown do not decide it."""
    if excinfo is not None:
        harness_skip = next((state for kind, state in _SKIPS if excinfo.errisinstance(kind)), None)
        if harness_skip is not None or excinfo.errisinstance(pytest.skip.Exception):
            return harness_skip
    expects_refutation = case.expects_refutation and when == "call"
    if excinfo is None:
        return State.UNEXPECTEDLY_HOLDS if expects_refutation else State.HOLDS
    if excinfo.errisinstance(SpecTimeout):
        return State.TIMED_OUT
    if excinfo.errisinstance(GeometryContradiction):  # no refutation excuses the record's own geometry
        return State.UNEXPECTEDLY_FAILING
    if expects_refutation and excinfo.errisinstance(case.excused):
        return State.REFUTED
    if excinfo.errisinstance(ClaimViolation):
        return State.UNEXPECTEDLY_FAILING
    if timeout and duration >= timeout:  # pytest-timeout's thread method
        return State.TIMED_OUT
    return State.CRASHED


def outcome(case: SpecCase, state: State, test_id: str, excinfo, timeout: float | None,
            reproduce=None) -> Outcome:
    """The outcome of one run: its message, and for a failure or a crash the reproducers that
    ``reproduce(excinfo)`` returns (a pytest command and a standalone script)."""
    message, command, script = "", "", ""
    if state == State.TIMED_OUT:
        message = f"timeout: no result after {timeout:g} s"
    elif state == State.UNEXPECTEDLY_HOLDS and case.record.declared(case.claim).reason.startswith(CONFIGURED):
        promised = case.record.declared(case.claim).reason[len(CONFIGURED):]
        message = (f"a configured design the model does not apply: its config declares that {promised}, but the "
                   "model behaves as without it (the spec found no violation)")
    elif state == State.UNEXPECTEDLY_HOLDS:
        message = f"declared refuted ({case.record.declared(case.claim).reason}), but the spec found no violation"
        hint = revision_hint(case.claim)
        message += f" - {hint}" if hint else ""
    elif excinfo is not None:
        message = first_line(str(excinfo.value)) or excinfo.typename
        if state == State.CRASHED:
            message = f"{excinfo.typename}: {message}"
        if excinfo.errisinstance(GeometryContradiction) and case.expects_refutation:
            message += " (the declared refutation does not excuse it: it contradicts the record's own geometry)"
        if state in (State.CRASHED, State.UNEXPECTEDLY_FAILING) and reproduce is not None:
            command, script = reproduce(excinfo)
    blame = getattr(excinfo.value, "blame", "") if excinfo is not None and state == State.UNEXPECTEDLY_FAILING else ""
    return Outcome(case.claim, case.record.name, case.spec, test_id, state, message, command, script, blame)


def reproducers(spec: RunningSpec, function, funcargs: dict, excinfo) -> tuple[str, str]:
    """The pytest command and the standalone script that reproduce a failure or a crash."""
    drawn = getattr(excinfo.value, "drawn", None)
    if drawn is None:
        drawn = drawn_from_traceback(spec, excinfo.tb)
    command = reproducer(spec, drawn)
    arguments = [name for name in inspect.signature(function).parameters if name in funcargs]
    if any(name not in VALUE_FIXTURES for name in arguments):
        return command, ""  # a spec with other fixtures (measurements) is rerun through pytest
    return command, python_reproducer(spec, {name: funcargs[name] for name in arguments}, drawn)


def report_briefly(item, case: SpecCase) -> None:
    """Under ``--tb=auto``, a violation the judge decides from the error alone (``refuted``,
    ``unexpectedly failing``) is reported by its message: pytest's traceback costs tens of
    milliseconds to format (the source of every frame, Hypothesis's included), and an expected
    failure never shows it. Other ``--tb`` styles, and every other error, keep pytest's."""
    if item.config.option.tbstyle != "auto":
        return
    full = item.repr_failure

    def repr_failure(excinfo, *args, **kwargs):
        if judge(case, excinfo, 0.0, None) in (State.REFUTED, State.UNEXPECTEDLY_FAILING):
            return short_failure(State.UNEXPECTEDLY_FAILING, excinfo, "")
        return full(excinfo, *args, **kwargs)

    item.repr_failure = repr_failure


def short_failure(state: State, excinfo, command: str) -> str:
    """What pytest prints for a judged failure: the violation and its reproducer, or the crash's
    message, where it was raised and its reproducer; ``--tb=long`` shows the whole traceback."""
    fit = terminal_width()
    if state == State.UNEXPECTEDLY_FAILING:
        return "\n".join(wrap(str(excinfo.value), fit))
    entry = excinfo.traceback[-1]
    lines = str(excinfo.value).strip().splitlines() or [""]
    shown = [f"CRASH {excinfo.typename}: {shorten(lines[0], 300)}", *(f"  {shorten(line, 300)}" for line in lines[1:4])]
    return "\n".join(wrap_all([*shown, f"  raised at {entry.path}:{entry.lineno + 1}", f"  reproducer: {command}",
                               "  (--tb=long shows the traceback)"], fit))
