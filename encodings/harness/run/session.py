"""What one run holds from configuration to its reports, and the header that describes it.

:class:`HarnessState` is created once per process (``pytest_configure``): the settings, the
selected records, what identify measured, the matrix being filled, the benchmarks' shared
:class:`PerfSession`. :func:`header` is the run's description in ``verdicts.json``.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from ..performance import machine

from . import options

from ..verdicts import reports
from ..verdicts.matrix import Matrix, roles
from ..verdicts.width import terminal_width, wrap
from ..catalogue.records import EncoderRecord

#: The default marker expression (pyproject.toml's addopts): a run with it is not a partial selection.
DEFAULT_MARKERS = "not perf and not slow"


@dataclass
class PerfSession:
    """What the benchmarks share: where they run and write, and what the summary prints."""

    records: list[EncoderRecord]
    device: str  # the specs' device (--device)
    devices: tuple[str, ...]  # the benchmarks' devices (--perf-devices)
    run_dir: Path | None  # set by --profile
    compare_with: Path | None = None  # --perf-compare: the saved run this run is gated against
    gates: tuple = ()  # --perf-fail
    benchmarks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)  # time and memory against length, per encoder
    regressions: list[str] = field(default_factory=list)  # against --perf-compare
    length: str = "short"  # --perf-length
    started: float = field(default_factory=time.perf_counter)  # for the run's duration in the summary

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@dataclass
class HarnessState:
    settings: options.Settings
    records: list[EncoderRecord]
    identified: dict[str, str]  # record name -> identify's report (--identify)
    perf: PerfSession
    matrix: Matrix
    run_id: str
    started: str
    active: reports.ActiveRun | None = None
    timed_out: dict[str, str] = field(default_factory=dict)  # encoder -> the spec that hung
    written: reports.Written | None = None
    cells: dict | None = None  # the matrix's states, once the run is judged
    status: str = "interrupted"
    exit_code: int = 0
    report_interrupted: bool = False  # a signal arrived while the report was written: the run exits non-zero
    recovered: list[str] = field(default_factory=list)  # runs that died, whose reports this run wrote
    notes: list[str] = field(default_factory=list)  # printed after the verdicts: a report not written, …


def interrupt_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C, so the report says "interrupted" instead of vanishing."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    if hasattr(signal, "SIGTERM") and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            pass


def run_status(interrupted: bool, exitstatus: int) -> str:
    if interrupted:
        return "interrupted"
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        return "complete"
    return "failed"


def selection(config, state: HarnessState) -> str:
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


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose adapters are loaded (``--plugin posenc.ecosystem``)."""
    ecosystem = sys.modules.get("posenc.ecosystem")
    return ecosystem.library_versions() if ecosystem is not None else {}


def header(config, state: HarnessState, exitstatus) -> dict:
    from hypothesis import settings as hypothesis_settings

    settings = state.settings
    seed = config.getoption("hypothesis_seed", default=None)
    return {
        "status": state.status,
        "selection": selection(config, state),
        "run_id": state.run_id,
        "started": state.started,
        "finished": reports.now() if exitstatus is not None else None,
        "exit_status": int(exitstatus) if exitstatus is not None else None,
        "command": ["pytest", *config.invocation_params.args],
        "keyword_expression": config.option.keyword or None,
        "marker_expression": config.option.markexpr or None,
        "encoders": [r.name for r in state.records],
        "plugins": list(settings.plugins),
        "device": f"{settings.device} ({machine.device_name(settings.device)})",
        "torch": torch.__version__,
        "libraries": library_versions(),
        "python": sys.version.split()[0],
        "hypothesis_profile": settings.hypothesis_profile,
        "hypothesis_seed": seed if seed is not None else (
            "derandomized" if hypothesis_settings.default.derandomize else "random per test"),
        "concurrent_runs": sorted({*state.active.others, *state.active.joined}) if state.active else [],
        "outcomes": len(state.matrix.outcomes),
    }


def journal_begin(config, state: HarnessState) -> dict:
    """What the journal's first line says of the run (:mod:`..verdicts.journal`)."""
    return dict(header={**header(config, state, None), "status": "running"}, records=state.records,
                roles=roles(state.records), kinds={r.name: r.group for r in state.records})


def header_lines(state: HarnessState) -> list[str]:
    """What pytest prints above the run: encoders, plug-ins, torch and device, identify's reports."""
    settings = state.settings
    lines = [
        f"posenc: encoders ({len(state.records)}): {', '.join(r.name for r in state.records)}",
        f"posenc: plug-ins: {', '.join(settings.plugins) or 'none'}",
        f"posenc: torch {torch.__version__}, device {settings.device} ({machine.device_name(settings.device)}), "
        f"hypothesis profile {settings.hypothesis_profile}",
        f"posenc: run {state.run_id}, reports in {settings.matrix_dir}",
    ]
    for name, report in state.identified.items():
        lines.append(f"posenc: {name}, as identified from its outputs:")
        lines += [f"posenc:   {line}" for line in report.splitlines()]
    libraries = library_versions()
    if libraries:
        lines.append("posenc: libraries: " + ", ".join(f"{name} {v}" for name, v in libraries.items()))
    return lines


def announce(config, state: HarnessState) -> None:
    """A run that will judge specs marks itself active in the report directory (``.active``), and
    prints, even under ``-q``, the runs already writing there and the runs that died and were recovered."""
    if state.active is None:
        try:
            state.active = reports.ActiveRun.begin(state.settings.matrix_dir, state.run_id)
            state.recovered += state.active.notes
        except OSError as error:
            state.recovered.append(f"WARNING cannot mark this run active in {state.settings.matrix_dir}: "
                                   f"{error.strerror or error}")
        unjournaled = journal_unwritable(state)
        if unjournaled:
            state.recovered.append(unjournaled)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = [concurrency_warning(state), *(f"posenc: {r}" for r in state.recovered)]
    for line in filter(None, lines) if reporter is not None else ():
        for part in wrap(line, terminal_width()):
            reporter.write_line(part, yellow=True)


def journal_unwritable(state: HarnessState) -> str | None:
    """Why this run could keep no journal (``runs/`` not writable), said at start-up; else None."""
    runs = state.settings.matrix_dir / "runs"
    probe = runs / f".journal-probe-{state.run_id}"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        return (f"WARNING no journal can be kept in {runs} ({error.strerror or error}): a crash of this run would "
                "lose its outcomes, and a report it cannot write is lost")
    return None


def concurrency_warning(state: HarnessState) -> str | None:
    if state.active and state.active.others:
        return (f"posenc: WARNING another run is writing to {state.settings.matrix_dir} "
                f"({', '.join(state.active.others)}): each keeps its own report under runs/")
    return None


def joined_warning(state: HarnessState) -> str | None:
    """The first of two concurrent runs learns of the second at its end (if it judged a spec)."""
    if state.active and state.active.joined and state.matrix.outcomes:
        return (f"posenc: WARNING another run began writing to {state.settings.matrix_dir} while this one ran "
                f"({', '.join(state.active.joined)}): each keeps its own report under runs/")
    return None
