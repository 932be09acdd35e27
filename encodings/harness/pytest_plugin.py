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

One parametrization serves every spec. A spec is a test marked
``@pytest.mark.claim("ID", kinds=(...))`` that takes a ``record`` argument (and optionally
``dtype`` and ``device``); it is generated for every selected encoder to which the claim
applies. A declared refutation becomes a strict expected failure that accepts only
:class:`ClaimViolation`. A benchmark takes ``perf_record`` and ``perf_device`` instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from . import machine, perf_report, registry
from .claims import CLAIMS, CONTRACT, ClaimViolation
from .matrix import Outcome, build_matrix, render_text, write
from .records import EncoderRecord
from .running import RunningSpec, running


@dataclass
class PerfSession:
    """What the benchmarks share: where they run and write, and what the summary prints."""

    records: list[EncoderRecord]
    device: str  # the specs' device (--device)
    devices: list[str]  # the benchmarks' devices (--perf-devices)
    run_dir: Path | None  # set by --profile
    benchmarks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@dataclass
class HarnessState:
    records: list[EncoderRecord]
    plugins: list[str]
    device: str
    profile: str
    perf: PerfSession
    outcomes: list[Outcome] = field(default_factory=list)


_STATE = pytest.StashKey[HarnessState]()


def pytest_addoption(parser):
    group = parser.getgroup("posenc", "positional-encoding specs and benchmarks")
    env = os.environ.get
    group.addoption("--encoders", default=env("POSENC_ENCODERS", ""),
                    help="comma-separated encoder names to run (default: all registered)")
    group.addoption("--plugin", action="append", default=[], metavar="FILE",
                    help="load a Python file that registers encoders (repeatable)")
    group.addoption("--device", default=env("POSENC_DEVICE", "cpu"), choices=("cpu", "cuda"),
                    help="device the specs run on")
    group.addoption("--perf-devices", default=env("POSENC_PERF_DEVICES", "auto"),
                    help="comma-separated devices for the benchmarks: cpu, cuda, or auto")
    group.addoption("--perf-threads", type=int, default=int(env("POSENC_PERF_THREADS", "0")),
                    help="torch.set_num_threads for the session (0: torch's default)")
    group.addoption("--profile", action="store_true", default=False,
                    help="write torch.profiler traces and TensorBoard summaries for the perf specs")
    group.addoption("--profile-dir", default="profiles", help="root of the profile log directory")
    group.addoption("--profile-run-id", default="", help="run directory name (default: a timestamp)")
    group.addoption("--matrix-dir", default=env("POSENC_MATRIX_DIR", "reports"),
                    help="directory for verdicts.json and verdicts.md")


def _hypothesis_profile(config) -> str:
    from hypothesis import settings

    chosen = config.getoption("hypothesis_profile", default=None)
    if not chosen:
        chosen = os.environ.get("POSENC_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
        settings.load_profile(chosen)
    return chosen


def _select(config) -> tuple[list[EncoderRecord], list[str]]:
    files = list(config.getoption("plugin"))
    files += [p for p in os.environ.get("POSENC_PLUGINS", "").split(os.pathsep) if p]
    for path in files:
        registry.load_plugin(path)
    everything = registry.records()
    wanted = [n.strip() for n in config.getoption("encoders").split(",") if n.strip()]
    unknown = [n for n in wanted if n not in {r.name for r in everything}]
    if unknown:
        raise pytest.UsageError(
            f"--encoders: unknown encoder(s) {', '.join(unknown)}; registered: {', '.join(r.name for r in everything)}"
        )
    return [r for r in everything if not wanted or r.name in wanted], files


def _perf_devices(config) -> list[str]:
    wanted = config.getoption("perf_devices")
    if wanted == "auto":
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [d.strip() for d in wanted.split(",") if d.strip()]
    if "cuda" in devices and not torch.cuda.is_available():
        raise pytest.UsageError("--perf-devices cuda: CUDA is not available on this machine")
    return devices


def _profile_run_dir(config) -> Path | None:
    if not config.getoption("profile"):
        return None
    run_id = config.getoption("profile_run_id") or time.strftime("%Y%m%d-%H%M%S")
    return Path(config.getoption("profile_dir")) / run_id


def pytest_configure(config):
    records, plugins = _select(config)
    device = config.getoption("device")
    if device == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: CUDA is not available on this machine")
    if config.getoption("perf_threads"):
        torch.set_num_threads(config.getoption("perf_threads"))
    perf = PerfSession(records, device, _perf_devices(config), _profile_run_dir(config))
    config.stash[_STATE] = HarnessState(records, plugins, device, _hypothesis_profile(config), perf)


def selected_records(config) -> list[EncoderRecord]:
    return config.stash[_STATE].records


def pytest_report_header(config):
    state = config.stash[_STATE]
    return [
        f"posenc: encoders ({len(state.records)}): {', '.join(r.name for r in state.records)}",
        f"posenc: plug-ins: {', '.join(state.plugins) or 'none'}",
        f"posenc: torch {torch.__version__}, device {state.device} ({machine.device_name(state.device)}), "
        f"hypothesis profile {state.profile}",
    ]


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


def _spec_params(metafunc, state: HarnessState, claim: str, options: dict) -> list:
    kinds, requires = options.get("kinds"), options.get("requires")
    takes_dtype = "dtype" in metafunc.fixturenames
    params = []
    for record in state.records:
        if not record.applies(claim) or (kinds and record.kind not in kinds) or (requires and not requires(record)):
            continue
        declared = record.declared(claim)
        marks = []
        if declared.expects_failure(metafunc.function.__name__):
            marks.append(pytest.mark.xfail(strict=True, raises=ClaimViolation,
                                           reason=f"{claim} refuted as declared: {declared.reason}"))
        if not takes_dtype:
            params.append(pytest.param(record, id=record.name, marks=marks))
            continue
        for dtype in (d for d in record.dtypes if d in options.get("dtypes", record.dtypes)):
            params.append(pytest.param(record, dtype, id=f"{record.name}-{str(dtype).removeprefix('torch.')}",
                                       marks=marks))
    return params


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
    return request.config.stash[_STATE].device


@pytest.fixture(scope="session")
def perf_session(request) -> PerfSession:
    """The benchmarks' shared state: devices, profile directory, rows and notes for the summary."""
    return request.config.stash[_STATE].perf


# ---------------------------------------------------------------- running specs and collecting outcomes

def _judged(item) -> tuple[str, EncoderRecord] | None:
    """(claim, record) when ``item`` is a spec run on an encoder record; None otherwise."""
    callspec = getattr(item, "callspec", None)
    found = claim_of(item)
    if found is None or callspec is None or "record" not in callspec.params:
        return None
    return found[0], callspec.params["record"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    judged = _judged(item)
    if judged is None:
        return (yield)
    claim, record = judged
    spec = RunningSpec(claim, item.originalname, item.nodeid, str(item.path), record, tuple(item.fixturenames))
    with running(spec):
        return (yield)


def _first_line(text: str, width: int = 300) -> str:
    line = text.strip().partition("\n")[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def _state_of(report, call) -> str | None:
    """The matrix state of one spec run, from pytest's report outcome."""
    if report.skipped:
        return "refuted" if hasattr(report, "wasxfail") else None
    if report.passed:
        return "unexpectedly holds" if hasattr(report, "wasxfail") else "holds"
    if call.excinfo is None:  # failed without an exception: a strict expected failure passed
        return "unexpectedly holds"
    if call.excinfo.errisinstance(ClaimViolation):
        return "unexpectedly failing"
    return "crashed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    judged = _judged(item)
    if judged is None or (call.when != "call" and not report.failed):
        return report
    state = _state_of(report, call)
    if state is not None:
        message = ""
        if call.excinfo is not None:
            message = _first_line(str(call.excinfo.value)) or call.excinfo.typename
            if state == "crashed":
                message = f"{call.excinfo.typename}: {message}"
        claim, record = judged
        item.config.stash[_STATE].outcomes.append(
            Outcome(claim, record.name, item.originalname, item.nodeid, state, message))
    return report


# ---------------------------------------------------------------- reports

@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    info = machine.machine_info()
    machine_info["torch"] = info["torch"]
    machine_info["cuda"] = info["cuda"]
    machine_info["gpu"] = ", ".join(info["gpus"]) or "none"
    machine_info["posenc"] = info


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    perf_report.report(terminalreporter, state.perf)
    if not state.outcomes:
        return
    matrix = build_matrix(state.records, state.outcomes)
    header = {
        "torch": torch.__version__,
        "device": f"{state.device} ({machine.device_name(state.device)})",
        "hypothesis_profile": state.profile,
        "encoders": [r.name for r in state.records],
        "plugins": state.plugins,
    }
    json_path, md_path = write(Path(config.getoption("matrix_dir")), matrix, state.outcomes, header)
    terminalreporter.section("verdict matrix (claims × encoders)")
    terminalreporter.write_line(render_text(matrix))
    terminalreporter.write_line(f"written: {json_path}, {md_path}")
    surprises = [o for o in state.outcomes if o.state in ("unexpectedly failing", "unexpectedly holds", "crashed")]
    for o in surprises:
        terminalreporter.write_line(f"{o.state}: {o.claim} on {o.encoder} ({o.spec}): {o.message}")
