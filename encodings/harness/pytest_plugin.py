"""The harness's pytest plug-in: the hooks, each handing its work to the module that does it.

Enabled by the repository's ``conftest.py``. The road from a record to a cell:

1. :mod:`.run.options` reads and checks every option and ``POSENC_*`` variable (``pytest --help``
   lists them); :mod:`.run.selection` loads plug-ins, ``--identify`` and ``--model``, picks encoders;
2. :mod:`.cases.parametrization` makes one case per (spec, encoder, dtype) the claim applies to;
3. :mod:`.cases.execution` runs a case under its timeout, blocked where the encoder cannot be judged,
   with torch's global state restored (:mod:`.cases.running` tells the assertion helpers which spec);
4. :mod:`.cases.judge` turns what the case raised into a :class:`~.catalogue.states.State`, against the
   record's declaration, with message and reproducers;
5. :class:`.verdicts.matrix.Matrix` aggregates the outcomes into cells, once; :mod:`.verdicts.reports` writes
   ``verdicts.json``, ``.md`` and ``.html``; :mod:`.run.terminal` and :mod:`.performance.perf_report` print them.

Hypothesis profiles: ``conftest.py``, chosen by ``--hypothesis-profile`` or ``POSENC_HYPOTHESIS_PROFILE``.
Benchmarks take ``perf_record`` (no models) and ``perf_device`` (:mod:`.run.benchmark_gates` compares runs).
"""

from __future__ import annotations

import pytest

from .cases import execution, judge, parallel, process
from .cases.collector import OUTCOME, OutcomeCollector
from .cases.parametrization import case_of, claim_of, spec_params
from .cases.running import RunningSpec, running
from .catalogue.states import State
from .performance import perf_report
from .run import benchmark_gates, finishing, options, session as run, terminal
from .run.selection import SelectionError, probe_timeout, select
from .verdicts import journal, reports
from .verdicts.matrix import Matrix
from .verdicts.width import terminal_width, wrap_all

_STATE = pytest.StashKey[run.HarnessState]()
_CASE = pytest.StashKey[object]()  # the item's SpecCase, or None
_TIMEOUT = pytest.StashKey[float]()
_SPEC_ID = pytest.StashKey[str]()  # the node id before pytest-xdist appends its group
_RUNNING = pytest.StashKey[RunningSpec]()
_COLLECTOR = "posenc-outcomes"


def pytest_addoption(parser):
    options.addoptions(parser)


def _is_worker(config) -> bool:
    return parallel.worker_id(config) is not None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    settings = options.read(config)
    if not config.getoption("hypothesis_profile", default=None):
        from hypothesis import settings as hypothesis_settings

        hypothesis_settings.load_profile(settings.hypothesis_profile)
    try:
        chosen = select(settings, probe_timeout(config))  # --identify's probing calls run under --timeout
    except SelectionError as error:
        raise options.usage_error(str(error)) from None
    if settings.perf_threads:
        import torch

        torch.set_num_threads(settings.perf_threads)
    benchmark_gates.configure_benchmarks(config, settings.perf_length)
    perf = run.PerfSession(chosen.records, settings.device, settings.perf_devices, settings.profile_run_dir,
                           settings.perf_compare, settings.perf_gates, length=settings.perf_length)
    config.stash[_STATE] = state = run.HarnessState(settings, chosen.records, chosen.identified, perf,
                                                    Matrix(chosen.records), reports.new_run_id(), reports.now())
    process.tune()
    parallel.configure_worker(config, settings.device, settings.perf_threads)
    if not _is_worker(config):
        parallel.configure_controller(config)
        config.pluginmanager.register(OutcomeCollector(state, run.journal_begin(config, state)), _COLLECTOR)
        state.recovered = journal.recover_unfinished(settings.matrix_dir)  # runs that died without a report
        run.interrupt_on_sigterm()


@pytest.hookimpl(wrapper=True)
def pytest_report_header(config):
    """posenc's header, and every plug-in's header line, wrapped to the terminal's width."""
    others = yield
    lines = [run.header_lines(config.stash[_STATE]), *others]
    fit = terminal_width()
    return [wrap_all([line] if isinstance(line, str) else line, fit) for line in lines]


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    parallel.own_hypothesis_database(session.config)
    state = session.config.stash.get(_STATE, None)
    if state is not None and parallel.distributing(session.config):  # a serial run announces itself once collected
        run.announce(session.config, state)


def pytest_generate_tests(metafunc):
    state = metafunc.config.stash[_STATE]
    found = claim_of(metafunc.definition)
    if "record" in metafunc.fixturenames and found is not None:
        takes_dtype = "dtype" in metafunc.fixturenames
        metafunc.parametrize("record,dtype" if takes_dtype else "record",
                             spec_params(metafunc.function.__name__, takes_dtype, state.records, *found))
    if "perf_record" in metafunc.fixturenames:
        metafunc.parametrize("perf_record", perf := [r for r in state.records if r.kind not in ("model", "producer")],
                             ids=[r.name for r in perf])
    if "perf_device" in metafunc.fixturenames:
        metafunc.parametrize("perf_device", state.perf.devices)


@pytest.fixture(scope="session")
def device(request) -> str:
    """The device the specs run on (``--device``)."""
    return request.config.stash[_STATE].settings.device


@pytest.fixture(scope="session")
def perf_session(request) -> run.PerfSession:
    """The benchmarks' shared state: devices, profile directory, rows and notes for the summary."""
    return request.config.stash[_STATE].perf


def _case(item):
    if _CASE not in item.stash:
        item.stash[_CASE] = case_of(item)
    return item.stash[_CASE]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Before ``-k``/``-m`` deselect anything: which test ids each cell expects."""
    expected: dict[tuple[str, str], set[str]] = {}
    for item in items:
        case = _case(item)
        if case is not None:
            item.stash[_SPEC_ID] = item.nodeid
            expected.setdefault((case.claim, case.record.name), set()).add(item.nodeid)
    collector = config.pluginmanager.get_plugin(_COLLECTOR)
    (collector.expect if collector is not None else config.stash[_STATE].matrix.expect)(expected)
    if collector is not None and expected and not config.option.collectonly:  # a run that will judge specs
        run.announce(config, config.stash[_STATE])
    benchmark_gates.order_gate_last(config, items)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    timeout = execution.user_timeout(item.config, settings.timeout)  # the user's --timeout beats any marker
    item.stash[_TIMEOUT] = timeout
    return True if timeout and execution.start_timer(timeout, settings.method) else None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_cancel_timer(item):
    return True if _TIMEOUT in item.stash and execution.cancel_timer() else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    case = _case(item)
    if case is None:
        with execution.guarded_without_case(item):
            return (yield)
    state = item.config.stash[_STATE]
    item.stash[_RUNNING] = spec = RunningSpec(case.claim, case.spec, item.stash.get(_SPEC_ID, item.nodeid),
                                              str(item.path), case.record, tuple(item.fixturenames))
    judge.report_briefly(item, case)
    collector = item.config.pluginmanager.get_plugin(_COLLECTOR)  # None in a pytest-xdist worker
    if collector is not None:
        collector.started(spec.nodeid, case.claim, case.record.name)
    with execution.guarded(case, state.settings.perf_threads), execution.sized_draws(item, case):
        execution.block_if_unjudgeable(case, state.timed_out, state.settings.device)  # the probe runs the encoder
        with running(spec), execution.blamed_on_history(case, state.settings.device):
            return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    case = _case(item)
    if case is None or (call.when != "call" and not report.failed):
        return report
    timeout = item.stash.get(_TIMEOUT, None)
    verdict = judge.judge(case, call.excinfo, call.duration, timeout, call.when)
    if verdict is None:
        return report
    if verdict == State.TIMED_OUT:
        item.config.stash[_STATE].timed_out.setdefault(case.record.name, case.spec)
    reproduce = (lambda excinfo: judge.reproducers(item.stash[_RUNNING], item.obj, item.funcargs, excinfo)) \
        if _RUNNING in item.stash else None
    found = judge.outcome(case, verdict, item.stash.get(_SPEC_ID, item.nodeid), call.excinfo, timeout, reproduce)
    shortened = verdict in (State.CRASHED, State.UNEXPECTEDLY_FAILING) and reproduce is not None
    if shortened and item.config.option.tbstyle == "auto":  # --tb=long and the others keep pytest's traceback
        report.longrepr = judge.short_failure(verdict, call.excinfo, found.reproducer)
    report.user_properties.append((OUTCOME, found.as_dict()))
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    benchmark_gates.update_machine_info(machine_info)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    parallel.mark_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    expected = parallel.expected_from_node(node, {})
    collector = node.config.pluginmanager.get_plugin(_COLLECTOR)
    if expected and collector is not None:
        collector.expect(expected)
    finishing.note_worker_threads(node, node.config.stash[_STATE])


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _is_worker(config):
        parallel.expected_to_workeroutput(config, state.matrix.expected)
        config.workeroutput[finishing.THREADS] = finishing.threads_left_running()
        return
    collector = config.pluginmanager.get_plugin(_COLLECTOR)
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop) or collector.gave_up(config)
    state.status, state.exit_code = run.run_status(interrupted, exitstatus), int(exitstatus)
    finishing.write_report(config, state, collector, exitstatus, session)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    """The verdict matrix, then posenc's performance tables: printed after pytest-benchmark's."""
    state = config.stash.get(_STATE, None)
    if state is None or _is_worker(config):
        return
    if state.written is not None:
        terminal.verdict_summary(terminalreporter, state, state.cells, state.settings.matrix_mode)
    terminal.write_notes(terminalreporter, [*state.notes, run.joined_warning(state)])
    perf_report.report(terminalreporter, state.perf)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Threads a spec left running are named, and the run ends without waiting for them."""
    state = config.stash.get(_STATE, None)
    if state is not None:  # a worker's are named by the controller (pytest_testnodedown)
        finishing.exit_past_threads(config.pluginmanager.get_plugin("terminalreporter"), state.exit_code)
