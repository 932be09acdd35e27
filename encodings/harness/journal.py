"""The run's journal: every outcome appended as it is judged, so that a run that dies keeps them.

``runs/<run id>/journal.jsonl`` holds one JSON object per line, each written and flushed at once:

* ``{"begin": header, "roles": …, "kinds": …, "applies": {encoder: [claims]}}`` - the run as it
  started;
* ``{"expect": [[claim, encoder, [test ids]], …]}`` - the test ids each cell expects;
* ``{"start": test id, "claim": …, "encoder": …}`` - a spec of a serial run about to run its
  encoder's code (under ``-n`` a worker that dies is the controller's to report: :mod:`.collector`);
* ``{"outcome": {…}}`` - a judged spec;
* ``{"end": status}`` - the report was written.

A process killed by ``os._exit``, a fatal signal (a segfault) or the out-of-memory killer (SIGKILL)
writes nothing more, and one whose report writer fails ends without ``end``. :func:`recover`
turns such a journal into the run's report, status ``crashed``: every outcome up to the crash,
and the spec that was running when the process died as a CRASH of its encoder's cell. The next
run on the directory recovers it (:func:`unfinished`), or ``python -m posenc report --recover``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .matrix import Matrix, Outcome
from .states import State

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
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def _write(self, entry: dict) -> None:
        if self._file.closed:
            return
        self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._file.flush()

    def begin(self, header: dict, records, roles: dict, kinds: dict) -> None:
        from .claims import CLAIMS, CONTRACT

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


def _entries(path: Path) -> list[dict]:
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            break  # the line the process was writing when it died
    return entries


def _pid_alive(run_id: str) -> bool:
    pid = run_id.rsplit("-", 1)[-1]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unfinished(directory: Path) -> list[Path]:
    """Run folders under ``directory/runs`` whose journal has no end and whose process is gone."""
    runs = directory / "runs"
    if not runs.is_dir():
        return []
    found = []
    for journal in sorted(runs.glob(f"*/{NAME}")):
        try:
            entries = _entries(journal)
        except OSError:
            continue
        if entries and "begin" in entries[0] and not any("end" in e for e in entries) \
                and not _pid_alive(journal.parent.name):
            found.append(journal.parent)
    return found


def recover(run_dir: Path, recovered_at: str) -> tuple[dict, str] | None:
    """The report of a run that died, from its journal: ``(payload, markdown)``, the header's
    ``crashed_in`` naming the spec and encoder that was running; None where the journal has no
    beginning."""
    from .matrix import render_markdown

    entries = _entries(run_dir / NAME)
    if not entries or "begin" not in entries[0]:
        return None
    begin = entries[0]
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
            matrix.add(Outcome(**entry["outcome"]))
            if running is not None and entry["outcome"]["test_id"] == running["start"]:
                running = None
    crashed_in = None
    if running is not None:
        crashed_in = {"claim": running["claim"], "encoder": running["encoder"], "test_id": running["start"]}
        matrix.add(Outcome(running["claim"], running["encoder"], spec_name(running["start"]), running["start"],
                           State.CRASHED, CRASH_MESSAGE))
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
        recovered = recover(run_dir, now())
        if recovered is None:
            continue
        payload, markdown = recovered
        written = write(directory, run_dir.name, payload, markdown, latest=False)
        crashed_in = payload["header"]["crashed_in"] or {}
        where = (f"while {crashed_in['encoder']} ran {crashed_in['test_id']}" if crashed_in.get("encoder")
                 else "between specs")
        lines.append(f"run {run_dir.name} died {where} with no report; recovered from its journal "
                     f"({payload['header']['outcomes']} outcomes, status crashed): {written.run_json}")
        with open(run_dir / NAME, "a", encoding="utf-8") as journal:
            journal.write(json.dumps({"end": State.CRASHED.value}) + "\n")
    return lines
