"""Where verdict reports go, written so that a report never lies about the run behind it.

Layout of the report directory (``--matrix-dir``, default ``reports/``):

* ``runs/<run id>/verdicts.json``, ``verdicts.md`` and ``verdicts.html`` (the self-contained page of
  :mod:`.html_report`) - the report of every run that judged at least one cell, whatever its status
  (complete, interrupted, failed, crashed), and its ``journal.jsonl`` (:mod:`.journal`); the newest
  :data:`KEEP_RUNS` runs are kept, and the published one;
* ``LATEST`` - the run id of the newest report written;
* ``published`` - a link to the run folder of the newest **complete** run, switched in one step, and
  ``verdicts.json``, ``verdicts.md`` and ``verdicts.html`` - links through it, so the three always
  come from one run. An interrupted, failed or crashed run never replaces it, nor does a run that
  started before the one it holds, nor a partial selection (``-k``, a narrower ``-m``,
  ``--encoders``, test files or node ids) when it holds a full run. Where links cannot be made,
  the three are copies, each renamed into place.

Times are UTC, ISO 8601 with the offset, and compared as instants; run ids start with the UTC
time, so they sort by it. A previous report that cannot be read is set aside (renamed
``*.unreadable-<run id>``) with a warning, never trusted. Every file is written to a temporary
name and renamed into place, so a reader never sees half a report; a write that fails (a full disk)
is one line in the note, and the run folder keeps what could be written. A run announces itself in
``.active/`` while it runs; a second run on the same directory is named in both runs' output.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

try:
    import fcntl
except ImportError:  # Windows: liveness by pid
    fcntl = None
from pathlib import Path

from .html_report import render_html
from ..catalogue.states import State

KEEP_RUNS = 20
#: A run whose process died, its report recovered from its journal, reads as its cells do.
CRASHED = State.CRASHED.value
STATUSES = ("complete", "interrupted", "failed", CRASHED)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def now() -> str:
    """This instant in UTC, ISO 8601 with its offset (``2026-12-03T14:33:55.120+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def instant(text) -> datetime | None:
    """A report's time as an instant (an offset-less time is read as UTC); None if it is none."""
    try:
        parsed = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)  # no half-written file left behind
        raise


#: Files this process holds a run's lock on: a child forked without exec closes its copies at once
#: (:func:`_forget_locks_in_child`), so a lock lives exactly as long as the run's own process.
_HELD: list = []


def _forget_locks_in_child() -> None:
    """In a child forked without exec (multiprocessing's default, DataLoader workers): point the
    descriptors of the parent's locked files at ``/dev/null``, so that the locks die with the parent
    (and the child writes nothing into the parent's journal)."""
    if not _HELD:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for held in _HELD:
        try:
            os.dup2(null, held)
        except OSError:
            pass
    os.close(null)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)


def hold_lock(file) -> None:
    """Lock ``file`` (open) for this run's life: ``flock``, released by the kernel when the last
    descriptor of it closes, which is this process's own (a forked child drops its copy)."""
    if fcntl is None:
        return
    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(file.fileno())


def release_lock(file) -> None:
    """Stop tracking ``file`` (about to be closed, its lock with it)."""
    if file is not None and not file.closed and file.fileno() in _HELD:
        _HELD.remove(file.fileno())


def not_a_file(path: Path) -> bool:
    """Whether ``path`` is there as something other than a regular file (a FIFO, a socket, a
    folder): opening one to read or append could block for ever, or fail."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def run_report_header(run_dir: Path) -> dict | None:
    """The header of the report in a run folder (its json, written last and atomically), or None
    where there is none that reads."""
    if not_a_file(run_dir / "verdicts.json"):
        return None
    try:
        header = json.loads((run_dir / "verdicts.json").read_text(encoding="utf-8"))["header"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def held_by_a_live_run(path: Path, run_id: str) -> bool:
    """Whether run ``run_id``, which locks ``path`` (its marker, its journal) while it lives, is alive:
    the lock is held (``flock``, released by the kernel when a process dies, whatever its pid
    namespace, and never kept by a child it forked: :func:`hold_lock`); by the pid in the run id
    where there is no flock."""
    if not_a_file(path):  # a FIFO would block the probe; no run locks anything but a file
        return False
    if fcntl is not None:
        try:
            with open(path, "a", encoding="utf-8") as probe:
                fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False
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


@dataclass
class ActiveRun:
    """This run's marker in ``<dir>/.active``, locked while the run lives; ``others`` are the runs
    that were active when it began, ``joined`` those that began while it ran (each appends its id to
    the markers it finds)."""

    directory: Path
    run_id: str
    others: list[str]
    joined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what its start found in .active and set aside
    _lock: object = None

    @classmethod
    def begin(cls, directory: Path, run_id: str) -> "ActiveRun":
        active = directory / ".active"
        active.mkdir(parents=True, exist_ok=True)
        others, notes = [], []
        for marker in sorted(active.iterdir()):
            if marker.name == run_id or marker.name.startswith("."):
                continue
            if held_by_a_live_run(marker, marker.name):
                others.append(marker.name)
                try:
                    with open(marker, "a", encoding="utf-8") as told:
                        told.write(run_id + "\n")
                except OSError:
                    pass
            elif marker.is_dir() and not marker.is_symlink():  # no run's marker: set aside, named once
                aside = active / f".{marker.name}.not-a-marker"  # a dot: never read as a marker again
                try:
                    os.replace(marker, aside)
                    notes.append(f"WARNING {marker} is a folder, not a run's marker: set aside as {aside.name}")
                except OSError as error:
                    notes.append(f"WARNING {marker} is a folder, not a run's marker, and could not be set aside: "
                                 f"{error.strerror or error}")
            else:
                marker.unlink(missing_ok=True)  # left by a run that was killed
        # locked under a name of its own, then renamed into place: no run ever sees it unlocked
        pending = active / f".{run_id}.pending"
        lock = open(pending, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole run
        hold_lock(lock)
        lock.write(now() + "\n")
        lock.flush()
        os.replace(pending, active / run_id)
        return cls(directory, run_id, sorted(others), notes=notes, _lock=lock)

    def end(self) -> list[str]:
        """Remove the marker; the runs that began while this one ran. Never raises."""
        marker = self.directory / ".active" / self.run_id
        try:
            self.joined = sorted(set(marker.read_text().split()[1:]))
            marker.unlink(missing_ok=True)
        except OSError:
            pass
        if self._lock is not None:
            release_lock(self._lock)
            self._lock.close()
        return self.joined


@dataclass(frozen=True)
class Written:
    run_json: Path
    run_markdown: Path
    published: bool
    note: str  # why the top-level report was or was not replaced
    run_html: Path | None = None
    warnings: tuple[str, ...] = ()  # an unreadable previous report set aside, a write that failed
    saved: bool = True  # False: the run folder's report could not be written whole


FILES = ("verdicts.json", "verdicts.md", "verdicts.html")


def _set_aside(path: Path, run_id: str, why: str, warnings: list[str]) -> None:
    aside = path.with_name(f"{path.name}.unreadable-{run_id}")
    try:
        os.replace(path, aside)
        warnings.append(f"{path} {why}: set aside as {aside.name}")
    except OSError as error:
        warnings.append(f"{path} {why}, and could not be set aside: {error.strerror or error}")


def _published_header(directory: Path, run_id: str, warnings: list[str]) -> dict:
    """The header of the published report; {} (and a warning, the file set aside) if unreadable."""
    top = directory / "verdicts.json"
    if not top.exists():
        return {}
    if not_a_file(top):  # a folder, a FIFO (which would block the reader)
        _set_aside(top, run_id, "is a folder, not a report" if top.is_dir() else "is not a regular file", warnings)
        return {}
    held = top.resolve() if top.is_symlink() else top  # through the published link: the report itself
    try:
        header = json.loads(top.read_text())["header"]
        if not isinstance(header, dict) or instant(header["started"]) is None:
            raise ValueError("no start time")
        return header
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        _set_aside(held, run_id, f"cannot be read as a report ({type(error).__name__}: {error})", warnings)
        return {}


def _link(target: str, path: Path) -> None:
    """Make ``path`` a symbolic link to ``target`` in one step (a new link renamed over it)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.link")
    temporary.unlink(missing_ok=True)
    os.symlink(target, temporary)
    try:
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # no temporary link left behind
        raise


def _publish(directory: Path, run_dir: Path, texts: dict[str, str]) -> None:
    """Point ``published`` at ``run_dir`` in one step; the top-level files are links through it.
    Where links cannot be made, copy the three files, each renamed into place."""
    try:
        _link(os.path.relpath(run_dir, directory), directory / "published")
        for name in FILES:
            top = directory / name
            if not (top.is_symlink() and os.readlink(top) == f"published/{name}"):
                _link(f"published/{name}", top)
    except (OSError, NotImplementedError):
        for name in FILES:
            atomic_write(directory / name, texts[name])


def write(directory: Path, run_id: str, payload: dict, markdown: str, latest: bool = True,
          keep: str | None = None) -> Written:
    """Write this run's report; publish it if it is complete and the newest. A write that fails is
    a warning; the run folder keeps the files written before it. Pruning old runs spares ``keep``
    (a run being recovered)."""
    status = payload["header"]["status"]
    run_dir = directory / "runs" / run_id
    text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
    texts = {"verdicts.json": text, "verdicts.md": markdown, "verdicts.html": render_html(json.loads(text))}
    warnings: list[str] = []

    def written(published: bool, note: str, saved: bool = True) -> Written:
        return Written(run_dir / "verdicts.json", run_dir / "verdicts.md", published, note,
                       run_dir / "verdicts.html", tuple(warnings), saved)

    try:
        for name in ("verdicts.md", "verdicts.html", "verdicts.json"):  # the json, which says "done", last
            atomic_write(run_dir / name, texts[name])
    except OSError as error:
        warnings.append(f"could not write the report in {run_dir}: {error.strerror or error}; "
                        f"{run_dir} keeps what could be written, and its journal what it recorded")
        return written(False, f"run {status}, not published: its report could not be written", saved=False)
    if latest:  # a pointer to the newest report: one that cannot be written is named, the report stands
        if (directory / "LATEST").is_dir() and not (directory / "LATEST").is_symlink():
            _set_aside(directory / "LATEST", run_id, "is a folder, not the newest run's id", warnings)
        try:
            atomic_write(directory / "LATEST", run_id + "\n")
        except OSError as error:
            warnings.append(f"could not write {directory / 'LATEST'}: {error.strerror or error}")
    if (directory / "published").is_dir() and not (directory / "published").is_symlink():
        _set_aside(directory / "published", run_id, "is a folder, not the link to the published run", warnings)
    top = directory / "verdicts.json"
    if status != "complete" or payload["header"].get("journal_cut"):  # a cut journal recovers part of a run
        _prune(directory, keep)
        cut = ", its journal cut" if payload["header"].get("journal_cut") else ""
        return written(False, f"run {status}{cut}: {top} keeps the last complete run")
    published = _published_header(directory, run_id, warnings)
    before, ours = instant(published.get("started")), instant(payload["header"]["started"])
    if before is not None and before > instant(now()):  # a clock that ran ahead: no later run could ever publish
        warnings.append(f"{top} holds a run that started in the future ({published.get('started')}, a clock ahead "
                        "of this machine's): replaced by this run")
    elif before is not None and ours is not None and before > ours:
        _prune(directory, keep)
        return written(False, f"{top} holds a run that started later; left as it is")
    if published.get("selection") == "full" and payload["header"]["selection"] != "full":
        _prune(directory, keep)
        return written(False, f"this run was a {payload['header']['selection']}; {top} keeps the last full run")
    try:
        _publish(directory, run_dir, texts)
    except OSError as error:
        warnings.append(f"could not publish {top}: {error.strerror or error}")
        return written(False, f"not published: {error.strerror or error}")
    _prune(directory, keep)
    return written(True, f"published as {top} (with its .md and .html)")


def _prune(directory: Path, spare: str | None = None) -> None:
    """Keep the newest :data:`KEEP_RUNS` run folders (run ids sort by their UTC start), the published
    one and ``spare``."""
    runs = directory / "runs"
    try:
        keep = (directory / "published").resolve().name if (directory / "published").is_symlink() else None
        folders = sorted(p for p in runs.iterdir() if p.is_dir())
    except OSError:
        return
    for old in folders[:-KEEP_RUNS]:
        if old.name not in (keep, spare):
            shutil.rmtree(old, ignore_errors=True)
