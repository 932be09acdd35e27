"""The controller's side of a run: outcomes filed into the matrix and the journal as they arrive,
and a pytest-xdist worker that died recorded as a CRASH of the spec it was running.

In a serial run the outcomes are this process's; under ``-n`` they come from the workers. A worker
that dies (a segfault, ``os._exit``, the out-of-memory killer) is replaced by pytest-xdist, which
reports the spec it was running as failed with no outcome of the harness's: that spec's cell
reads CRASH, with the worker named (resolved once the surviving workers have sent which test ids
each cell expects). The ``loadgroup`` scheduler is the harness's own (:mod:`.scheduling`).
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from ..verdicts.journal import Journal, spec_name
from ..verdicts.matrix import Outcome
from ..verdicts.width import terminal_width
from ..catalogue.states import State

OUTCOME = "posenc_outcome"  # the user property that carries a spec's outcome to the controller


def worker_died_message(worker: str) -> str:
    return (f"the pytest-xdist worker {worker} died while this spec ran, with no result: os._exit, a fatal "
            "signal such as SIGSEGV, or SIGKILL from the out-of-memory killer")


class OutcomeCollector:
    """Files the outcomes this process logs, its own or pytest-xdist's workers', into the matrix
    and the journal (opened at the first outcome, so a run that judges nothing writes nothing)."""

    def __init__(self, state, begin: dict):
        self.state = state
        self.begin = begin  # what the journal's first line says of the run
        self.journal: Journal | None = None
        self.unjournaled = ""  # why no journal could be opened (it is not tried again)
        self.dead_workers: list[tuple[str, str]] = []  # (test id, worker)
        self.workers_lost = 0

    def _journal(self) -> Journal | None:
        if self.journal is None and not self.unjournaled:
            try:
                self.journal = Journal(self.state.settings.matrix_dir / "runs" / self.state.run_id)
                self.journal.begin(**self.begin)
                if self.state.matrix.expected:
                    self.journal.expect(self.state.matrix.expected)
            except OSError as error:
                self.journal = None
                self.unjournaled = f"{error.strerror or error}"
        return self.journal

    @pytest.hookimpl(wrapper=True)
    def pytest_internalerror(self, excrepr, excinfo):
        """Out of memory in pytest's own code: pytest's traceback cut to the frame that ran out, then
        a last line that says so and the way to the outcomes judged so far; any other internal
        error is pytest's, untouched."""
        if not excinfo.errisinstance(MemoryError):
            return (yield)
        _last_frame_only(excrepr)
        shown = yield
        said = (f"posenc: the run ran out of memory in pytest's own code ({excinfo.typename}: "
                f"{str(excinfo.value)[:120]}) and stopped; "
                + ("its journal keeps the outcomes judged so far:" if self.journal is not None else "no journal was kept"))
        lines = textwrap.wrap(said, terminal_width(), subsequent_indent="    ")
        if self.journal is not None:  # the command on a line of its own, to copy
            lines.append(f"    python -m posenc report --recover --matrix-dir {self.state.settings.matrix_dir}")
        sys.stderr.write("\n".join(lines) + "\n")
        return shown

    def started(self, test_id: str, claim: str, encoder: str) -> None:
        """A spec of a serial run is about to run its encoder's code."""
        journal = self._journal()
        if journal is not None:
            journal.start(test_id, claim, encoder)

    def expect(self, expected) -> None:
        self.state.matrix.expect(expected)
        if self.journal is not None:
            self.journal.expect(expected)

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == OUTCOME:
                self.state.matrix.add(Outcome(**value))
                journal = self._journal()
                if journal is not None:
                    journal.outcome(value)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "?"
        self.dead_workers.append((crashitem, worker))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        if error is not None:
            self.workers_lost += 1

    def gave_up(self, config) -> bool:
        """pytest-xdist stopped the run: more workers died than ``--max-worker-restart`` allows."""
        if not self.workers_lost:
            return False
        from xdist.dsession import get_default_max_worker_restart

        most = get_default_max_worker_restart(config)
        return most is not None and self.workers_lost > most

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") == "loadgroup":
            from .scheduling import SurvivingLoadGroupScheduling

            return SurvivingLoadGroupScheduling(config, log)
        return None

    def add_dead_workers(self) -> None:
        """A CRASH outcome for each spec a worker died in, in the cell that expected its test id."""
        expected = self.state.matrix.expected or {}
        for test_id, worker in self.dead_workers:
            plain = test_id.rsplit("@", 1)[0]  # --dist loadgroup appends "@<group>"
            cell = next((c for c, ids in expected.items() if test_id in ids or plain in ids), None)
            if cell is None:
                continue
            outcome = Outcome(cell[0], cell[1], spec_name(plain), plain, State.CRASHED, worker_died_message(worker))
            self.state.matrix.add(outcome)
            if self._journal() is not None:
                self.journal.outcome(outcome.as_dict())


def _last_frame_only(excrepr) -> None:
    """Cut a traceback's representation to its last exception and last frame, in place (pytest's
    native style keeps the whole traceback as the lines of one entry)."""
    chain = getattr(excrepr, "chain", None)
    if chain:
        del chain[:-1]
    tracebacks = [entry[0] for entry in chain] if chain else [getattr(excrepr, "reprtraceback", None)]
    for reprtraceback in tracebacks:
        entries = getattr(reprtraceback, "reprentries", None)
        if entries:
            del entries[:-1]
            lines = getattr(entries[-1], "lines", None)
            if isinstance(lines, (list, tuple)) and len(lines) > 3:
                entries[-1].lines = [lines[0], *lines[-2:]]
