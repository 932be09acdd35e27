"""Where verdict reports go, written so that a report never lies about the run behind it.

Layout of the report directory (``--matrix-dir``, default ``reports/``):

* ``runs/<run id>/verdicts.json``, ``verdicts.md`` and ``verdicts.html`` (the self-contained page of
  :mod:`.html_report`) - the report of every run that judged at least one cell, whatever its status
  (complete, interrupted, failed); the newest :data:`KEEP_RUNS` runs are kept;
* ``LATEST`` - the run id of the newest report written;
* ``verdicts.json``, ``verdicts.md`` and ``verdicts.html`` - the newest **complete** run. An interrupted or failed
  run never replaces them, nor does a run that started before the one they hold, nor a partial
  selection (``-k``, a narrower ``-m``, ``--encoders``, test files or node ids) when they hold a
  full run.

Every file is written to a temporary name and renamed into place, so a reader never sees half a
report. A run announces itself in ``.active/`` while it runs, so a second run on the same
directory is named in the first line of both runs' output.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .html_report import render_html

KEEP_RUNS = 20
STATUSES = ("complete", "interrupted", "failed")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class ActiveRun:
    """This run's marker in ``<dir>/.active``; ``others`` are the runs that were active when it began."""

    directory: Path
    run_id: str
    others: list[str]

    @classmethod
    def begin(cls, directory: Path, run_id: str) -> "ActiveRun":
        active = directory / ".active"
        active.mkdir(parents=True, exist_ok=True)
        others = []
        for marker in active.iterdir():
            pid = marker.name.rsplit("-", 1)[-1]
            if pid.isdigit() and _alive(int(pid)):
                others.append(marker.name)
            else:
                marker.unlink(missing_ok=True)  # left by a run that was killed
        (active / run_id).write_text(now())
        return cls(directory, run_id, sorted(others))

    def end(self) -> None:
        (self.directory / ".active" / self.run_id).unlink(missing_ok=True)


@dataclass(frozen=True)
class Written:
    run_json: Path
    run_markdown: Path
    published: bool
    note: str  # why the top-level report was or was not replaced
    run_html: Path | None = None


def _header_of(path: Path) -> dict:
    try:
        return json.loads(path.read_text())["header"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def write(directory: Path, run_id: str, payload: dict, markdown: str) -> Written:
    """Write this run's report; publish it at the top level if it is complete and the newest."""
    status = payload["header"]["status"]
    run_dir = directory / "runs" / run_id
    text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
    page = render_html(json.loads(text))  # the page shows exactly what the JSON says
    atomic_write(run_dir / "verdicts.json", text)
    atomic_write(run_dir / "verdicts.md", markdown)
    atomic_write(run_dir / "verdicts.html", page)
    atomic_write(directory / "LATEST", run_id + "\n")
    _prune(directory / "runs")
    top = directory / "verdicts.json"

    def written(published: bool, note: str) -> Written:
        return Written(run_dir / "verdicts.json", run_dir / "verdicts.md", published, note, run_dir / "verdicts.html")

    if status != "complete":
        return written(False, f"run {status}: {top} keeps the last complete run")
    published = _header_of(top)
    if published.get("started", "") > payload["header"]["started"]:
        return written(False, f"{top} holds a run that started later; left as it is")
    if published.get("selection") == "full" and payload["header"]["selection"] != "full":
        return written(False, f"this run was a {payload['header']['selection']}; {top} keeps the last full run")
    atomic_write(directory / "verdicts.md", markdown)
    atomic_write(directory / "verdicts.html", page)
    atomic_write(top, text)
    return written(True, f"published as {top} (with its .md and .html)")


def _prune(runs: Path) -> None:
    for old in sorted(p for p in runs.iterdir() if p.is_dir())[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
