"""The run's end, which nothing an encoder did may turn into a traceback or a hang.

* :func:`write_report` files the dead workers' crashes, writes the report (:mod:`..verdicts.reports`) and
  closes the journal. A report that cannot be written (a full disk, memory exhaustion, Ctrl-C
  during the writes) is one line naming what failed; the journal keeps every outcome, and the
  next run or ``python -m posenc report --recover`` writes the report from it.
* :func:`threads_left_running` names the threads (and child processes, which are terminated) a spec
  or a plug-in started and left running (each thread
  attributed to the encoder whose spec started it, by :mod:`..cases.isolation`); the run then
  ends without waiting for them (:func:`exit_past_threads`).
"""

from __future__ import annotations

import os
import sys
import threading

from ..verdicts import primary, reports
from ..cases.isolation import STARTED_BY
from . import session as run
from ..verdicts.matrix import not_applicable, render_markdown, roles
from ..verdicts.width import terminal_width, wrap

def write_report(config, state, collector, exitstatus, session=None) -> None:
    """Mark the run finished in its journal (on disk first), then write and publish its report, then
    end the journal: a run stopped in between is recovered as finished, never as crashed. An
    interrupted run's exit status is then made non-zero (:func:`never_zero_when_interrupted`)."""
    _write_report(config, state, collector, exitstatus)
    if session is not None:
        never_zero_when_interrupted(session, state)


def _write_report(config, state, collector, exitstatus) -> None:
    if collector is not None:
        collector.add_dead_workers()
    if state.active:
        state.active.end()
    journal = collector.journal if collector is not None else None
    if not state.matrix.outcomes and state.status != "interrupted":  # nothing judged: ended, no report
        _end_quietly(state, journal)
        return
    try:
        header = run.header(config, state, exitstatus)
        if journal is not None:
            journal.finished(state.status, header)
        cells, cell_roles = state.matrix.states(complete=state.status == "complete"), roles(state.records)
        payload = {"header": header, "matrix": cells, "roles": cell_roles,
                   "kinds": {r.name: r.group for r in state.records},
                   "consequences": primary.as_json(primary.consequences(state.matrix.outcomes, cell_roles)),
                   "not_applicable": not_applicable(state.records, cells, state.matrix.outcomes),
                   "outcomes": [o.as_dict() for o in state.matrix.outcomes]}
        state.written = reports.write(state.settings.matrix_dir, state.run_id, payload,
                                      render_markdown(cells, cell_roles, header))
        state.cells = cells
    except (KeyboardInterrupt, MemoryError, OSError) as error:
        why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"{type(error).__name__}: {error}"
        state.report_interrupted = isinstance(error, KeyboardInterrupt)
        own = state.settings.matrix_dir / "runs" / state.run_id
        if (reports.run_report_header(own) or {}).get("run_id") == state.run_id:
            state.notes.append(f"posenc: the run's report was written ({own / 'verdicts.json'}), but its "
                               f"publication was {why}")
            _end_quietly(state, journal)
            return
        if journal is not None:
            journal.unwritten(why)
            state.notes.append(f"posenc: the report could not be written ({why}); {_what_journal_keeps(journal)}: "
                               f"python -m posenc report --recover --matrix-dir {state.settings.matrix_dir}")
        else:
            state.notes.append(f"posenc: the report could not be written ({why}), and this run has no journal to "
                               "recover it from")
        return
    state.notes += [f"posenc: WARNING {line}" for line in state.written.warnings]
    if journal is not None:
        if journal.failure:
            state.notes.append(journal.failure)
        if state.written.saved:
            _end_quietly(state, journal)
        else:
            journal.unwritten(state.written.warnings[0] if state.written.warnings else "the report could not be written")
            state.notes.append(f"posenc: {_what_journal_keeps(journal)}: python -m posenc report --recover "
                               f"--matrix-dir {state.settings.matrix_dir}")


def _what_journal_keeps(journal) -> str:
    if journal.failure is None:
        return "its journal keeps every outcome"
    return (f"its journal stopped ({journal.stopped}) after {journal.outcomes} outcomes, which it keeps (the "
            "later cells will read not run)")


def _end_quietly(state, journal) -> None:
    """End the journal; a signal arriving just then ends the run interrupted, never a traceback."""
    if journal is None:
        return
    try:
        journal.end(state.status)
    except KeyboardInterrupt:
        state.report_interrupted = True
        try:
            journal.end(state.status)
        except (KeyboardInterrupt, OSError, ValueError):
            pass


def never_zero_when_interrupted(session, state) -> None:
    """A run interrupted (Ctrl-C, SIGTERM), also while it wrote its report, exits with pytest's
    INTERRUPTED code, never 0: a cancelled CI job never reads as passed."""
    import pytest

    if state.report_interrupted or (state.status == "interrupted" and session.exitstatus == pytest.ExitCode.OK):
        session.exitstatus = state.exit_code = int(pytest.ExitCode.INTERRUPTED)


THREADS = "posenc_threads"  # a worker's threads left running, sent to the controller


def note_worker_threads(node, state) -> None:
    """The controller names the threads a pytest-xdist worker's specs left running."""
    left = getattr(node, "workeroutput", {}).get(THREADS) or []
    if left:
        worker = getattr(getattr(node, "gateway", None), "id", "?")
        state.notes.append(f"posenc: WARNING {len(left)} thread{'s' if len(left) > 1 else ''} left running by the "
                           f"specs in worker {worker}: {', '.join(left)}; the worker exited without waiting")


def threads_left_running() -> list[str]:
    """The threads a spec started that are still running (not daemons), each with its culprit."""
    alive = {t.ident: t for t in threading.enumerate() if t.is_alive() and not t.daemon}
    return [f"{alive[ident].name} (started while {culprit} ran)" for ident, culprit in STARTED_BY.items()
            if ident in alive]


def processes_left_running() -> list:
    """The child processes a spec or a plug-in forked with ``multiprocessing`` and left running:
    Python's exit would join them, for ever."""
    if "multiprocessing" not in sys.modules:
        return []
    import multiprocessing

    return multiprocessing.active_children()


def end_processes(children) -> None:
    """Terminate ``children`` (killed if they linger): left alive they would hold the run's output
    open, and a pipe reading it would wait for ever."""
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=2)
        if child.is_alive():
            child.kill()


def exit_past_threads(reporter, exit_code: int) -> None:
    """Name the threads and child processes left running and end the process now instead of
    waiting for them forever."""
    threads, processes = threads_left_running(), processes_left_running()
    if not threads and not processes:
        return
    left = threads + [f"process {p.name} (pid {p.pid})" for p in processes]
    kinds = " and ".join(k for k, found in (("threads" if len(threads) > 1 else "thread", threads),
                                             ("processes" if len(processes) > 1 else "process", processes)) if found)
    line = (f"posenc: WARNING {len(left)} {kinds} left running by the specs or plug-ins: "
            f"{', '.join(left)}; the run exits without waiting for {'them' if len(left) > 1 else 'it'}"
            + (" (the processes terminated)" if processes else ""))
    for part in wrap(line, terminal_width()):
        if reporter is not None:
            reporter.write_line(part, yellow=True)
        else:
            print(part, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    end_processes(processes)
    os._exit(exit_code)
