"""The project's own tests: untimed unless the user says ``--timeout``, and the mutation kill rate
that ``tests/test_mutants.py`` measures printed with the reason for each kill.

Many of these tests run a whole spec suite in a subprocess, whose time is the machine's: on a
busy machine they take longer, and a timeout of the project's own (a marker, the ini value meant
for a hanging encoder, a subprocess limit) would turn a slow run red. So they carry none; the
user's ``--timeout`` applies to each, and stops its subprocess with it.
"""

import os
import subprocess
import sys

import pytest
import torch

from posenc.harness.cases.running import first_line

MUTATION_REPORT = pytest.StashKey[dict]()
_WORKER_REPORT = "posenc_mutation_report"


_TERMINAL = ("COLUMNS", "LINES")
_CONTROLLER_TERMINAL = "tests_controller_terminal"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Under ``-n``: the terminal's variables as the controller has them, set or not."""
    node.workerinput[_CONTROLLER_TERMINAL] = {name: os.environ.get(name) for name in _TERMINAL}


@pytest.fixture(scope="session", autouse=True)
def _subprocesses_are_not_xdist_workers(pytestconfig):
    """Under ``-n``, the spec runs these tests start are runs of their own: pytest-xdist's worker
    variables, inherited, would make pytest-benchmark switch itself off in them. They inherit the
    worker's share of the cores instead (``OMP_NUM_THREADS``): torch's default of one thread per
    core, in every worker's spec run at once, leaves threads spinning for descheduled ones. And
    they see the controller's terminal: a worker has ``COLUMNS=80`` and ``LINES=24`` set, which
    would wrap their output at 80 columns where a serial run's wraps at 100."""
    workerinput = getattr(pytestconfig, "workerinput", None)
    if workerinput is not None:
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        for name, value in workerinput.get(_CONTROLLER_TERMINAL, {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    for name in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
        del os.environ[name]


@pytest.fixture
def posenc_here(capsys, monkeypatch):
    """``python -m posenc ARGS`` run in this process, as ``posenc_here(*ARGS)``: a CompletedProcess
    (its exit code, stdout and stderr). Saves a start of Python and torch per call;
    tests/test_tools.py runs the real command. An exception other than the exit propagates, so a
    test shows its traceback."""
    from posenc.__main__ import main

    def run(*args) -> subprocess.CompletedProcess:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", list(sys.argv))  # main sets the command's own
        try:
            code = main([str(a) for a in args])
        except SystemExit as done:
            code = 0 if done.code is None else done.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["python", "-m", "posenc", *map(str, args)], code, out.out, out.err)

    return run


@pytest.fixture(scope="session")
def mutation_report(pytestconfig) -> dict:
    """Filled by the mutant tests, printed at the end of the run."""
    return pytestconfig.stash.setdefault(MUTATION_REPORT, {})


def pytest_collection_modifyitems(config, items):
    if config.getoption("timeout", default=None) is not None:
        return
    for item in items:
        if "tests" in item.path.parts:  # the ini timeout is the specs' (an encoder that hangs)
            item.add_marker(pytest.mark.timeout(0))


def pytest_sessionfinish(session):
    """Under ``-n``: a worker hands its mutation report to the controller, which prints it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and session.config.stash.get(MUTATION_REPORT, None):
        workeroutput[_WORKER_REPORT] = session.config.stash[MUTATION_REPORT]


def pytest_testnodedown(node, error):
    report = getattr(node, "workeroutput", {}).get(_WORKER_REPORT)
    if report:
        node.config.stash[MUTATION_REPORT] = report


def pytest_terminal_summary(terminalreporter, config):
    report = config.stash.get(MUTATION_REPORT, None)
    if not report:
        return
    write = terminalreporter.write_line
    mutants, kills, specs = report["mutants"], report["kills"], report["specs"]
    killed = [m for m in mutants if kills[m]]
    killing_specs = [s for s in specs if report["victims"][s]]
    terminalreporter.section("mutation testing")
    write(f"mutation kill rate: {len(killed)}/{len(mutants)} mutants killed; "
          f"{len(killing_specs)}/{len(specs)} specs kill at least one mutant")
    write(f"mutant run: {len(mutants)} mutants through the default spec suite in {report['wall_s']:.1f} s wall time")
    for mutant in mutants:
        by_spec = kills[mutant]
        if not by_spec:
            reason = report["survivors"].get(mutant, "no spec kills it")
            write(f"  SURVIVED {mutant}: {reason}")
            continue
        expected = [s for s in sorted(by_spec) if s in report["expected"][mutant]]
        shown = (expected or sorted(by_spec))[0]
        write(f"  {mutant}: killed by {len(by_spec)} spec(s): {', '.join(sorted(by_spec))}")
        write(f"      {first_line(by_spec[shown], 160)}")
    idle = [s for s in specs if not report["victims"][s]]
    if idle:
        write(f"specs that kill no mutant: {', '.join(idle)}")
