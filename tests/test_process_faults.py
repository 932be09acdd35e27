"""Faults that take a process down, and the run that must survive them with its report.

Each case runs ``pytest specs`` in a subprocess on a correct RoPE beside a faulty one (written to a
temporary directory, loaded with ``--plugin``) and asserts what a user finds afterwards: a report
(status ``crashed`` where the process died, recovered from the journal), the encoder named, the
other encoder's cells judged, and no hang.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from posenc.harness.verdicts import reports
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.states import State
from tests.test_faults import QUICK, plugin, report, run_specs

ROOT = Path(__file__).resolve().parents[1]


def recover(matrix_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posenc", "report", "--recover", "--matrix-dir", str(matrix_dir)],
                          cwd=ROOT, capture_output=True, text=True)


def only_run(matrix_dir: Path) -> dict:
    (run,) = (matrix_dir / "runs").iterdir()
    return report(run / "verdicts.json")


FATAL = {
    "os_exit": "os._exit(3)",
    "segfault": "import ctypes; ctypes.string_at(0)",
    "oom_kill": "os.kill(os.getpid(), signal.SIGKILL)",  # what the out-of-memory killer sends
}


@pytest.mark.parametrize("fault", FATAL)
def test_a_process_killed_in_an_encoder_leaves_a_crashed_report_naming_it(tmp_path, fault):
    dying = plugin(tmp_path, "dying_rope", f"""
        if FaultyRoPE.calls == 25:
            {FATAL[fault]}
    """)
    reports_dir = tmp_path / "reports"
    died = run_specs("--plugin", dying, "--encoders", "rope_interleaved,dying_rope", *QUICK, matrix_dir=reports_dir)
    assert died.returncode != 0
    assert not (reports_dir / "runs").exists() or not list((reports_dir / "runs").glob("*/verdicts.json"))
    recovered = recover(reports_dir)
    assert recovered.returncode == 0, recovered.stderr
    assert "died while dying_rope ran" in recovered.stdout, recovered.stdout
    data = only_run(reports_dir)
    assert data["header"]["status"] == State.CRASHED
    assert data["header"]["crashed_in"]["encoder"] == "dying_rope"
    crashed = [o for o in data["outcomes"] if o["state"] == State.CRASHED]
    assert len(crashed) == 1 and crashed[0]["encoder"] == "dying_rope"
    assert "the process ended while this spec ran" in crashed[0]["message"]
    cells = {claim: row["dying_rope"] for claim, row in data["matrix"].items()}
    assert cells[crashed[0]["claim"]] == State.CRASHED
    assert not (reports_dir / "verdicts.json").exists()  # a crashed run is never published
    again = recover(reports_dir)
    assert "nothing to recover" in again.stdout  # recovered once


def test_the_next_run_recovers_a_run_that_died(tmp_path):
    dying = plugin(tmp_path, "dying_rope", """
        if FaultyRoPE.calls == 25:
            os._exit(3)
    """)
    reports_dir = tmp_path / "reports"
    run_specs("--plugin", dying, "--encoders", "dying_rope", *QUICK, matrix_dir=reports_dir)
    (dead,) = (reports_dir / "runs").iterdir()
    following = run_specs("--encoders", "rope_interleaved", "-k", "contract and shape", matrix_dir=reports_dir)
    assert following.returncode == 0, following.stdout[-1500:]
    assert f"posenc: run {dead.name} died while dying_rope ran" in following.stdout
    assert report(dead / "verdicts.json")["header"]["status"] == State.CRASHED


WRITER_FAULTS = {  # what the report writer meets, and how the one line names it
    "memory": ('raise MemoryError("the report writer could not allocate")',
               "(MemoryError: the report writer could not allocate)"),
    "ctrl_c": ("raise KeyboardInterrupt", "(interrupted)"),
}


@pytest.mark.parametrize("fault", WRITER_FAULTS)
def test_a_report_writer_that_fails_leaves_the_journal_to_recover(tmp_path, fault):
    """Every spec was judged: the run is finished, so its recovery keeps its status and says why
    the report was missing, never "crashed"."""
    raised, said = WRITER_FAULTS[fault]
    failing = tmp_path / "failing_writer.py"
    failing.write_text(textwrap.dedent(f'''
        import posenc.harness.verdicts.reports as reports

        def failing(*args, **kwargs):
            {raised}

        reports.render_html = failing
    '''))
    reports_dir = tmp_path / "reports"
    result = run_specs("--plugin", failing, "--encoders", "rope_interleaved", "-k", "contract and shape",
                       matrix_dir=reports_dir)
    assert "Traceback" not in result.stdout + result.stderr
    assert f"posenc: the report could not be written {said}; its journal keeps every outcome" in \
        " ".join(result.stdout.split())
    assert result.returncode != 0 if fault == "ctrl_c" else True, "an interrupted run never exits 0"
    recovered = recover(reports_dir)
    assert "finished (complete) but its report was not written" in recovered.stdout, recovered.stdout
    header = only_run(reports_dir)["header"]
    assert header["status"] == "complete" and header["report_missing"] == said.strip("()"), header
    assert header["outcomes"] > 0 and header["recovered"]
    assert "nothing to recover" in recover(reports_dir).stdout  # recovered once


def test_a_killed_worker_becomes_a_crash_cell_and_the_run_ends(tmp_path):
    """pytest-xdist 3.8's loadgroup scheduler hangs after a worker dies; the harness's own does not."""
    flag = tmp_path / "killed-once"
    killer = plugin(tmp_path, "killer_rope", f"""
        if FaultyRoPE.calls == 25 and not os.path.exists({str(flag)!r}):
            open({str(flag)!r}, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    reports_dir = tmp_path / "reports"
    started = time.monotonic()
    result = run_specs("--plugin", killer, "--encoders", "rope_interleaved,killer_rope", *QUICK, "-n", "2",
                       matrix_dir=reports_dir)
    assert time.monotonic() - started < 300  # pytest-xdist 3.8's own scheduler never ends
    assert flag.exists() and result.returncode == 1, result.stdout[-2000:]
    data = report(reports_dir / "runs" / (reports_dir / "LATEST").read_text().strip() / "verdicts.json")
    assert data["header"]["status"] == "complete"
    crashed = [o for o in data["outcomes"] if o["state"] == State.CRASHED]
    assert len(crashed) == 1 and crashed[0]["encoder"] == "killer_rope", crashed
    assert crashed[0]["message"].startswith("the pytest-xdist worker gw")
    assert data["matrix"][crashed[0]["claim"]]["killer_rope"] == State.CRASHED
    judged = {State.HOLDS, State.HOLDS_PARTIAL, State.NA, State.NOT_RUN}  # -k leaves cells partial
    assert {row["rope_interleaved"] for row in data["matrix"].values()} <= judged
    ran = {o["test_id"] for o in data["outcomes"] if o["encoder"] == "killer_rope"}
    assert len(ran) > 10  # the killer's other specs ran in the replacement worker


def test_a_thread_left_running_is_named_and_the_run_exits(tmp_path):
    spinning = plugin(tmp_path, "spinning_rope", """
        if FaultyRoPE.calls == 1:
            import threading
            threading.Thread(target=time.sleep, args=(3600,), name="spinner").start()
    """)
    started = time.monotonic()
    result = run_specs("--plugin", spinning, "--encoders", "spinning_rope", "-k", "contract and shape",
                       matrix_dir=tmp_path / "reports")
    assert time.monotonic() - started < 200
    assert result.returncode == 0, result.stdout[-1500:]
    assert "posenc: WARNING 1 thread left running by the specs or plug-ins: spinner (started while spinning_rope ran)" in \
        " ".join(result.stdout.split())
    assert report(tmp_path / "reports" / "verdicts.json")["header"]["status"] == "complete"


def test_a_thread_a_plugin_starts_at_import_is_named_and_the_run_exits(tmp_path):
    spinning = tmp_path / "import_spinner.py"
    spinning.write_text("import threading, time\n"
                        "threading.Thread(target=time.sleep, args=(3600,), name='import-spinner').start()\n")
    started = time.monotonic()
    result = run_specs("--plugin", spinning, "--encoders", "rope_interleaved", "-k", "contract and shape",
                       matrix_dir=tmp_path / "reports")
    assert time.monotonic() - started < 200
    assert result.returncode == 0, result.stdout[-1500:]
    said = " ".join(result.stdout.split())
    assert f"import-spinner (started while the import of the plug-in {spinning} ran)" in said, said[-1500:]


def test_a_run_out_of_memory_in_pytests_own_code_ends_with_the_way_to_its_outcomes(tmp_path):
    (tmp_path / "oom_plugin.py").write_text("def pytest_runtest_logreport(report):\n"
                                            "    if report.when == 'call':\n"
                                            "        raise MemoryError('out of memory')\n")
    result = run_specs("-p", "oom_plugin", "--encoders", "rope_interleaved", "-k", "contract and shape",
                       matrix_dir=tmp_path / "reports", env={"PYTHONPATH": str(tmp_path), "COLUMNS": "80"})
    assert result.returncode == 3, result.stdout[-1500:]
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    internal = [line for line in result.stderr.splitlines() + result.stdout.splitlines() if "INTERNALERROR" in line]
    assert len(internal) <= 4, internal  # pytest's traceback cut to the frame that ran out
    said = result.stderr[result.stderr.index("posenc: "):]
    assert said.startswith("posenc: the run ran out of memory in pytest's own code"), said
    assert last == f"    python -m posenc report --recover --matrix-dir {tmp_path / 'reports'}", last
    assert max(map(len, said.splitlines()[:-1])) <= 80, said  # the prose fits the terminal; the command is whole


def test_a_spec_without_a_record_is_guarded_and_its_leak_named(tmp_path):
    leaker = tmp_path / "meta_leaker.py"
    leaker.write_text(textwrap.dedent('''
        import torch
        import posenc

        class MetaLeaker(posenc.RotaryEmbedding):
            def forward(self, x, positions=None, *, offset=0):
                y = super().forward(x, positions, offset=offset)
                torch.set_default_device("meta")
                return y

        posenc.register(posenc.EncoderRecord(
            name="meta_leaker", kind="rotary", source="leaks the default device",
            build=lambda c: MetaLeaker(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype),
            geometry=posenc.RotaryGeometry(layout="interleaved"), claims=posenc.rotary_claims()))
    '''))
    result = run_specs("--plugin", leaker, "--encoders", "meta_leaker,rope_interleaved",
                       "-k", "workload or relative_offset", matrix_dir=tmp_path / "reports")
    data = report(tmp_path / "reports" / "verdicts.json")
    assert data["matrix"]["ROPE-4"]["rope_interleaved"] == State.HOLDS, data["matrix"]["ROPE-4"]
    assert "GlobalStateLeak: meta_leaker left torch's global state changed: default device cpu → meta" in \
        " ".join(result.stdout.split())
    assert result.returncode == 1


# ---------------------------------------------------------------- publishing trusts nothing

def _payload(status="complete", started=None, selection="full", run_id="r"):
    header = {"status": status, "selection": selection, "started": started or reports.now(), "run_id": run_id}
    return {"header": header, "matrix": {"contract": {"x": State.HOLDS.value}}, "roles": {"contract": {"x": "verdict"}},
            "kinds": {"x": "rotary"}, "outcomes": []}


def test_times_are_utc_instants_so_another_time_zone_does_not_block_publishing(tmp_path):
    east = reports.write(tmp_path, "20261203-000000-1", _payload(started="2026-12-03T09:00:00+09:00"), "md")
    assert east.published  # 00:00 UTC
    later = reports.write(tmp_path, "20261203-080000-2", _payload(started="2026-12-03T08:00:00+00:00"), "md")
    assert later.published, later.note  # as local-time strings "09:00+09:00" > "08:00+00:00" blocked it
    assert reports.instant(reports.now()).utcoffset().total_seconds() == 0


@pytest.mark.parametrize("previous", ["not json", "folder", "no header"])
def test_an_unreadable_published_report_is_set_aside_with_a_warning(tmp_path, previous):
    top = tmp_path / "verdicts.json"
    if previous == "folder":
        top.mkdir()
    else:
        top.write_text("{" if previous == "not json" else '{"matrix": {}}')
    written = reports.write(tmp_path, "20261203-080000-2", _payload(), "md")
    assert written.published
    assert len(written.warnings) == 1 and "set aside as verdicts.json.unreadable-20261203-080000-2" in \
        written.warnings[0]
    assert json.loads(top.read_text())["header"]["run_id"] == "r"


def test_the_three_published_files_switch_together(tmp_path):
    for number in (1, 2):
        reports.write(tmp_path, f"20261203-08000{number}-{number}", _payload(run_id=str(number)), f"md {number}")
        targets = {(tmp_path / name).resolve().parent for name in reports.FILES}
        assert targets == {tmp_path / "runs" / f"20261203-08000{number}-{number}"}
    assert (tmp_path / "verdicts.md").read_text() == "md 2"


def test_a_write_that_fails_is_one_warning_and_the_run_folder_keeps_the_rest(tmp_path, monkeypatch):
    real = reports.atomic_write

    def full_disk(path, text):
        if path.name == "verdicts.json":
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(reports, "atomic_write", full_disk)
    written = reports.write(tmp_path, "20261203-080000-2", _payload(), "md")
    assert not written.published and not written.saved
    assert written.warnings[0].startswith(f"could not write the report in {tmp_path / 'runs' / '20261203-080000-2'}: "
                                          "No space left on device")
    run_dir = tmp_path / "runs" / "20261203-080000-2"
    assert sorted(p.name for p in run_dir.iterdir()) == ["verdicts.html", "verdicts.md"]  # no .tmp left


def test_pruning_keeps_the_published_run(tmp_path):
    reports.write(tmp_path, "20261203-000000-1", _payload(), "md")
    for number in range(reports.KEEP_RUNS + 2):
        reports.write(tmp_path, f"20261203-09{number:04d}-9", _payload(status="interrupted"), "md")
    assert (tmp_path / "runs" / "20261203-000000-1").is_dir()
    assert json.loads((tmp_path / "verdicts.json").read_text())["header"]["run_id"] == "r"


def test_a_thread_left_running_in_a_worker_is_named_by_the_controller(tmp_path):
    spinning = plugin(tmp_path, "spinning_rope", """
        if FaultyRoPE.calls == 1:
            import threading
            threading.Thread(target=time.sleep, args=(3600,), name="spinner").start()
    """)
    started = time.monotonic()
    result = run_specs("--plugin", spinning, "--encoders", "spinning_rope", "-k", "contract and shape", "-n", "2",
                       matrix_dir=tmp_path / "reports")
    assert time.monotonic() - started < 200 and result.returncode == 0, result.stdout[-1500:]
    assert "left running by the specs in worker gw" in result.stdout
    assert "spinner (started while spinning_rope ran)" in " ".join(result.stdout.split())


def test_a_disk_that_fills_mid_run_is_one_line_each_for_the_journal_and_the_report(tmp_path):
    filling = plugin(tmp_path, "filling_rope", """
        if FaultyRoPE.calls == 10:  # every file stops growing here, as on a full disk
            import resource
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    """)
    result = run_specs("--plugin", filling, "--encoders", "filling_rope", *QUICK, matrix_dir=tmp_path / "reports")
    said = " ".join(result.stdout.split())
    assert "INTERNALERROR" not in result.stdout + result.stderr and "Traceback" not in result.stdout, said[-2000:]
    assert "WARNING the journal" in said and "could not be written (File too large) and stopped" in said, said[-2000:]
    assert "could not write the report in" in said, said[-2000:]
    assert "its journal stopped (File too large) after" in said and "report --recover" in said, said[-2000:]
    assert result.returncode == 0
    from posenc.harness.verdicts import journal  # the run finished: recovered so, never as crashed

    (line, *_) = journal.recover_unfinished(tmp_path / "reports")
    assert "finished (complete) but its report was not written" in line and State.CRASHED.value not in line, line


def _dead_journal(directory: Path, lines: list[str]) -> Path:
    run_dir = directory / "runs" / "20261203-000000-999999"
    run_dir.mkdir(parents=True)
    (run_dir / "journal.jsonl").write_text("\n".join(lines))
    return run_dir


BEGIN = json.dumps({"begin": {"run_id": "20261203-000000-999999", "started": "2026-12-03T00:00:00+00:00",
                              "selection": "full"},
                    "roles": {c: {"x": "verdict" if c == CONTRACT else State.NA.value} for c in (CONTRACT, *CLAIMS)},
                    "kinds": {"x": "rotary"}, "applies": {"x": [CONTRACT]}})


def test_a_journal_cut_mid_line_is_recovered_once_and_says_the_line_is_cut(tmp_path):
    from posenc.harness.verdicts import journal

    start = json.dumps({"start": "specs/test_contract.py::t[x]", "claim": "contract", "encoder": "x"})
    run_dir = _dead_journal(tmp_path, [BEGIN, start, '{"outcome": {"claim": "contract", "enc'])
    (line,) = journal.recover_unfinished(tmp_path)
    assert "died while x ran specs/test_contract.py::t[x]" in line
    header = report(run_dir / "verdicts.json")["header"]
    assert header["status"] == State.CRASHED and header["crashed_in"]["journal_cut"] is True
    assert journal.recover_unfinished(tmp_path) == []  # the end mark is on a line of its own


def test_a_journal_from_another_version_is_one_line_never_a_traceback(tmp_path):
    from posenc.harness.verdicts import journal

    outcome = {"claim": "contract", "encoder": "x", "spec": "t", "test_id": "t", "state": State.HOLDS.value, "duration": 1.5}
    _dead_journal(tmp_path / "newer", [BEGIN, json.dumps({"outcome": outcome})])
    (line,) = journal.recover_unfinished(tmp_path / "newer")  # an unknown field is left out
    assert "recovered from its journal (1 outcomes" in line
    _dead_journal(tmp_path / "foreign", ['{"begin": {}}'])
    (line,) = journal.recover_unfinished(tmp_path / "foreign")
    assert "left a journal that cannot be read (KeyError" in line


def test_a_live_runs_journal_and_marker_are_left_alone_whatever_its_pid(tmp_path):
    """Liveness is the run's lock on its files, not its pid (another pid namespace, a reused pid)."""
    import fcntl

    from posenc.harness.verdicts import journal

    run_dir = _dead_journal(tmp_path, [BEGIN])
    with open(run_dir / "journal.jsonl", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert journal.unfinished(tmp_path) == []
    assert journal.unfinished(tmp_path) == [run_dir]
    own = f"20261203-000000-{__import__('os').getpid()}"  # a stale marker with this process's pid
    (tmp_path / ".active").mkdir()
    (tmp_path / ".active" / own).write_text("x\n")
    assert reports.ActiveRun.begin(tmp_path, "20261203-000001-1").others == []


def test_a_run_that_judges_nothing_does_not_announce_itself(tmp_path):
    result = run_specs("--encoders", "rope_interleaved", "--collect-only", matrix_dir=tmp_path / "reports")
    assert result.returncode == 0
    assert not (tmp_path / "reports" / ".active").exists() or not list((tmp_path / "reports" / ".active").iterdir())
    assert not (tmp_path / "reports" / "runs").exists()
