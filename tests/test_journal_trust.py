"""The journal's trust model (``docs/reference/reports.md``): a run is either finished, its report
standing and never rewritten, or unfinished, recovered exactly once as ``crashed``; a damaged journal
costs one line; liveness is the run's own, never a forked child's.

The kill-anywhere test stops a run at each of its write points (the journal's beginning, an
outcome, the finished mark, the report written, published, old runs pruned, the end mark) by
SIGKILL, SIGTERM or Ctrl-C, then recovers, and checks what a user then reads.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.states import State
from posenc.harness.verdicts import journal, reports
from tests.test_faults import report, run_specs

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--encoders", "rope_interleaved", "-k", "contract and shape")

#: Where a run is stopped, as a patch of the code that writes there: after the write happens.
WRITE_POINTS = {
    "begin": ("journal.Journal", "begin", "True"),
    "outcome": ("journal.Journal", "outcome", "True"),
    "finished": ("journal.Journal", "finished", "True"),
    "report_written": ("reports", "atomic_write", "args[0].name == 'verdicts.json' and 'runs' in args[0].parts"),
    "published": ("reports", "_publish", "True"),
    "pruned": ("reports", "_prune", "True"),
    "end": ("journal.Journal", "end", "True"),
}
STOPS = {
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "sigterm": "os.kill(os.getpid(), signal.SIGTERM); time.sleep(1)",
    "ctrl_c": "raise KeyboardInterrupt",
}
#: Points after which every spec has been judged: the run is finished.
FINISHED = ("finished", "report_written", "published", "pruned", "end")


def _stopper(tmp_path: Path, point: str, stop: str) -> Path:
    owner, name, when = WRITE_POINTS[point]
    module, _, cls = owner.partition(".")
    target = f"{module}.{cls}" if cls else module
    path = tmp_path / f"stop_at_{point}.py"
    path.write_text(textwrap.dedent(f'''
        import os, signal, time
        from posenc.harness.verdicts import journal, reports

        original = {target}.{name}
        done = []

        def stopping(*args, **kwargs):
            result = original(*args, **kwargs)
            if ({when}) and not done:
                done.append(1)
                {STOPS[stop]}
            return result

        {"setattr(" + target + ", " + repr(name) + ", stopping)"}
    '''))
    return path


def _recover(matrix_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posenc", "report", "--recover", "--matrix-dir", str(matrix_dir)],
                          cwd=ROOT, capture_output=True, text=True)


@pytest.fixture(scope="module")
def published_baseline(tmp_path_factory) -> Path:
    """A complete run, published: every case starts from a copy of it."""
    directory = tmp_path_factory.mktemp("baseline") / "reports"
    done = run_specs(*SMALL, matrix_dir=directory)
    assert done.returncode == 0, done.stdout[-2000:]
    return directory


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("point", WRITE_POINTS)
def test_a_run_stopped_at_any_write_point_leaves_true_reports(tmp_path, published_baseline, point, stop):
    directory = tmp_path / "reports"
    shutil.copytree(published_baseline, directory, symlinks=True)
    before = set((directory / "runs").iterdir())
    stopped = run_specs(*SMALL, "--plugin", _stopper(tmp_path, point, stop), matrix_dir=directory)
    said = stopped.stdout + stopped.stderr
    assert "INTERNALERROR" not in said, said[-3000:]
    if stop != "sigkill" or point not in ("end",):
        assert stopped.returncode != 0 or point == "end", (stopped.returncode, said[-2000:])
    (run_dir,) = set((directory / "runs").iterdir()) - before
    first = _recover(directory)
    assert first.returncode == 0 and "Traceback" not in first.stdout + first.stderr, first.stderr[-2000:]
    assert "nothing to recover" in _recover(directory).stdout  # at most once
    own = report(run_dir / "verdicts.json")["header"]
    if point in FINISHED:
        assert own["status"] == "complete", (point, stop, own, first.stdout)  # never turned crashed
    elif stop == "sigkill":
        assert own["status"] == State.CRASHED, (point, stop, own)
    else:
        assert own["status"] in ("interrupted", State.CRASHED), (point, stop, own)
    published = report(directory / "verdicts.json")["header"]
    assert published["status"] == "complete", published  # a crashed run is never shown complete
    ends = [line for line in (run_dir / journal.NAME).read_text().splitlines() if line.startswith('{"end":')]
    assert len(ends) <= 1 or point == "end", ends


# ------------------------------------------------------------------ damaged journals


def _dead_journal(directory: Path, lines: list[str], run_id: str = "20261203-000000-999999") -> Path:
    run_dir = directory / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / journal.NAME).write_text("\n".join(lines) + "\n")
    return run_dir


def _begin(run_id: str = "20261203-000000-999999") -> str:
    return json.dumps({"begin": {"run_id": run_id, "started": "2026-12-03T00:00:00+00:00", "selection": "full"},
                       "roles": {c: {"x": "verdict" if c == CONTRACT else State.NA.value} for c in (CONTRACT, *CLAIMS)},
                       "kinds": {"x": "rotary"}, "applies": {"x": [CONTRACT]}})


def _outcome(test_id: str, state: str = State.HOLDS.value) -> str:
    return json.dumps({"outcome": {"claim": CONTRACT, "encoder": "x", "spec": "t", "test_id": test_id,
                                   "state": state}})


def test_a_line_nested_past_any_parser_is_one_damaged_line(tmp_path):
    run_dir = _dead_journal(tmp_path, [_begin(), _outcome("a"), "[" * 200_000 + "]" * 200_000, _outcome("b")])
    (line,) = journal.recover_unfinished(tmp_path)
    assert "1 damaged journal lines left out" in line and "(2 outcomes" in line, line
    assert report(run_dir / "verdicts.json")["header"]["damaged_lines"] == 1
    assert journal.recover_unfinished(tmp_path) == []


def test_an_outcome_with_an_unknown_state_costs_that_outcome_alone(tmp_path):
    run_dir = _dead_journal(tmp_path, [_begin(), _outcome("a"), _outcome("b", "exploded"), _outcome("c")])
    (line,) = journal.recover_unfinished(tmp_path)
    assert "(2 outcomes" in line and "1 damaged" in line, line
    assert [o["test_id"] for o in report(run_dir / "verdicts.json")["outcomes"]] == ["a", "c"]


def test_a_journal_without_a_readable_beginning_is_set_aside_with_one_line(tmp_path):
    run_dir = _dead_journal(tmp_path, ["{not json", _outcome("a")])
    (line,) = journal.recover_unfinished(tmp_path)
    assert "no readable beginning" in line and "set aside" in line, line
    assert not (run_dir / journal.NAME).exists() and (run_dir / (journal.NAME + ".damaged")).exists()
    assert journal.recover_unfinished(tmp_path) == []  # later runs start clean


def test_recovery_never_prunes_the_run_it_recovers(tmp_path):
    oldest = _dead_journal(tmp_path, [_begin("20200101-000000-1"), _outcome("a")], "20200101-000000-1")
    for k in range(reports.KEEP_RUNS + 3):
        (tmp_path / "runs" / f"20261204-0000{k:02d}-1").mkdir()
    (line,) = journal.recover_unfinished(tmp_path)
    assert (oldest / "verdicts.json").exists(), line
    assert "status crashed" in line


def test_a_finished_runs_report_is_never_rewritten(tmp_path):
    """A journal with its finished mark and a report that stands: recovery marks it ended and
    leaves the report as the run wrote it."""
    header = {"run_id": "r", "started": "2026-12-03T00:00:00+00:00", "status": "complete", "selection": "full"}
    run_dir = _dead_journal(tmp_path, [_begin(), _outcome("a"), json.dumps({"finished": "complete", "header": header})])
    for name in ("verdicts.md", "verdicts.html"):
        (run_dir / name).write_text("as written\n")
    (run_dir / "verdicts.json").write_text(json.dumps({"header": header, "written": "by the run"}))
    assert journal.recover_unfinished(tmp_path) == []
    assert report(run_dir / "verdicts.json")["written"] == "by the run"
    assert journal.unfinished(tmp_path) == []


class _StoppedFile:
    """A journal file whose writes fail as under a file-size limit."""

    closed = False

    def write(self, text):
        raise OSError(27, "File too large")

    def flush(self):
        pass

    def fileno(self):
        return -1

    def close(self):
        self.closed = True


def _stopped_journal(run_dir: Path) -> journal.Journal:
    """A journal that took its beginning and one outcome, then stopped (a file-size limit)."""
    _dead_journal(run_dir.parents[1], [_begin(run_dir.name), json.dumps({"expect": [[CONTRACT, "x", ["a", "b"]]]}),
                                       _outcome("a")], run_dir.name)
    live = journal.Journal(run_dir)
    live.outcomes = 1
    live._file.close()
    live._file = _StoppedFile()
    live.outcome({"claim": CONTRACT, "encoder": "x", "spec": "t", "test_id": "b", "state": State.HOLDS.value})
    assert live.failure and live.outcomes == 1
    return live


def test_a_finished_run_whose_journal_stopped_is_recovered_finished_never_crashed(tmp_path):
    """The journal stopped after 1 of 2 outcomes, then the report could not be written: the marks
    beside the journal keep the run finished; its recovered report keeps its status, names the cut,
    leaves the lost cell not holding, and is not published."""
    run_dir = tmp_path / "runs" / "20261203-000000-999999"
    live = _stopped_journal(run_dir)
    assert live.finished("complete", {"finished": "2026-12-03T00:01:00+00:00"})
    live.unwritten("could not write the report: File too large")
    live.close()
    (line,) = journal.recover_unfinished(tmp_path)
    assert "finished (complete) but its report was not written (could not write the report: File too large)" \
        in line and "status crashed" not in line, line
    header = report(run_dir / "verdicts.json")["header"]
    assert header["status"] == "complete" and "stopped (File too large) after 1 outcomes" in header["journal_cut"]
    assert report(run_dir / "verdicts.json")["matrix"][CONTRACT]["x"] != State.HOLDS.value
    assert not (tmp_path / "published").exists()
    assert "after 1 outcomes" in (run_dir / "verdicts.md").read_text().splitlines()[0]
    assert "This run finished, but its record is partial" in (run_dir / "verdicts.html").read_text()
    assert journal.recover_unfinished(tmp_path) == []  # recovered once


def test_a_report_written_after_the_journal_stopped_stands(tmp_path):
    """The journal stopped, the report was written, the end mark could only go beside it: the next
    run finds the run ended; killed before that mark, the report is still never rewritten."""
    for ends in (True, False):
        run_dir = tmp_path / str(ends) / "runs" / "20261203-000000-999999"
        live = _stopped_journal(run_dir)
        header = {"run_id": "r", "started": "2026-12-03T00:00:00+00:00", "status": "complete", "selection": "full"}
        live.finished("complete", header)
        for name in ("verdicts.md", "verdicts.html"):
            (run_dir / name).write_text("as written\n")
        (run_dir / "verdicts.json").write_text(json.dumps({"header": header, "written": "by the run"}))
        if ends:
            live.end("complete")
            assert journal.unfinished(run_dir.parents[1]) == []
        else:
            live.close()
            assert journal.recover_unfinished(run_dir.parents[1]) == []
        assert report(run_dir / "verdicts.json")["written"] == "by the run"


# ------------------------------------------------------------------ liveness


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_does_not_keep_a_dead_run_alive(tmp_path):
    """A child forked without exec (multiprocessing's default) inherits the run's open files; it
    drops their locks at once, so the run's death is seen while the child lives on."""
    script = tmp_path / "forking_run.py"
    script.write_text(textwrap.dedent(f'''
        import os, signal, time
        from pathlib import Path
        from posenc.harness.verdicts import journal, reports

        directory = Path({str(tmp_path / "reports")!r})
        active = reports.ActiveRun.begin(directory, "20261203-000000-424242")
        log = journal.Journal(directory / "runs" / "20261203-000000-424242")
        log.begin({{"run_id": "20261203-000000-424242", "started": "2026-12-03T00:00:00+00:00",
                    "selection": "full"}}, [], {{}}, {{}})
        child = os.fork()
        if child == 0:
            for stream in (1, 2):  # let the parent's pipes close
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream)
            time.sleep(60)
            os._exit(0)
        print(child, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    '''))
    ran = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True)
    child = int(ran.stdout.split()[0])
    try:
        os.kill(child, 0)  # the child lives on
        run_dir = tmp_path / "reports" / "runs" / "20261203-000000-424242"
        assert journal.unfinished(tmp_path / "reports") == [run_dir]
        assert reports.ActiveRun.begin(tmp_path / "reports", "20261203-000001-1").others == []
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_run_that_can_keep_no_journal_says_so_at_start_up(tmp_path):
    directory = tmp_path / "reports"
    directory.mkdir()
    (directory / "runs").write_text("a file where the runs' folder should be\n")
    ran = run_specs(*SMALL, matrix_dir=directory)
    said = " ".join(ran.stdout.split())
    assert "WARNING no journal can be kept in" in said, said[-2000:]
    assert said.index("WARNING no journal") < said.index("passed") or "passed" not in said


# ------------------------------------------------------------------ what the report says first


def test_verdicts_md_leads_with_the_status_and_an_encoder_name_keeps_to_its_cell():
    from posenc.harness.verdicts.matrix import render_markdown

    header = {"run_id": "r1", "status": "interrupted", "selection": "full", "started": "2026-12-03T00:00:00+00:00",
              "finished": None}
    text = render_markdown({CONTRACT: {"a|b`c": State.HOLDS.value}}, None, header)
    first = text.splitlines()[0]
    assert first.startswith("**Run r1: interrupted**") and "finished never" in first, first
    row = next(line for line in text.splitlines() if line.startswith(f"| {CONTRACT}"))
    assert row.replace("\\|", "").count("|") == 3, row  # claim, one encoder: the pipe is escaped


def test_a_recovered_reports_markdown_says_when_and_why(tmp_path):
    run_dir = _dead_journal(tmp_path, [_begin(), _outcome("a")])
    journal.recover_unfinished(tmp_path)
    first = (run_dir / "verdicts.md").read_text().splitlines()[0]
    assert ": crashed**" in first and "recovered from its journal" in first, first


def test_a_published_report_from_a_clock_ahead_never_blocks_publishing(tmp_path):
    def payload(started: str, run_id: str) -> dict:
        return {"header": {"status": "complete", "selection": "full", "started": started, "run_id": run_id},
                "matrix": {}, "roles": {}, "kinds": {}, "outcomes": []}

    ahead = reports.write(tmp_path, "21000101-000000-1", payload("2100-01-01T00:00:00+00:00", "a"), "x\n")
    assert ahead.published
    ours = reports.write(tmp_path, "20261205-000000-2", payload(reports.now(), "b"), "y\n")
    assert ours.published and any("started in the future" in w for w in ours.warnings), ours


def _begin_slowly(directory: str, run_id: str, delay: float, slow_lock: bool, results) -> None:
    """Begin a run after ``delay``; with ``slow_lock``, its lock takes 0.3 s to be taken (a loaded machine)."""
    import fcntl
    import time

    if slow_lock:
        take = fcntl.flock

        def slow(fd, operation):
            if operation & fcntl.LOCK_EX:
                time.sleep(0.3)
            return take(fd, operation)

        fcntl.flock = slow
    time.sleep(delay)
    active = reports.ActiveRun.begin(Path(directory), run_id)
    time.sleep(0.6)  # the other run has begun meanwhile
    results[run_id] = (Path(directory) / ".active" / run_id).exists()
    active.end()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_run_beginning_while_another_takes_its_lock_keeps_both_markers(tmp_path):
    """A marker is locked before it appears under its name: a run that begins while another is
    still taking its lock never takes that marker for a dead run's and deletes it."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    results = context.Manager().dict()
    runs = [context.Process(target=_begin_slowly, args=(str(tmp_path), "20261201-000000-1", 0.0, True, results)),
            context.Process(target=_begin_slowly, args=(str(tmp_path), "20261201-000000-2", 0.1, False, results))]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert dict(results) == {"20261201-000000-1": True, "20261201-000000-2": True}, dict(results)


# ---------------------------------------------------------------- special files, hostile headers

QUICK = ("--encoders", "rope_interleaved", "-k", "contract and shape")


def test_fifos_and_folders_where_files_belong_neither_hang_nor_block_a_run(tmp_path):
    """A FIFO as a run's journal, as the published report and as a run's marker would block a
    reader for ever; a folder as a marker would stop every later run marking itself active."""
    reports_dir = tmp_path / "reports"
    (reports_dir / "runs" / "20261201-000000-1").mkdir(parents=True)
    os.mkfifo(reports_dir / "runs" / "20261201-000000-1" / journal.NAME)
    (reports_dir / ".active" / "20261201-000000-2" / "x").mkdir(parents=True)
    os.mkfifo(reports_dir / ".active" / "20261201-000000-3")
    os.mkfifo(reports_dir / "verdicts.json")
    result = run_specs(*QUICK, matrix_dir=reports_dir, timeout=120)
    said = " ".join(result.stdout.split() + result.stderr.split())
    assert result.returncode == 0, said[-2000:]
    assert "is not a regular file" in said and "is a folder, not a run's marker" in said, said[-2000:]
    assert report(reports_dir / "verdicts.json")["header"]["status"] == "complete"
    assert sorted(p.name for p in (reports_dir / ".active").iterdir()) == [".20261201-000000-2.not-a-marker"]


def test_a_published_report_nested_past_the_parser_is_set_aside_in_one_line(tmp_path):
    reports_dir = tmp_path / "reports"
    reports_dir.mkdir()
    (reports_dir / "verdicts.json").write_text("[" * 200_000)
    result = run_specs(*QUICK, matrix_dir=reports_dir, env={"COLUMNS": "80"})
    assert result.returncode == 0 and "Traceback" not in result.stdout + result.stderr, result.stdout[-2000:]
    assert "cannot be read as a report (RecursionError" in " ".join(result.stdout.split())
    assert max(map(len, result.stdout.splitlines())) <= 80  # the warning wrapped to the terminal
    assert report(reports_dir / "verdicts.json")["header"]["status"] == "complete"


def test_a_finished_journal_whose_header_cannot_make_a_report_costs_one_line(tmp_path):
    """A journal that reads but whose header lacks what a report needs (its start time) is set
    aside with one line; later runs start clean (was INTERNALERROR on every run)."""
    reports_dir = tmp_path / "reports"
    run_specs(*QUICK, matrix_dir=reports_dir)
    (run,) = (reports_dir / "runs").iterdir()
    kept = [line for line in (run / journal.NAME).read_text().splitlines()
            if not line.startswith(('{"end"', '{"finished"'))]
    finished = json.dumps({"finished": "complete", "header": {"status": "complete"}})  # no start time
    (run / journal.NAME).write_text("\n".join([*kept, finished]) + "\n")
    for name in ("verdicts.json", "verdicts.md", "verdicts.html"):
        (run / name).unlink(missing_ok=True)
    first = run_specs(*QUICK, matrix_dir=reports_dir)
    assert first.returncode == 0 and "INTERNALERROR" not in first.stdout + first.stderr, first.stdout[-2000:]
    assert f"run {run.name} left a journal" in " ".join(first.stdout.split()), first.stdout[-2000:]
    second = run_specs(*QUICK, matrix_dir=reports_dir)
    assert f"run {run.name}" not in second.stdout, second.stdout[-2000:]


def test_a_journal_that_cannot_be_marked_ended_says_so(tmp_path):
    assert journal._append_end(tmp_path) == [
        f"the journal {tmp_path} could not be marked ended (Is a directory): it will be read again by the next run"]


def test_ctrl_c_in_the_first_spec_is_never_recovered_as_the_encoders_crash(tmp_path):
    """Stopped before its first outcome, the run writes its report (interrupted, no outcome) and
    ends its journal: the next run does not say the encoder crashed (was: "died while … ran")."""
    stopping = tmp_path / "stopping_rope.py"
    stopping.write_text(textwrap.dedent('''
        import posenc

        class Stopping(posenc.RotaryEmbedding):
            def forward(self, *args, **kwargs):
                raise KeyboardInterrupt  # Ctrl-C while the spec runs

        posenc.register(posenc.EncoderRecord(
            name="stopping_rope", kind="rotary", source="a Ctrl-C in its first call",
            build=lambda c: Stopping(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
            geometry=posenc.RotaryGeometry(layout="interleaved"), claims=posenc.rotary_claims()))
    '''))
    directory = tmp_path / "reports"
    stopped = run_specs("--plugin", stopping, "--encoders", "stopping_rope", "-k", "contract and shape",
                        matrix_dir=directory)
    assert stopped.returncode == 2, stopped.stdout[-2000:]
    (run,) = (directory / "runs").iterdir()
    assert report(run / "verdicts.json")["header"]["status"] == "interrupted"
    later = run_specs(*SMALL, matrix_dir=directory)
    assert "stopping_rope" not in later.stdout and "died" not in later.stdout, later.stdout[-2000:]


def test_a_process_a_plugin_forks_and_leaves_running_is_named_and_the_run_exits(tmp_path):
    forking = tmp_path / "forking_plugin.py"
    forking.write_text("import multiprocessing, time\n"
                       "multiprocessing.get_context('fork').Process(target=time.sleep, args=(3600,),"
                       " name='sleeper').start()\n")
    result = run_specs("--plugin", forking, *SMALL, matrix_dir=tmp_path / "reports", timeout=120)
    said = " ".join(result.stdout.split())
    assert result.returncode == 0, said[-2000:]
    assert "1 process left running by the specs or plug-ins: process sleeper (pid" in said, said[-2000:]


@pytest.mark.parametrize("name", ["LATEST", "published"])
def test_a_folder_where_a_pointer_belongs_is_set_aside_and_the_run_publishes(tmp_path, name):
    """A folder named ``LATEST`` blocked every later publication, blaming the report; one named
    ``published`` left a temporary link behind at each run."""
    directory = tmp_path / "reports"
    (directory / name / "x").mkdir(parents=True)
    result = run_specs(*SMALL, matrix_dir=directory)
    said = " ".join(result.stdout.split())
    assert result.returncode == 0 and f"{directory / name} is a folder" in said, said[-2000:]
    assert "published as" in said, said[-2000:]
    assert (directory / name).is_file() or (directory / name).is_symlink()
    assert not [p.name for p in directory.iterdir() if p.name.endswith(".link")]
