"""The harness's pytest plug-in: encoder selection, parametrization, verdict matrix, benchmarks.

Enabled by the repository's ``conftest.py``. Options (and environment variables):

* ``--encoders a,b`` (``POSENC_ENCODERS``): run the specs on these encoders only;
* ``--plugin FILE`` (``POSENC_PLUGINS``, paths joined by ``os.pathsep``): load a user file that
  registers encoders;
* ``--device cpu|cuda`` (``POSENC_DEVICE``): where the specs run;
* ``--perf-devices cpu,cuda`` (``POSENC_PERF_DEVICES``; default ``auto``: CPU, and CUDA when
  present): where the benchmarks run;
* ``--perf-threads N`` (``POSENC_PERF_THREADS``): ``torch.set_num_threads(N)`` for the session;
* ``--profile``: benchmarks also write torch.profiler traces, and TensorBoard summaries go to
  ``<profile-dir>/<run id>/summaries``; ``--profile-dir DIR`` (default ``profiles``),
  ``--profile-run-id ID`` (default: a timestamp);
* ``--matrix-dir DIR`` (``POSENC_MATRIX_DIR``): where ``verdicts.json`` and ``verdicts.md`` are
  written (default ``reports/``);
* ``--hypothesis-profile`` (``POSENC_HYPOTHESIS_PROFILE``): dev | ci | thorough.

Every option and ``POSENC_*`` variable is checked before collection (:mod:`.options`). Each
spec runs with torch's global state restored after it (:mod:`.isolation`), under a timeout
(pytest-timeout, ``--timeout``), and is blocked, not run, when its encoder breaks the shape
contract (:mod:`.contract`). Reports are written per run and published only when complete
(:mod:`.reports`).

One parametrization serves every spec. A spec is a test marked
``@pytest.mark.claim("ID", kinds=(...))`` that takes a ``record`` argument (and optionally
``dtype`` and ``device``); it is generated for every selected encoder to which the claim
applies. A declared refutation becomes a strict expected failure that accepts only
:class:`ClaimViolation`. A benchmark takes ``perf_record`` and ``perf_device`` instead.
"""

from __future__ import annotations

import fnmatch
import inspect
import signal
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pytest
import torch

from . import history, identification, isolation, machine, options, parallel, perf_report, registry, reports
from .claims import CLAIMS, CONTRACT, ClaimViolation, NoClearError
from .contract import Blocked, Excluded, SpecTimeout, Undecided, contract_problem
from .matrix import Outcome, build_matrix, render_markdown, render_text, roles, surprise_lines
from .records import SPEC_CONFIG, EncoderRecord
from .running import RunningSpec, drawn_from_traceback, first_line, python_reproducer, reproducer, running, shorten


@dataclass
class PerfSession:
    """What the benchmarks share: where they run and write, and what the summary prints."""

    records: list[EncoderRecord]
    device: str  # the specs' device (--device)
    devices: tuple[str, ...]  # the benchmarks' devices (--perf-devices)
    run_dir: Path | None  # set by --profile
    benchmarks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)  # time and memory against length, per encoder
    regressions: list[str] = field(default_factory=list)  # against --perf-compare

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@dataclass
class HarnessState:
    settings: options.Settings
    records: list[EncoderRecord]
    perf: PerfSession
    run_id: str
    started: str
    active: reports.ActiveRun | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    expected: dict[tuple[str, str], set[str]] | None = None  # collected test ids per cell
    timed_out: dict[str, str] = field(default_factory=dict)  # encoder -> the spec that hung
    written: reports.Written | None = None
    status: str = "interrupted"


_STATE = pytest.StashKey[HarnessState]()
_TIMEOUT = pytest.StashKey[float]()
_SPEC_ID = pytest.StashKey[str]()  # the node id before pytest-xdist appends its group
_OUTCOME = "posenc_outcome"  # the user property that carries a spec's outcome to the controller


def pytest_addoption(parser):
    options.addoptions(parser)


def _is_worker(config) -> bool:
    return parallel.worker_id(config) is not None


def _load_plugins(files) -> None:
    for path in files:
        before = isolation.capture()
        try:
            registry.load_plugin(path)
        except registry.PluginError as error:
            raise pytest.UsageError(str(error)) from None
        changed = isolation.restore(before)
        if changed:
            raise pytest.UsageError(f"plug-in {path}: changed torch's global state on import ({'; '.join(changed)}); "
                                    "a plug-in file should only define and register encoders")


def _register_identified(settings: options.Settings) -> None:
    """``--identify FILE.py:NAME``: identify the target and register the record of what it computes."""
    import importlib.util

    target_spec, protocol, apply_name = settings.identify
    path, _, name = target_spec.rpartition(":")
    identified_name = f"identified_{name}"
    if identified_name in {r.name for r in registry.records()}:
        return
    module_spec = importlib.util.spec_from_file_location(f"identified_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
        target = getattr(module, name)
        apply = getattr(module, apply_name) if apply_name else None
        probe = target(SPEC_CONFIG.head_dim) if inspect.isclass(target) else target
        found = identification.identify(probe, protocol=protocol, apply=apply, head_dim=SPEC_CONFIG.head_dim)
    except Exception as error:  # noqa: BLE001 - one line, like a plug-in error
        raise pytest.UsageError(f"--identify {target_spec}: {type(error).__name__}: {error}") from None
    registry.register(replace(identification.identified_record(
        found, identified_name, identification.build_identified(target, protocol), protocol=protocol, apply=apply,
        source=f"identified from its outputs: {target_spec}"), origin="identified"))
    _IDENTIFIED[identified_name] = found.report()


_IDENTIFIED: dict[str, str] = {}


def _select(settings: options.Settings) -> list[EncoderRecord]:
    _load_plugins(settings.plugins)
    if settings.identify:
        _register_identified(settings)
    everything = registry.records()
    names = [r.name for r in everything]
    unknown = [n for n in settings.encoders if not fnmatch.filter(names, n)]
    if unknown:
        raise pytest.UsageError(
            f"--encoders: no encoder matches {', '.join(unknown)}; registered: {', '.join(r.name for r in everything)}"
        )
    return [r for r in everything if not settings.encoders or any(fnmatch.fnmatchcase(r.name, p) for p in settings.encoders)]


def _interrupt_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C, so the report says "interrupted" instead of vanishing."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    if hasattr(signal, "SIGTERM") and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            pass


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    settings = options.read(config)
    if not config.getoption("hypothesis_profile", default=None):
        from hypothesis import settings as hypothesis_settings

        hypothesis_settings.load_profile(settings.hypothesis_profile)
    records = _select(settings)
    if settings.perf_threads:
        torch.set_num_threads(settings.perf_threads)
    _narrow_benchmark_tables(config)
    perf = PerfSession(records, settings.device, settings.perf_devices, settings.profile_run_dir)
    state = HarnessState(settings, records, perf, reports.new_run_id(), reports.now())
    config.stash[_STATE] = state
    parallel.configure_worker(config, settings.device, settings.perf_threads)
    if not _is_worker(config):
        parallel.configure_controller(config)
        config.pluginmanager.register(OutcomeCollector(state), "posenc-outcomes")
        state.active = reports.ActiveRun.begin(settings.matrix_dir, state.run_id)
        _interrupt_on_sigterm()


def _narrow_benchmark_tables(config) -> None:
    """pytest-benchmark's tables with a few columns and short names, so nothing is wider than 160
    columns; ``--benchmark-columns`` and ``--benchmark-name long`` bring its full tables back."""
    if getattr(config.option, "benchmark_columns", "absent") is None:
        config.option.benchmark_columns = ["median", "iqr", "rounds"]
    if getattr(config.option, "benchmark_name", None) == "normal":
        config.option.benchmark_name = "short"


def selected_records(config) -> list[EncoderRecord]:
    return config.stash[_STATE].records


def pytest_report_header(config):
    state = config.stash[_STATE]
    settings = state.settings
    lines = [
        f"posenc: encoders ({len(state.records)}): {', '.join(r.name for r in state.records)}",
        f"posenc: plug-ins: {', '.join(settings.plugins) or 'none'}",
        f"posenc: torch {torch.__version__}, device {settings.device} ({machine.device_name(settings.device)}), "
        f"hypothesis profile {settings.hypothesis_profile}",
        f"posenc: run {state.run_id}, reports in {settings.matrix_dir}",
    ]
    for name, report in _IDENTIFIED.items():
        lines.append(f"posenc: {name}, as identified from its outputs:")
        lines += [f"posenc:   {line}" for line in report.splitlines()]
    libraries = _library_versions()
    if libraries:
        lines.append("posenc: libraries: " + ", ".join(f"{name} {v}" for name, v in libraries.items()))
    return lines


def _concurrency_warning(state: HarnessState) -> str | None:
    if state.active and state.active.others:
        return (f"posenc: WARNING another run is writing to {state.settings.matrix_dir} "
                f"({', '.join(state.active.others)}): each keeps its own report under runs/")
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    parallel.own_hypothesis_database(session.config)
    state = session.config.stash.get(_STATE, None)
    warning = _concurrency_warning(state) if state else None
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if warning and reporter is not None:
        reporter.write_line(warning, yellow=True)


# ---------------------------------------------------------------- parametrization

def claim_of(node) -> tuple[str, dict] | None:
    """The claim a spec decides, from its ``claim`` marker, and the marker's options."""
    marker = node.get_closest_marker("claim")
    if marker is None:
        return None
    claim = marker.args[0]
    if claim not in CLAIMS and claim != CONTRACT:
        raise pytest.UsageError(f"{node.nodeid}: unknown claim {claim!r}")
    return claim, marker.kwargs


def _spec_params(metafunc, state: HarnessState, claim: str, options_: dict) -> list:
    kinds, requires = options_.get("kinds"), options_.get("requires")
    takes_dtype = "dtype" in metafunc.fixturenames
    params = []
    for record in state.records:
        if not record.applies(claim) or (kinds and record.kind not in kinds) or (requires and not requires(record)):
            continue
        spec = metafunc.function.__name__
        if not takes_dtype:
            params.append(pytest.param(record, id=record.name, marks=_marks(record, claim, spec)))
            continue
        dtypes = options_["dtypes"] if options_.get("all_dtypes") else \
            [d for d in record.dtypes if d in options_.get("dtypes", record.dtypes)]
        for dtype in dtypes:
            params.append(pytest.param(record, dtype, id=f"{record.name}-{str(dtype).removeprefix('torch.')}",
                                       marks=_marks(record, claim, spec, dtype)))
    return params


def _marks(record: EncoderRecord, claim: str, spec: str, dtype=None) -> list:
    """Its encoder's xdist group (one encoder's specs share a worker), and a strict expected failure
    where the record declares the claim refuted for this spec and dtype."""
    group = pytest.mark.xdist_group(record.name)
    declared = record.declared(claim)
    if not declared.expects_failure(spec, dtype):
        return [group]
    where = f" in {str(dtype).removeprefix('torch.')}" if declared.dtypes else ""
    # A library's contract refutation never excuses silent garbage; published code is judged as it is.
    excused = NoClearError if claim == CONTRACT and not declared.garbage else ClaimViolation
    return [group, pytest.mark.xfail(strict=True, raises=excused,
                                     reason=f"{claim} refuted{where} as declared: {declared.reason}")]


def pytest_generate_tests(metafunc):
    state = metafunc.config.stash[_STATE]
    found = claim_of(metafunc.definition)
    if "record" in metafunc.fixturenames and found is not None:
        names = "record,dtype" if "dtype" in metafunc.fixturenames else "record"
        metafunc.parametrize(names, _spec_params(metafunc, state, *found))
    if "perf_record" in metafunc.fixturenames:
        metafunc.parametrize("perf_record", state.records, ids=[r.name for r in state.records])
    if "perf_device" in metafunc.fixturenames:
        metafunc.parametrize("perf_device", state.perf.devices)


@pytest.fixture(scope="session")
def device(request) -> str:
    """The device the specs run on (``--device``)."""
    return request.config.stash[_STATE].settings.device


@pytest.fixture(scope="session")
def perf_session(request) -> PerfSession:
    """The benchmarks' shared state: devices, profile directory, rows and notes for the summary."""
    return request.config.stash[_STATE].perf


_JUDGED = pytest.StashKey[tuple]()
_RUNNING = pytest.StashKey[RunningSpec]()
#: Fixtures a standalone reproducer can pass as values.
_VALUE_FIXTURES = ("record", "dtype", "device")


def _judged(item) -> tuple[str, EncoderRecord] | None:
    """(claim, record) when ``item`` is a spec run on an encoder record; None otherwise.
    Worked out once, at collection."""
    if _JUDGED not in item.stash:
        item.stash[_JUDGED] = _find_judged(item)
    return item.stash[_JUDGED]


def _find_judged(item) -> tuple[str, EncoderRecord] | None:
    callspec = getattr(item, "callspec", None)
    found = claim_of(item)
    if found is None or callspec is None or "record" not in callspec.params:
        return None
    return found[0], callspec.params["record"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Before ``-k``/``-m`` deselect anything: which specs each cell has."""
    expected: dict[tuple[str, str], set[str]] = {}
    for item in items:
        judged = _judged(item)
        if judged is not None:
            item.stash[_SPEC_ID] = item.nodeid
            expected.setdefault((judged[0], judged[1].name), set()).add(item.nodeid)
    config.stash[_STATE].expected = expected


# ---------------------------------------------------------------- running a spec

@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's settings (``--timeout``, the ini value, ``@pytest.mark.timeout``) with a
    timer of the harness's own for the signal method: it raises :class:`SpecTimeout`, which
    Hypothesis does not catch, where pytest-timeout's ``Failed`` would be retried and shrunk."""
    item.stash[_TIMEOUT] = settings.timeout
    if settings.method != "signal" or not hasattr(signal, "SIGALRM"):
        return None  # pytest-timeout's own timer

    def expire(signum, frame):
        raise SpecTimeout(f"timeout: no result after {settings.timeout:g} s")

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_cancel_timer(item):
    if _TIMEOUT not in item.stash or not hasattr(signal, "SIGALRM") or \
            signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None):
        return None
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    return True


def _block_if_unjudgeable(item, state: HarnessState, claim: str, record: EncoderRecord) -> None:
    if record.name in state.timed_out:
        raise Blocked(f"blocked: {record.name} timed out in {state.timed_out[record.name]}; "
                      "its remaining specs are not run")
    if claim != CONTRACT:
        callspec = item.callspec.params
        problem = contract_problem(record, callspec.get("dtype"), state.settings.device)
        if problem:
            raise Blocked(f"blocked by the contract: {problem}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    judged = _judged(item)
    if judged is None:
        return (yield)
    claim, record = judged
    state = item.config.stash[_STATE]
    spec = RunningSpec(claim, item.originalname, item.stash.get(_SPEC_ID, item.nodeid), str(item.path), record,
                       tuple(item.fixturenames))
    item.stash[_RUNNING] = spec
    before = isolation.capture()
    try:
        _block_if_unjudgeable(item, state, claim, record)  # the contract probe runs the encoder too
        with running(spec):
            result = yield
    except BaseException as error:
        changed = isolation.restore(before)
        if changed and not isinstance(error, (KeyboardInterrupt, SpecTimeout, pytest.skip.Exception)):
            raise isolation.GlobalStateLeak(_leak_message(record, changed)) from error
        raise
    changed = isolation.restore(before)
    if changed:
        raise isolation.GlobalStateLeak(_leak_message(record, changed))
    return result


def _leak_message(record: EncoderRecord, changed: list[str]) -> str:
    return f"{record.name} left torch's global state changed: {'; '.join(changed)} (restored for the next spec)"


# ---------------------------------------------------------------- outcomes

def _state_of(report, call, timeout: float | None) -> str | None:
    """The matrix state of one spec run, from pytest's report outcome."""
    if report.skipped:
        if hasattr(report, "wasxfail"):
            return "refuted"
        if call.excinfo is not None and call.excinfo.errisinstance(Blocked):
            return "blocked"
        if call.excinfo is not None and call.excinfo.errisinstance(Excluded):
            return "excluded"
        return "undecided" if call.excinfo is not None and call.excinfo.errisinstance(Undecided) else None
    if report.passed:
        return "unexpectedly holds" if hasattr(report, "wasxfail") else "holds"
    if call.excinfo is None:  # failed without an exception: a strict expected failure passed
        return "unexpectedly holds"
    if call.excinfo.errisinstance(SpecTimeout):
        return "timed out"
    if call.excinfo.errisinstance(ClaimViolation):
        return "unexpectedly failing"
    if timeout and call.duration >= timeout:  # pytest-timeout's thread method
        return "timed out"
    return "crashed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    judged = _judged(item)
    if judged is None or (call.when != "call" and not report.failed):
        return report
    timeout = item.stash.get(_TIMEOUT, None)
    state = _state_of(report, call, timeout)
    if state is None:
        return report
    claim, record = judged
    message, command, script = "", "", ""
    if state == "timed out":
        message = f"timeout: no result after {timeout:g} s"
        item.config.stash[_STATE].timed_out.setdefault(record.name, item.originalname)
    elif state == "unexpectedly holds":
        message = f"declared refuted ({record.declared(claim).reason}), but the spec found no violation"
    elif call.excinfo is not None:
        message = first_line(str(call.excinfo.value)) or call.excinfo.typename
        if state == "crashed":
            message = f"{call.excinfo.typename}: {message}"
        if state in ("crashed", "unexpectedly failing") and _RUNNING in item.stash:
            command, script = _reproducers(item, call.excinfo)
            if item.config.option.tbstyle == "auto":  # --tb=long and the others keep pytest's traceback
                report.longrepr = _short_failure(state, call.excinfo, command)
    outcome = Outcome(claim, record.name, item.originalname, item.stash.get(_SPEC_ID, item.nodeid), state, message,
                      command, script)
    report.user_properties.append((_OUTCOME, asdict(outcome)))
    return report


def _reproducers(item, excinfo) -> tuple[str, str]:
    """The pytest command and the standalone script that reproduce a failure or a crash."""
    spec = item.stash[_RUNNING]
    drawn = getattr(excinfo.value, "drawn", None)
    if drawn is None:
        drawn = drawn_from_traceback(spec, excinfo.tb)
    command = reproducer(spec, drawn)
    arguments = [name for name in inspect.signature(item.obj).parameters if name in item.funcargs]
    if any(name not in _VALUE_FIXTURES for name in arguments):
        return command, ""  # a spec with other fixtures (measurements) is rerun through pytest
    fixtures = {name: item.funcargs[name] for name in arguments}
    return command, python_reproducer(spec, fixtures, drawn)


def _short_failure(state: str, excinfo, command: str) -> str:
    """What pytest prints for a judged failure: the violation and its reproducer, or the crash's
    message, where it was raised and its reproducer; ``--tb=long`` shows the whole traceback."""
    if state == "unexpectedly failing":
        return str(excinfo.value)
    entry = excinfo.traceback[-1]
    lines = str(excinfo.value).strip().splitlines() or [""]
    shown = [f"CRASH {excinfo.typename}: {shorten(lines[0], 300)}", *(f"  {shorten(line, 300)}" for line in lines[1:4])]
    return "\n".join([*shown, f"  raised at {entry.path}:{entry.lineno + 1}", f"  reproducer: {command}",
                      "  (--tb=long shows the traceback)"])


class OutcomeCollector:
    """Collects outcomes from the reports this process logs: its own, or pytest-xdist's workers'."""

    def __init__(self, state: HarnessState):
        self.state = state

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == _OUTCOME:
                self.state.outcomes.append(Outcome(**value))


# ---------------------------------------------------------------- reports

@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    info = machine.machine_info()
    machine_info["torch"] = info["torch"]
    machine_info["cuda"] = info["cuda"]
    machine_info["gpu"] = ", ".join(info["gpus"]) or "none"
    machine_info["posenc"] = info


def _status(session, exitstatus) -> str:
    if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop:
        return "interrupted"
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        return "complete"
    return "failed"


DEFAULT_MARKERS = "not perf and not slow"


def _selection(config, state: HarnessState) -> str:
    """``full``, or ``partial selection (why)``: -k, a -m other than the default, --encoders,
    or test files and node ids narrower than the spec folder."""
    why = []
    if config.option.keyword:
        why.append(f"-k {config.option.keyword!r}")
    if (config.option.markexpr or DEFAULT_MARKERS) != DEFAULT_MARKERS:
        why.append(f"-m {config.option.markexpr!r}")
    if state.settings.encoders:
        why.append("--encoders")
    if any("::" in arg or arg.endswith(".py") for arg in config.args):
        why.append("test files or node ids")
    return "full" if not why else f"partial selection ({', '.join(why)})"


def _header(config, state: HarnessState, exitstatus) -> dict:
    from hypothesis import settings as hypothesis_settings

    settings = state.settings
    seed = config.getoption("hypothesis_seed", default=None)
    return {
        "status": state.status,
        "selection": _selection(config, state),
        "run_id": state.run_id,
        "started": state.started,
        "finished": reports.now(),
        "exit_status": int(exitstatus),
        "command": ["pytest", *config.invocation_params.args],
        "keyword_expression": config.option.keyword or None,
        "marker_expression": config.option.markexpr or None,
        "encoders": [r.name for r in state.records],
        "plugins": list(settings.plugins),
        "device": f"{settings.device} ({machine.device_name(settings.device)})",
        "torch": torch.__version__,
        "libraries": _library_versions(),
        "python": sys.version.split()[0],
        "hypothesis_profile": settings.hypothesis_profile,
        "hypothesis_seed": seed if seed is not None else (
            "derandomized" if hypothesis_settings.default.derandomize else "random per test"),
        "concurrent_runs": state.active.others if state.active else [],
        "outcomes": len(state.outcomes),
    }


def _library_versions() -> dict[str, str]:
    """Versions of the libraries whose adapters are loaded (``--plugin posenc.ecosystem``)."""
    ecosystem = sys.modules.get("posenc.ecosystem")
    return ecosystem.library_versions() if ecosystem is not None else {}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    parallel.mark_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    state = node.config.stash[_STATE]
    state.expected = parallel.expected_from_node(node, state.expected)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _is_worker(config):
        parallel.expected_to_workeroutput(config, state.expected)
        return
    state.status = _status(session, exitstatus)
    if state.active:
        state.active.end()
    _compare_benchmarks(session, state)
    if not state.outcomes:
        return
    matrix = build_matrix(state.records, state.outcomes, state.expected, complete=state.status == "complete")
    cell_roles = roles(state.records)
    payload = {"header": _header(config, state, exitstatus), "matrix": matrix, "roles": cell_roles,
               "outcomes": [asdict(o) for o in state.outcomes]}
    state.written = reports.write(state.settings.matrix_dir, state.run_id, payload,
                                  render_markdown(matrix, cell_roles))


def _compare_benchmarks(session, state: HarnessState) -> None:
    """``--perf-compare``: this run's benchmarks against a saved run; a regression fails the run."""
    settings, perf = state.settings, state.perf
    if settings.perf_compare is None or state.status != "complete":
        return
    current = history.run_in_progress(perf.benchmarks)
    saved = history.read_run(settings.perf_compare)
    perf.regressions = history.regressions(saved, current, list(settings.perf_gates))
    compared = len(set(saved.rows) & set(current.rows))
    perf.notes.append(f"compared {compared} benchmarks with saved run {saved.number} ({settings.perf_compare.name}), "
                      f"gate {','.join(map(str, settings.perf_gates))}: {len(perf.regressions)} regression(s)")
    if not compared:
        perf.regressions.append(f"REGRESSION check impossible: no benchmark of this run is in saved run {saved.number}")
    if perf.regressions and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    """The verdict matrix, then posenc's performance tables: printed after pytest-benchmark's."""
    state = config.stash.get(_STATE, None)
    if state is None or _is_worker(config):
        return
    if state.written is not None:
        matrix = build_matrix(state.records, state.outcomes, state.expected, complete=state.status == "complete")
        judged = {o.claim for o in state.outcomes}
        shown = {claim: row for claim, row in matrix.items() if claim in judged}
        terminalreporter.section(f"verdict matrix (claims × encoders), run {state.status}")
        terminalreporter.write_line(render_text(shown, roles(state.records)))
        if len(shown) < len(matrix):
            terminalreporter.write_line(f"({len(matrix) - len(shown)} rows with no spec run are left out here; "
                                        f"every row is in {state.written.run_markdown})")
        written = state.written
        terminalreporter.write_line(f"written: {written.run_json}, {written.run_markdown}")
        terminalreporter.write_line(f"         {written.note}")
        for line in surprise_lines(state.outcomes):
            terminalreporter.write_line(line)
    perf_report.report(terminalreporter, state.perf)
