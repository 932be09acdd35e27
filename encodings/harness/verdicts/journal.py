"""The run's journal: every outcome appended as it is judged, so that a run that dies keeps them.

``runs/<run id>/journal.jsonl`` holds one JSON object per line, each written and flushed at once:

* ``{"begin": header, "roles": …, "kinds": …, "applies": {encoder: [claims]}}`` - the run as it
  started;
* ``{"expect": [[claim, encoder, [test ids]], …]}`` - the test ids each cell expects;
* ``{"start": test id, "claim": …, "encoder": …}`` - a spec of a serial run about to run its
  encoder's code (under ``-n`` a worker that dies is the controller's to report: :mod:`..cases.collector`);
* ``{"outcome": {…}}`` - a judged spec;
* ``{"finished": status, "header": …}`` - every spec was judged; written and synced to disk
  before the report is written, published or old runs pruned;
* ``{"unwritten": why}`` - the report could not be written (a full disk, a read-only folder);
* ``{"end": status}`` - the report was written (or recovered).

A journal that stopped (a write failed: a full disk, a file-size limit) cannot take those last
lines. The run then leaves them beside it, in files that need few bytes or none:
``journal.finished`` (``{"finished": status, "at": …, "outcomes": n, "stopped": why}``, or empty:
its status is then unknown), ``journal.unwritten`` (why the report was not written) and
``journal.ended``; recovery reads them as it reads the lines, and says which outcomes were lost.

**The trust model** (``docs/reference/reports.md``). A run is *finished* once its ``finished``
line is on disk: its report stands as the run wrote it and is never rewritten; where the report
is missing or incomplete (killed while writing it, a full disk), recovery writes it from the
journal with the run's own status and the reason, never ``crashed``. A run without that line is
*unfinished*: recovery writes its report once, status ``crashed``, every outcome up to the crash
and the spec that was running as a CRASH of its encoder's cell. Either way recovery appends
``end``, so a journal is recovered at most once.

A process killed by ``os._exit``, a fatal signal (a segfault) or the out-of-memory killer (SIGKILL)
writes nothing more. A live run holds an exclusive lock on its journal (``flock``, released by
the kernel when the process dies, whatever its pid namespace; a child it forks drops its copy),
so a journal is recovered only once its run is gone. A write that fails (a full disk) stops the
journal, with a warning, never the run. Reading a journal is bounded (:data:`MAX_LINE` characters
a line; nesting past the parser's depth): a damaged line is left out and counted, and a
journal that cannot be read at all is set aside (``journal.jsonl.damaged``) with one line. The
next run on the directory recovers (:func:`unfinished`), or ``python -m posenc report --recover``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

from .matrix import Matrix, Outcome
from .primary import as_json, consequences
from .reports import hold_lock, held_by_a_live_run, not_a_file, release_lock, run_report_header
from ..catalogue.states import State

NAME = "journal.jsonl"
#: Written beside a journal that stopped, in place of its ``finished``, ``unwritten`` and ``end`` lines.
FINISHED_BESIDE, UNWRITTEN_BESIDE, ENDED_BESIDE = (f"journal.{mark}" for mark in ("finished", "unwritten", "ended"))
#: A journal line longer than this is damage, never parsed.
MAX_LINE = 1 << 20
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
        self.stopped: str | None = None  # the error that stopped it, in a word or two
        self.outcomes = 0  # outcomes on disk
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run
        hold_lock(self._file)  # this run is alive

    def _write(self, entry: dict, durable: bool = False) -> None:
        if self._file.closed or self.failure:
            return
        try:
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._file.flush()
            if durable:
                os.fsync(self._file.fileno())
        except OSError as error:  # a full disk: the run goes on, without its journal
            self.stopped = str(error.strerror or error)
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
        self.outcomes += self.failure is None

    def finished(self, status: str, header: dict) -> bool:
        """Every spec judged: the mark that makes this run finished, on disk before any report is
        written (beside a journal that stopped). False where neither could be written (the run
        then counts as unfinished)."""
        if self.failure is None:
            self._write({"finished": status, "header": header}, durable=True)
            if self.failure is None:
                return True
        return self._beside(FINISHED_BESIDE, {"finished": status, "at": header.get("finished"),
                                              "outcomes": self.outcomes, "stopped": self.stopped})

    def unwritten(self, why: str) -> None:
        """The report could not be written: recovery says why."""
        if self.failure is None:
            self._write({"unwritten": why}, durable=True)
        if self.failure is not None:
            self._beside(UNWRITTEN_BESIDE, {"unwritten": why})

    def end(self, status: str) -> None:
        self._write({"end": status})
        if self.failure is not None:
            self._beside(ENDED_BESIDE, {})
        self.close()

    def _beside(self, name: str, entry: dict) -> bool:
        """A mark the stopped journal cannot take, in a file of its own: created empty first (a
        file-size limit or a full disk may still allow that), then filled where it can be."""
        path = self.path.with_name(name)
        try:
            with open(path, "wb") as file:
                try:
                    file.write(json.dumps(entry, ensure_ascii=False).encode() if entry else b"")
                    file.flush()
                    os.fsync(file.fileno())
                except OSError:
                    file.truncate(0)
        except OSError:
            return False
        return True

    def close(self) -> None:
        release_lock(self._file)
        self._file.close()


@dataclass(frozen=True)
class JournaledRecord:
    """A record as its journal remembers it: enough for the matrix to place its cells."""

    name: str
    kind: str
    claims: frozenset[str]

    def applies(self, claim: str) -> bool:
        return claim in self.claims


def _entries(path: Path) -> tuple[list[dict], bool, int]:
    """The journal's entries; whether its last line was cut (the process died, or the disk filled,
    while writing it); how many other lines were damaged (too long, too deep, not an object). A
    damaged line is left out; nesting past the parser's depth is damage too (its RecursionError)."""
    entries, bad = [], 0
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    last = len(lines) - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    cut = False
    for k, raw in enumerate(lines[: last + 1]):
        text = raw.decode("utf-8", errors="replace")
        entry = None
        if len(text) <= MAX_LINE:
            try:
                entry = json.loads(text)
            except (ValueError, RecursionError):
                entry = None
        if isinstance(entry, dict):
            entries.append(entry)
        elif k == last:
            cut = True
        else:
            bad += 1
    return entries, cut, bad


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
    """Whether the journal has its ``end`` line (read from its tail: a start-up reads every run's).
    Anything but a regular file (a FIFO would block the reader), or one that cannot be read, has
    nothing to recover."""
    return _marked(journal, ENDED_BESIDE, '{"end":', 4096, unreadable=True)


def _marked(journal: Path, beside: str, line: str, span: int, unreadable: bool) -> bool:
    """Whether the journal's last ``span`` bytes hold a line starting ``line``, or the mark
    ``beside`` it is there; ``unreadable`` where it is no regular file or cannot be read."""
    if not_a_file(journal):
        return unreadable
    if journal.with_name(beside).is_file():
        return True
    try:
        with open(journal, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - span))
            tail = file.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return unreadable
    return any(text.startswith(line) for text in tail)


def _outcome(entry: dict, known: set[str]) -> Outcome | None:
    """The outcome of a journal line, or None where it is damaged (an unknown state, a field missing)."""
    try:
        return Outcome(**{k: v for k, v in entry["outcome"].items() if k in known})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def recover(run_dir: Path, recovered_at: str) -> tuple[dict, str] | None:
    """The report of a run that ended without one, from its journal: ``(payload, markdown)``. A
    finished run keeps its own status and header, with ``recovered`` and the reason its report was
    missing; an unfinished one reads ``crashed``, the header's ``crashed_in`` naming the spec and
    encoder that was running. None where the journal has no beginning."""
    from .matrix import render_markdown

    entries, cut, bad = _entries(run_dir / NAME)
    if not entries or "begin" not in entries[0]:
        return None
    begin = entries[0]
    known = {f.name for f in fields(Outcome)}
    records = [JournaledRecord(name, begin["kinds"].get(name, ""), frozenset(claims))
               for name, claims in begin["applies"].items()]
    matrix = Matrix(records)
    running: dict | None = None
    finished: dict | None = None
    unwritten = None
    for entry in entries[1:]:
        if "expect" in entry:
            matrix.expect({(claim, encoder): set(ids) for claim, encoder, ids in entry["expect"]})
        elif "start" in entry:
            running = entry
        elif "outcome" in entry:
            outcome = _outcome(entry, known)
            if outcome is None:
                bad += 1
                continue
            matrix.add(outcome)
            if running is not None and outcome.test_id == running.get("start"):
                running = None
        elif "finished" in entry and isinstance(entry.get("header"), dict):
            finished = entry
        elif "unwritten" in entry:
            unwritten = str(entry["unwritten"])
    damage = {"damaged_lines": bad} if bad else {}
    beside = _beside(run_dir, FINISHED_BESIDE) if finished is None else None
    if finished is not None:
        status = str(finished["finished"])
        why = unwritten or "the run was stopped while it wrote its report"
        header = {**finished["header"], "recovered": recovered_at, "report_missing": why, **damage}
        cells = matrix.states(complete=status == "complete")
    elif beside is not None:  # the journal stopped; the run finished and said so beside it
        status = beside.get("finished") if beside.get("finished") in ("complete", "interrupted", "failed") else "failed"
        stopped = str(beside.get("stopped") or "a write failed")
        why = str((_beside(run_dir, UNWRITTEN_BESIDE) or {}).get("unwritten") or f"the report was not written ({stopped})")
        kept = len(matrix.outcomes)
        header = {**begin["begin"], "status": status, "finished": beside.get("at"), "recovered": recovered_at,
                  "report_missing": why, **damage,
                  "journal_cut": f"the journal stopped ({stopped}) after {kept} outcomes; the run's later outcomes "
                                 "are lost, and their cells read not run"}
        cells = matrix.states(complete=False)
    else:
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
                  "crashed_in": crashed_in, **damage}
    header["outcomes"] = len(matrix.outcomes)
    payload = {"header": header, "matrix": cells, "roles": begin["roles"], "kinds": begin["kinds"],
               "consequences": as_json(consequences(matrix.outcomes, begin["roles"])),
               "outcomes": [o.as_dict() for o in matrix.outcomes]}
    return payload, render_markdown(cells, begin["roles"], header)


def _beside(run_dir: Path, name: str) -> dict | None:
    """A mark left beside a stopped journal: its entry ({} where it is empty or unreadable), or None
    where there is none."""
    path = run_dir / name
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as file:
            entry = json.loads(file.read(MAX_LINE) or b"{}")
    except (OSError, ValueError, RecursionError):
        return {}
    return entry if isinstance(entry, dict) else {}


def _report_stands(run_dir: Path) -> bool:
    """The run folder holds the run's own whole report, not a recovered one."""
    header = run_report_header(run_dir)
    return header is not None and not header.get("recovered") and \
        all((run_dir / name).exists() for name in ("verdicts.md", "verdicts.html"))


def _set_aside(journal: Path, why: str) -> str:
    """Move a journal that cannot be read out of the way: the line that says so."""
    aside = journal.with_name(NAME + ".damaged")
    try:
        os.replace(journal, aside)
        return f"{why}; set aside as {aside}, so that later runs start clean"
    except OSError as error:
        return f"{why}; it could not be set aside ({error.strerror or error}): {journal}"


def recover_unfinished(directory: Path) -> list[str]:
    """Write the report of every run under ``directory`` that ended without one; one line each,
    naming the run, what happened and the report. A finished run whose report stands is only
    marked ended; recovery never prunes the run it recovers."""
    from .reports import now, write

    lines = []
    for run_dir in unfinished(directory):
        journal = run_dir / NAME
        if _report_stands(run_dir) and _finished_mark(journal):
            lines += _append_end(journal)
            continue
        try:
            recovered = recover(run_dir, now())
        except Exception as error:  # noqa: BLE001 - one line per damaged journal, never a traceback
            lines.append(_set_aside(journal, f"run {run_dir.name} left a journal that cannot be read "
                                             f"({type(error).__name__}: {str(error)[:200]})"))
            continue
        if recovered is None:
            try:
                size = journal.stat().st_size
            except OSError:
                size = 0
            if size:
                lines.append(_set_aside(journal, f"run {run_dir.name} left a journal with no readable beginning "
                                                 f"({size} bytes): its outcomes cannot be placed in a matrix"))
            continue
        payload, markdown = recovered
        try:
            written = write(directory, run_dir.name, payload, markdown, latest=False, keep=run_dir.name)
        except Exception as error:  # noqa: BLE001 - a header of the wrong shape: one line, the journal set aside
            lines.append(_set_aside(journal, f"run {run_dir.name} left a journal whose report cannot be made "
                                             f"({type(error).__name__}: {str(error)[:200]})"))
            continue
        lines += list(written.warnings)
        if not written.saved:
            lines.append(f"run {run_dir.name} ended with no report, and its report could not be written now; "
                         f"its journal is kept for the next recovery: {journal}")
            continue
        header = payload["header"]
        damaged = f"; {header['damaged_lines']} damaged journal lines left out" if header.get("damaged_lines") else ""
        if header["status"] != State.CRASHED.value:
            lines.append(f"run {run_dir.name} finished ({header['status']}) but its report was not written "
                         f"({header['report_missing']}); recovered from its journal ({header['outcomes']} outcomes, "
                         f"status {header['status']}){damaged}: {written.run_json}")
        else:
            crashed_in = header["crashed_in"] or {}
            where = (f"while {crashed_in['encoder']} ran {crashed_in['test_id']}" if crashed_in.get("encoder")
                     else "outside the specs this process ran (before the first, between two, or in a worker)")
            lines.append(f"run {run_dir.name} died {where} with no report; recovered from its journal "
                         f"({header['outcomes']} outcomes, status crashed){damaged}: {written.run_json}")
        lines += _append_end(journal)
    return lines


def _finished_mark(journal: Path) -> bool:
    """Whether the journal has its ``finished`` line (it is the last lines' business: read the tail),
    or the mark beside it."""
    return _marked(journal, FINISHED_BESIDE, '{"finished":', MAX_LINE, unreadable=False)


def _append_end(journal: Path) -> list[str]:
    """Mark a recovered journal ended, on a line of its own (after a cut line too): nothing, or the
    line that says it could not be (a read-only folder: it is recovered again next time)."""
    try:
        _write_end(journal)
    except OSError as error:
        return [f"the journal {journal} could not be marked ended ({error.strerror or error}): it will be read "
                "again by the next run"]
    return []


def _write_end(journal: Path) -> None:
    with open(journal, "rb+") as file:
        size = file.seek(0, os.SEEK_END)
        if size:
            file.seek(size - 1)
        ends_cleanly = size == 0 or file.read(1) == b"\n"
        file.seek(0, os.SEEK_END)
        file.write((b"" if ends_cleanly else b"\n") + json.dumps({"end": State.CRASHED.value}).encode() + b"\n")
