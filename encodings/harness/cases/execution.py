"""Running one spec: under a timeout, blocked where its encoder cannot be judged, with torch's
global state restored after it.

* The timer is pytest-timeout's setting (``--timeout``, the ini value, a ``timeout`` marker) with
  a signal handler of the harness's own: it raises :class:`~..references.contract.SpecTimeout`, which
  Hypothesis does not catch, where pytest-timeout's ``Failed`` would be retried and shrunk.
* A spec is :class:`~..references.contract.Blocked` when an earlier spec of its encoder timed out, or when
  the encoder breaks the shape contract (the ``contract`` row says why).
* :func:`blamed_on_history` turns a violation on an encoder whose output depends on its earlier
  calls into ``depends on ROPE-9`` (:class:`~..references.contract.DependsOnHistory`), except ROPE-9's own.
* :func:`guarded` restores torch's global state and blames a change on the encoder that made it;
  :func:`isolated` does so for the specs that take no encoder record (benchmarks, the workload
  builder, summaries), naming their ``perf_record``.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager, nullcontext

import pytest
import torch

from . import isolation
from ..catalogue.claims import CONTRACT, HISTORY_CLAIM, ClaimViolation
from ..references.contract import Blocked, DependsOnHistory, Excluded, SpecTimeout, contract_problem, history_problem
from .parametrization import SpecCase


def user_timeout(config, resolved: float) -> float:
    """``--timeout`` given on the command line wins over a ``timeout`` marker and the ini value
    (pytest-timeout would let a marker override it); otherwise pytest-timeout's resolution."""
    given = config.getoption("timeout", default=None)
    return float(given) if given is not None else resolved


def start_timer(timeout: float, method: str) -> bool:
    """Arm the harness's timer for the signal method; False leaves it to pytest-timeout."""
    if method != "signal" or not hasattr(signal, "SIGALRM"):
        return False

    def expire(signum, frame):
        raise SpecTimeout(f"timeout: no result after {timeout:g} s")

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    return True


def cancel_timer() -> bool:
    if not hasattr(signal, "SIGALRM") or signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None):
        return False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    return True


def block_if_unjudgeable(case: SpecCase, timed_out: dict[str, str], device: str) -> None:
    record = case.record
    if record.name in timed_out:
        raise Blocked(f"blocked: {record.name} timed out in {timed_out[record.name]}; its remaining specs are not run")
    if case.claim != CONTRACT and record.kind != "producer":  # a producer's contract is its protocol's answer
        from ..references.contract import model_not_applicable, model_problem  # its logits' shape, its cache

        problem = model_problem(record, device) if record.kind == "model" else \
            contract_problem(record, case.dtype, device)
        if problem:
            raise Blocked(f"blocked by the contract: {problem}")
        missing = model_not_applicable(record, case.claim, device) if record.kind == "model" else None
        if missing:
            raise Excluded(f"not applicable: {missing}")


@contextmanager
def blamed_on_history(case: SpecCase, device: str):
    """A ClaimViolation of a claim other than ROPE-9, on an encoder that answers one input
    differently on repeated calls, re-raised as ``depends on ROPE-9``; a declared refutation
    observed stays ``refuted``."""
    try:
        yield
    except ClaimViolation as violation:
        if case.claim == HISTORY_CLAIM or (case.expects_refutation and isinstance(violation, case.excused)):
            raise
        problem = history_problem(case.record, device)
        if problem is None:
            raise
        seen = str(violation).strip().splitlines()[0]
        raise DependsOnHistory(f"depends on {HISTORY_CLAIM}: {problem}; the spec saw {seen}") from violation


def _leak(culprit: str, changed: list[str]) -> isolation.GlobalStateLeak:
    return isolation.GlobalStateLeak(f"{culprit} left torch's global state changed: {'; '.join(changed)} "
                                     "(restored for the next spec)")


@contextmanager
def guarded(case: SpecCase, threads: int = 0):
    """The case on its torch threads (:func:`model_threads`; ``threads``: ``--perf-threads``), and
    torch's global state captured before the spec and restored after it; a change is an error."""
    with model_threads(case, threads), isolated(case.record.name):
        yield


def guarded_without_case(item):
    """A spec that takes no encoder record (a benchmark, the workload builder, a summary) under
    :func:`isolated`, a leak naming its ``perf_record`` or the spec; a test outside the spec
    package (the project's own tests) as it is."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    record = params.get("perf_record")
    if record is not None and hasattr(record, "name"):
        return isolated(record.name)
    module = getattr(getattr(item, "module", None), "__name__", "")
    return isolated(f"the spec {item.name}") if module.startswith("specs.") else nullcontext()


@contextmanager
def isolated(culprit: str):
    """Torch's global state restored after the block; a change raises
    :class:`~.isolation.GlobalStateLeak` naming ``culprit`` (after an error too, chained to it)."""
    before, threads = isolation.capture(), isolation.running_threads()
    try:
        yield
    except BaseException as error:
        isolation.note_threads(threads, culprit)
        changed = isolation.restore(before)
        if changed and not isinstance(error, (KeyboardInterrupt, SpecTimeout, pytest.skip.Exception)):
            raise _leak(culprit, changed) from error
        raise
    isolation.note_threads(threads, culprit)
    changed = isolation.restore(before)
    if changed:
        raise _leak(culprit, changed)


#: A whole model's case runs on this many torch threads unless ``--perf-threads`` chose a count:
#: more threads make tiny widths a little faster on an idle machine and many times slower beside
#: another job, whose threads they fight (``python -m posenc model-benchmark``, its table on
#: docs/findings/models.md).
MODEL_THREADS = 1


@contextmanager
def model_threads(case: SpecCase, chosen: int):
    """:data:`MODEL_THREADS` torch threads for a model record's case where none were ``chosen``."""
    if case.record.kind != "model" or chosen:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(MODEL_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: A half-precision case repeats its float32 case's draws under a coarser tolerance: it makes
#: half as many (at least one), besides its pinned ``@example``s, which hold the positions where
#: half precision breaks (past 256 and 2048, far positions). A claim about half precision itself
#: (its ``claim`` marker lists half dtypes only, ROPE-11) makes them all.
HALF_PRECISION_DRAWS = 1 / 2
HALF_PRECISION = (torch.float16, torch.bfloat16)


def _half_precision_repeat(item, case: SpecCase) -> bool:
    if case.dtype not in HALF_PRECISION or torch.float32 not in case.record.limits.dtypes:
        return False
    marker = item.get_closest_marker("claim")
    claimed = tuple(marker.kwargs.get("dtypes", ())) if marker is not None else ()
    return not (claimed and all(d in HALF_PRECISION for d in claimed))


@contextmanager
def sized_draws(item, case: SpecCase):
    """The examples ``item``'s Hypothesis test runs for this case: its profile's, except
    * only its pinned ``@example``s where a spec marked ``far_positions`` meets an encoder reached
      through a prefix (``positions="none"``, the documents' snippets), since every far position
      there costs a call as long as the position (the pinned examples hold the far positions);
    * :data:`HALF_PRECISION_DRAWS` of them in a half-precision repeat of a float32 case."""
    function = item.obj
    current = getattr(function, "_hypothesis_internal_use_settings", None)
    far = item.get_closest_marker("far_positions") is not None and case.record.calling.positions == "none"
    if current is None or not (far or _half_precision_repeat(item, case)):
        yield
        return
    from hypothesis import Phase, settings

    if far:
        function._hypothesis_internal_use_settings = settings(current, phases=(Phase.explicit,))
    else:
        draws = max(1, round(current.max_examples * HALF_PRECISION_DRAWS))
        function._hypothesis_internal_use_settings = settings(current, max_examples=draws)
    try:
        yield
    finally:
        function._hypothesis_internal_use_settings = current
