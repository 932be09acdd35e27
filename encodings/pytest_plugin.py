"""pytest plug-in: encoder selection, plug-in loading, parametrization, verdict matrix.

Enabled by the repository's ``conftest.py``. Options (and environment variables):

* ``--encoders a,b`` (``POSENC_ENCODERS``): run the specs on these encoders only;
* ``--plugin FILE`` (``POSENC_PLUGINS``, paths joined by ``os.pathsep``): load a
  user file that registers encoders;
* ``--device cpu|cuda`` (``POSENC_DEVICE``): where the specs run;
* ``--matrix-dir DIR`` (``POSENC_MATRIX_DIR``): where ``verdicts.json`` and
  ``verdicts.md`` are written (default ``reports/``);
* ``--hypothesis-profile`` (``POSENC_HYPOTHESIS_PROFILE``): dev | ci | thorough.

A spec is a test marked ``@pytest.mark.claim("ID", kinds=(...))`` that takes a
``record`` argument (and optionally ``dtype`` and ``device``); it is generated
for every selected encoder to which the claim applies. A declared refutation
becomes a strict expected failure that accepts only :class:`ClaimViolation`.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest
import torch

from . import registry
from .claims import CLAIMS, CONTRACT, ClaimViolation
from .matrix import Outcome, build_matrix, render_text, write

_STATE = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("posenc", "positional-encoding specs")
    group.addoption("--encoders", default=os.environ.get("POSENC_ENCODERS", ""),
                    help="comma-separated encoder names to run (default: all registered)")
    group.addoption("--plugin", action="append", default=[], metavar="FILE",
                    help="load a Python file that registers encoders (repeatable)")
    group.addoption("--device", default=os.environ.get("POSENC_DEVICE", "cpu"), choices=("cpu", "cuda"),
                    help="device the specs run on")
    group.addoption("--matrix-dir", default=os.environ.get("POSENC_MATRIX_DIR", "reports"),
                    help="directory for verdicts.json and verdicts.md")


def _hypothesis_profile(config) -> str:
    from hypothesis import settings

    chosen = config.getoption("hypothesis_profile", default=None)
    if not chosen:
        chosen = os.environ.get("POSENC_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
        settings.load_profile(chosen)
    return chosen


def pytest_configure(config):
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
    selected = [r for r in everything if not wanted or r.name in wanted]
    device = config.getoption("device")
    if device == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: CUDA is not available on this machine")
    config.stash[_STATE] = {
        "records": selected,
        "plugins": files,
        "device": device,
        "profile": _hypothesis_profile(config),
        "outcomes": [],
    }


def selected_records(config) -> list[registry.EncoderRecord]:
    return config.stash[_STATE]["records"]


def _device_name(device: str) -> str:
    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def pytest_report_header(config):
    state = config.stash[_STATE]
    return [
        f"posenc: encoders ({len(state['records'])}): {', '.join(r.name for r in state['records'])}",
        f"posenc: plug-ins: {', '.join(state['plugins']) or 'none'}",
        f"posenc: torch {torch.__version__}, device {_device_name(state['device'])}, "
        f"hypothesis profile {state['profile']}",
    ]


def _claim_marker(definition):
    marker = definition.get_closest_marker("claim")
    if marker is None:
        return None
    claim = marker.args[0]
    if claim not in CLAIMS and claim != CONTRACT:
        raise pytest.UsageError(f"{definition.nodeid}: unknown claim {claim!r}")
    return claim, marker.kwargs


def pytest_generate_tests(metafunc):
    if "record" not in metafunc.fixturenames:
        return
    found = _claim_marker(metafunc.definition)
    if found is None:
        return
    claim, options = found
    kinds = options.get("kinds")
    spec = metafunc.function.__name__
    state = metafunc.config.stash[_STATE]
    params = []
    for record in state["records"]:
        if not record.applies(claim) or (kinds and record.kind not in kinds):
            continue
        if options.get("requires") and not options["requires"](record):
            continue
        declared = record.declared(claim)
        marks = []
        if declared.expects_failure(spec):
            marks.append(pytest.mark.xfail(strict=True, raises=ClaimViolation,
                                           reason=f"{claim} refuted as declared: {declared.reason}"))
        dtypes = [None]
        if "dtype" in metafunc.fixturenames:
            dtypes = [d for d in record.dtypes if d in options.get("dtypes", record.dtypes)]
        for dtype in dtypes:
            values = (record,) if dtype is None else (record, dtype)
            test_id = record.name if dtype is None else f"{record.name}-{str(dtype).removeprefix('torch.')}"
            params.append(pytest.param(*values, id=test_id, marks=marks))
    names = "record" if "dtype" not in metafunc.fixturenames else "record,dtype"
    metafunc.parametrize(names, params)


@pytest.fixture(scope="session")
def device(request) -> str:
    """The device the specs run on (``--device``)."""
    return request.config.stash[_STATE]["device"]


def _state_of(report, call) -> str | None:
    if report.skipped and hasattr(report, "wasxfail"):
        return "refuted"
    if report.skipped:
        return None
    if report.passed:
        return "holds"
    if hasattr(report, "wasxfail") or "XPASS(strict)" in str(report.longrepr):
        return "unexpectedly holds"
    if call.excinfo is not None and call.excinfo.errisinstance(ClaimViolation):
        return "unexpectedly failing"
    return "crashed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    callspec = getattr(item, "callspec", None)
    found = _claim_marker(item) if callspec and "record" in callspec.params else None
    if found is None or (call.when != "call" and not report.failed):
        return report
    state = _state_of(report, call)
    if state is not None:
        message = ""
        if call.excinfo is not None:
            message = str(call.excinfo.value).strip().splitlines()[0][:300] if str(call.excinfo.value).strip() \
                else call.excinfo.typename
            if state == "crashed":
                message = f"{call.excinfo.typename}: {message}"
        item.config.stash[_STATE]["outcomes"].append(
            Outcome(found[0], callspec.params["record"].name, item.originalname, item.nodeid, state, message)
        )
    return report


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(_STATE, None)
    if not state or not state["outcomes"]:
        return
    matrix = build_matrix(state["records"], state["outcomes"])
    header = {
        "torch": torch.__version__,
        "device": _device_name(state["device"]),
        "hypothesis_profile": state["profile"],
        "encoders": [r.name for r in state["records"]],
        "plugins": state["plugins"],
    }
    json_path, md_path = write(Path(config.getoption("matrix_dir")), matrix, state["outcomes"], header)
    terminalreporter.section("verdict matrix (claims × encoders)")
    terminalreporter.write_line(render_text(matrix))
    terminalreporter.write_line(f"written: {json_path}, {md_path}")
    surprises = [o for o in state["outcomes"] if o.state in ("unexpectedly failing", "unexpectedly holds", "crashed")]
    for o in surprises:
        terminalreporter.write_line(f"{o.state}: {o.claim} on {o.encoder} ({o.spec}): {o.message}")
