"""The run's journal: every outcome appended as it is judged, so that a run that dies keeps them.

``runs/<run id>/journal.jsonl`` holds one JSON object per line, each written and flushed at once:

* ``{"begin": header, "roles": …, "kinds": …, "applies": {encoder: [claims]}}`` - the run as it
  started;
* ``{"expect": [[claim, encoder, [test ids]], …]}`` - the test ids each cell expects;
* ``{"start": test id, "claim": …, "encoder": …}`` - a spec of a serial run about to run its
  encoder's code (under ``-n`` a worker that dies is the controller's to report: :mod:`..cases.collector`);
* ``{"outcome": {…}}`` - a judged spec;
* ``{"end": status}`` - the report was written.

A process killed by ``os._exit``, a fatal signal (a segfault) or the out-of-memory killer (SIGKILL)
writes nothing more, and one whose report writer fails ends without ``end``. A live run holds an
exclusive lock on its journal (``flock``, released by the kernel when the process dies, whatever
its pid namespace), so a journal is recovered only once its run is gone. A write that fails (a full
disk) stops the journal, with a warning, never the run. :func:`recover`
turns such a journal into the run's report, status ``crashed``: every outcome up to the crash,
and the spec that was running when the process died as a CRASH of its encoder's cell. The next
run on the directory recovers it (:func:`unfinished`), or ``python -m posenc report --recover``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: liveness by pid
    fcntl = None

from .matrix import Matrix, Outcome
from .reports import held_by_a_live_run
from ..catalogue.states import State

NAME = "journal.jsonl"
CRASH_MESSAGE = ("the process ended while this spec ran, with no result: os._exit, a fatal signal such as "
                 "SIGSEGV, or SIGKILL from the out-of-memory killer")


def spec_name(test_id: str) -> str:
    return test_id.split("::")[-1].split("[")[0]


class Journal:
    """This run's journal, appended to as the run goes (each line flushed)."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / NAME
        self.failure: str | None = None  # why the journal stopped, if a write failed
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run
        if fcntl is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # this run is alive

    def _write(self, entry: dict) -> None:
        if self._file.closed or self.failure:
            return
        try:
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._file.flush()
        except OSError as error:  # a full disk: the run goes on, without its journal
            self.failure = (f"posenc: WARNING the journal {self.path} could not be written ({error.strerror or error}) "
                            "and stopped: a crash from here on would lose the outcomes since")

    def begin(self, header: dict, records, roles: dict, kinds: dict) -> None:
        from ..catalogue.claims import CLAIMS, CONTRACT

        applies = {r.name: [c for c in (CONTRACT, *CLAIMS) if r.applies(c)] for r in records}
        self._write({"begin": header, "roles": roles, "kinds": kinds, "applies": applies})

    def expect(self, expected: dict[tuple[str, str], set[str]]) -> None:
        self._write({"expect": [[claim, encoder, sorted(ids)] for (claim, encoder), ids in expected.items()]})

    def start(self, test_id: str, claim: str, encoder: str) -> None:
        self._write({"start": test_id, "claim": claim, "encoder": encoder})

    def outcome(self, outcome: dict) -> None:
        self._write({"outcome": outcome})

    def end(self, status: str) -> None:
        self._write({"end": status})
        self._file.close()


@dataclass(frozen=True)
class JournaledRecord:
    """A record as its journal remembers it: enough for the matrix to place its cells."""

    name: str
    kind: str
    claims: frozenset[str]

    def applies(self, claim: str) -> bool:
        return claim in self.claims


def _entries(path: Path) -> tuple[list[dict], bool]:
    """The journal's entries, and whether a line was cut (the process died, or the disk filled,
    while writing it): a cut line is left out."""
    entries, cut = [], False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            cut = True
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries, cut


def unfinished(directory: Path) -> list[Path]:
    """Run folders under ``directory/runs`` whose journal has no end and whose process is gone."""
    runs = directory / "runs"
    if not runs.is_dir():
        return []
    found = []
    for journal in sorted(runs.glob(f"*/{NAME}")):
        if not _ended(journal) and not held_by_a_live_run(journal, journal.parent.name):
            found.append(journal.parent)
    return found


def _ended(journal: Path) -> bool:
    """Whether the journal has its ``end`` line (read from its tail: a start-up reads every run's)."""
    try:
        with open(journal, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 4096))
            tail = file.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return True  # unreadable: nothing to recover from
    return any(line.startswith('{"end":') for line in tail)


def recover(run_dir: Path, recovered_at: str) -> tuple[dict, str] | None:
    """The report of a run that died, from its journal: ``(payload, markdown)``, the header's
    ``crashed_in`` naming the spec and encoder that was running; None where the journal has no
    beginning."""
    from .matrix import render_markdown

    entries, cut = _entries(run_dir / NAME)
    if not entries or "begin" not in entries[0]:
        return None
    begin = entries[0]
    known = {f.name for f in fields(Outcome)}
    records = [JournaledRecord(name, begin["kinds"].get(name, ""), frozenset(claims))
               for name, claims in begin["applies"].items()]
    matrix = Matrix(records)
    running: dict | None = None
    for entry in entries[1:]:
        if "expect" in entry:
            matrix.expect({(claim, encoder): set(ids) for claim, encoder, ids in entry["expect"]})
        elif "start" in entry:
            running = entry
        elif "outcome" in entry:
            matrix.add(Outcome(**{k: v for k, v in entry["outcome"].items() if k in known}))
            if running is not None and entry["outcome"]["test_id"] == running["start"]:
                running = None
    crashed_in = None
    if running is not None:
        crashed_in = {"claim": running["claim"], "encoder": running["encoder"], "test_id": running["start"],
                      "journal_cut": cut}
        message = CRASH_MESSAGE + ("; the journal's last line is cut, so the spec may have ended and the disk "
                                   "filled instead" if cut else "")
        matrix.add(Outcome(running["claim"], running["encoder"], spec_name(running["start"]), running["start"],
                           State.CRASHED, message))
    cells = matrix.states(complete=False)
    header = {**begin["begin"], "status": State.CRASHED.value, "finished": None, "recovered": recovered_at,
              "crashed_in": crashed_in, "outcomes": len(matrix.outcomes)}
    payload = {"header": header, "matrix": cells, "roles": begin["roles"], "kinds": begin["kinds"],
               "outcomes": [o.as_dict() for o in matrix.outcomes]}
    return payload, render_markdown(cells, begin["roles"])


def recover_unfinished(directory: Path) -> list[str]:
    """Write the report of every run under ``directory`` that died without one (status ``crashed``);
    one line each, naming the run, the encoder that was running and the report."""
    from .reports import now, write

    lines = []
    for run_dir in unfinished(directory):
        try:
            recovered = recover(run_dir, now())
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            lines.append(f"run {run_dir.name} left a journal that cannot be read ({type(error).__name__}: {error}); "
                         f"left as it is: {run_dir / NAME}")
            continue
        if recovered is None:
            continue
        payload, markdown = recovered
        written = write(directory, run_dir.name, payload, markdown, latest=False)
        lines += list(written.warnings)
        if not written.saved:
            lines.append(f"run {run_dir.name} died with no report, and its report could not be written now; "
                         f"its journal is kept for the next recovery: {run_dir / NAME}")
            continue
        crashed_in = payload["header"]["crashed_in"] or {}
        where = (f"while {crashed_in['encoder']} ran {crashed_in['test_id']}" if crashed_in.get("encoder")
                 else "outside the specs this process ran (before the first, between two, or in a worker)")
        lines.append(f"run {run_dir.name} died {where} with no report; recovered from its journal "
                     f"({payload['header']['outcomes']} outcomes, status crashed): {written.run_json}")
        _append_end(run_dir / NAME)
    return lines


def _append_end(journal: Path) -> None:
    """Mark a recovered journal ended, on a line of its own (after a cut line too)."""
    with open(journal, "rb+") as file:
        size = file.seek(0, os.SEEK_END)
        if size:
            file.seek(size - 1)
        ends_cleanly = size == 0 or file.read(1) == b"\n"
        file.seek(0, os.SEEK_END)
        file.write((b"" if ends_cleanly else b"\n") + json.dumps({"end": State.CRASHED.value}).encode() + b"\n")
