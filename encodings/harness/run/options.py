"""The harness's options and ``POSENC_*`` variables, each checked before collection.

Every bad value stops the run with one line naming the option or variable and what is allowed
(pytest's usage error, exit code 4), never a traceback halfway through a run.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from ..performance import history
from ..verdicts.width import terminal_width

DEVICES = ("cpu", "cuda")
#: --perf-threads beyond this many per core is refused (torch crashes sizing its pools at 100000).
MAX_THREADS_PER_CORE = 8
#: Every variable the harness reads; any other ``POSENC_*`` variable is a typo.
VARIABLES = {
    "POSENC_ENCODERS": "--encoders",
    "POSENC_PLUGINS": "--plugin",
    "POSENC_DEVICE": "--device",
    "POSENC_PERF_DEVICES": "--perf-devices",
    "POSENC_PERF_THREADS": "--perf-threads",
    "POSENC_PERF_LENGTH": "--perf-length",
    "POSENC_MATRIX_DIR": "--matrix-dir",
    "POSENC_MATRIX": "--matrix",
    "POSENC_HYPOTHESIS_PROFILE": "--hypothesis-profile",
    "POSENC_FUSED_STRICT": "compile failures of rope_compiled and rope_inplace raise (1, true, yes, on) or fall "
                           "back to eager (0, false, no, off)",
    "POSENC_KERNEL_CACHE": "where rope_inplace's C kernel is built (default ~/.cache/posenc/kernels)",
    "POSENC_EXPERIMENT": "quick: -m slow runs the length experiment at its CI size (one seed, L = 16, a few "
                         "steps: decides nothing); small: half the steps and evaluation, the same verdicts; "
                         "FILE.json: judges a kept run's results.json without training",
}


def addoptions(parser) -> None:
    group = parser.getgroup("posenc", "positional-encoding specs and benchmarks")
    group.addoption("--encoders", default=None, help="comma-separated encoder names or glob patterns to run, e.g. 'rope_*' (default: all registered)")
    group.addoption("--identify", metavar="FILE.py:NAME", default=None,
                    help="identify a RoPE (a class, module or function) and run every spec against what it computes")
    group.addoption("--identify-protocol", default="single", choices=("single", "pair", "cos_sin"),
                    help="how --identify's target is called")
    group.addoption("--identify-apply", metavar="NAME", default=None,
                    help="apply(q, k, cos, sin) in the same file, for --identify-protocol cos_sin")
    group.addoption("--identify-expect", metavar="FAMILY[:key=value,...]", default=None,
                    help="judge --identify's target against the geometry its library documents "
                         "(python -m posenc identify --help), not the measured one")
    group.addoption("--model", metavar="FILE.py:NAME", default=None,
                    help="run every model relation (MODEL-*) against a causal LM: a class, a factory or an instance "
                         "(transformers' models, input_pos models, or logits, cache = model(ids, position_ids, "
                         "attention_mask, cache))")
    group.addoption("--plugin", action="append", default=[], metavar="FILE",
                    help="load a Python file that registers encoders (repeatable)")
    group.addoption("--device", default=None, help="device the specs run on: cpu or cuda")
    group.addoption("--perf-devices", default=None,
                    help="comma-separated devices for the benchmarks: cpu, cuda, or auto (the default)")
    group.addoption("--perf-threads", default=None,
                    help="torch.set_num_threads for the session (0: torch's default)")
    group.addoption("--perf-length", default=None,
                    help="short (the default): each benchmark's rounds, the warm-up, the scaling table, "
                         "ROPE-12, LIN-1 and PERF-1 bounded (profiling.PERF_LENGTHS); full: pytest-benchmark's own length "
                         "(docs/findings/performance.md states how the ratios of the two agree)")
    group.addoption("--profile", action="store_true", default=False,
                    help="write torch.profiler traces and TensorBoard summaries for the perf specs")
    group.addoption("--profile-dir", default="profiles", help="root of the profile log directory")
    group.addoption("--profile-run-id", default="", help="run directory name (default: a timestamp)")
    group.addoption("--matrix-dir", default=None,
                    help="directory for verdicts.json and verdicts.md (default: reports)")
    group.addoption("--matrix", default=None, dest="matrix_mode", choices=("grid", "summary", "none"),
                    help="what the run prints at its end: grid (counts, surprises and the matrix; the default), "
                         "summary (counts and surprises) or none (where the reports are)")
    group.addoption("--perf-compare", default=None, metavar="RUN",
                    help="compare this run's benchmarks with a saved run (number, file, or 'latest') and "
                         "fail on regressions beyond --perf-fail")
    group.addoption("--perf-fail", default=None, metavar="GATE",
                    help="with --perf-compare: how much worse each metric may get, e.g. peak:5%%,kernels:0,"
                         "peak:40MiB,best:2ms; amounts take their unit (s, ms, us, ns; B, KiB, MiB, GiB) or %% "
                         "(default: posenc.harness.performance.history.DEFAULT_GATE)")


@dataclass(frozen=True)
class Settings:
    encoders: tuple[str, ...]
    plugins: tuple[str, ...]
    device: str
    perf_devices: tuple[str, ...]
    perf_threads: int
    profile_run_dir: Path | None
    matrix_dir: Path
    hypothesis_profile: str
    perf_compare: Path | None = None  # the saved run to compare with
    perf_gates: tuple = ()
    identify: tuple[str, str, str | None, str | None] | None = None  # (FILE.py:NAME, protocol, apply, expect)
    model: str | None = None  # --model FILE.py:NAME
    matrix_mode: str = "grid"  # --matrix
    perf_length: str = "short"  # --perf-length


def _value(config, option: str, variable: str | None, default: str) -> tuple[str, str]:
    """The value and where it came from: the option, else the variable, else the default."""
    given = config.getoption(option)
    if given is not None:
        return given, "--" + option.replace("_", "-")
    if variable and variable in os.environ:
        return os.environ[variable], variable
    return default, "--" + option.replace("_", "-")


def usage_error(message: str) -> pytest.UsageError:
    """pytest's usage error, its message wrapped to the terminal after pytest's ``ERROR: ``, a path
    kept whole."""
    lines = textwrap.wrap(message, terminal_width() - len("ERROR: "), subsequent_indent="    ",
                          break_long_words=False, break_on_hyphens=False)
    return pytest.UsageError("\n".join(lines))


def _fail(message: str):
    raise usage_error(message)


def _device(config) -> str:
    device, source = _value(config, "device", "POSENC_DEVICE", "cpu")
    if device not in DEVICES:
        _fail(f"{source}: unknown device {device!r}; allowed: {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        _fail(f"{source} cuda: CUDA is not available on this machine")
    return device


def _perf_devices(config) -> tuple[str, ...]:
    wanted, source = _value(config, "perf_devices", "POSENC_PERF_DEVICES", "auto")
    if wanted.strip() == "auto":
        return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
    devices = tuple(d.strip() for d in wanted.split(",") if d.strip())
    unknown = [d for d in devices if d not in DEVICES]
    if not devices or unknown:
        _fail(f"{source}: {wanted!r} is not a list of devices; allowed: auto, or a comma-separated "
              f"list of {', '.join(DEVICES)}")
    if "cuda" in devices and not torch.cuda.is_available():
        _fail(f"{source} cuda: CUDA is not available on this machine")
    return devices


def _perf_threads(config) -> int:
    text, source = _value(config, "perf_threads", "POSENC_PERF_THREADS", "0")
    try:
        threads = int(text)
    except ValueError:
        threads = -1
    if threads < 0:
        _fail(f"{source}: {text!r} is not a thread count; allowed: an integer ≥ 0 (0: torch's default)")
    most = MAX_THREADS_PER_CORE * (os.cpu_count() or 1)
    if threads > most:
        _fail(f"{source}: {threads} threads exceeds the limit of {most} ({MAX_THREADS_PER_CORE} per core on "
              f"{os.cpu_count() or 1} cores): torch's thread pools cannot be sized so")
    return threads


def _perf_length(config) -> str:
    from ..performance.profiling import PERF_LENGTHS

    length, source = _value(config, "perf_length", "POSENC_PERF_LENGTH", "short")
    if length not in PERF_LENGTHS:
        _fail(f"{source}: unknown length {length!r}; allowed: {', '.join(PERF_LENGTHS)}")
    return length


def require_writable(directory: Path, source: str) -> None:
    """Create ``directory`` and write a file in it now, so the run is not lost at the end."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-") as check:
            check.write(b"\0" * 65536)  # a full disk refuses data, not always an empty file
            check.flush()
            os.fsync(check.fileno())
    except OSError as error:
        _fail(f"{source}: cannot write reports to {str(directory)!r}: {error.strerror or error}")


def _matrix_dir(config) -> Path:
    text, source = _value(config, "matrix_dir", "POSENC_MATRIX_DIR", "reports")
    if not text.strip():
        _fail(f"{source}: empty; give a directory for verdicts.json and verdicts.md")
    directory = Path(text)
    require_writable(directory, source)
    return directory


def _profile_run_dir(config) -> Path | None:
    if not config.getoption("profile"):
        return None
    root = Path(config.getoption("profile_dir"))
    require_writable(root, "--profile-dir")
    return root / (config.getoption("profile_run_id") or time.strftime("%Y%m%d-%H%M%S"))


def hypothesis_profile(config) -> str:
    """The Hypothesis profile: ``--hypothesis-profile``, else ``POSENC_HYPOTHESIS_PROFILE``, else
    ``ci`` when ``CI`` is set and ``dev`` otherwise; an unknown name is a usage error."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    chosen = config.getoption("hypothesis_profile", default=None)
    source = "--hypothesis-profile"
    if not chosen:
        chosen = os.environ.get("POSENC_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
        source = "POSENC_HYPOTHESIS_PROFILE"
    try:
        settings.get_profile(chosen)
    except InvalidArgument:
        known = sorted(settings._profiles)  # Hypothesis offers no public list of profiles
        _fail(f"{source}: unknown Hypothesis profile {chosen!r}; registered: {', '.join(known)}")
    return chosen


def _fused_strict() -> None:
    value = os.environ.get("POSENC_FUSED_STRICT")
    if value is not None and value.strip().lower() not in ("", "1", "true", "yes", "on", "0", "false", "no", "off"):
        _fail(f"POSENC_FUSED_STRICT: {value!r}; allowed: 1, true, yes, on (raise) or 0, false, no, off (fall back)")


def _experiment() -> None:
    """``POSENC_EXPERIMENT`` checked at start-up, not when the slow specs first run the experiment."""
    value = os.environ.get("POSENC_EXPERIMENT", "")
    if value.endswith(".json"):
        if not Path(value).is_file():
            _fail(f"POSENC_EXPERIMENT: no such results file {value!r}; give a kept run's results.json")
    elif value not in ("", "quick", "small"):
        _fail(f"POSENC_EXPERIMENT: {value!r}; allowed: quick (the CI-sized run), small (half the training, the same "
              "verdicts) or a kept run's FILE.json")


def _no_unknown_variables() -> None:
    unknown = sorted(v for v in os.environ if v.startswith("POSENC_") and v not in VARIABLES)
    if unknown:
        _fail(f"unknown environment variable {unknown[0]}; the harness reads {', '.join(VARIABLES)}")


def _perf_comparison(config) -> tuple[Path | None, tuple]:
    reference = config.getoption("perf_compare")
    gate = config.getoption("perf_fail")
    if reference is None:
        if gate is not None:
            _fail("--perf-fail needs --perf-compare RUN: the saved run to compare with")
        return None, ()
    try:
        gates = tuple(history.parse_gate(gate or history.DEFAULT_GATE))
    except ValueError as error:
        _fail(f"--perf-fail: {error}")
    storage = str(config.getoption("benchmark_storage", default="file://./.benchmarks"))
    if "://" in storage and not storage.startswith("file://"):
        _fail(f"--perf-compare reads file storage only, got --benchmark-storage {storage}")
    try:
        saved = history.find_run(Path(storage.removeprefix("file://")), reference)
        history.read_run(saved)  # a saved run that cannot be compared stops the run now, not after the benchmarks
        return saved, gates
    except LookupError as error:
        _fail(f"--perf-compare: {error}")
    except history.RunFileError as error:
        _fail(f"--perf-compare {reference}: {error}")


def _identify(config):
    target = config.getoption("identify")
    if target is None:
        return None
    path, _, name = target.rpartition(":")
    if not path.endswith(".py") or not name.isidentifier() or not Path(path).is_file():
        _fail(f"--identify takes FILE.py:NAME of an existing file, got {target!r}")
    protocol, apply = config.getoption("identify_protocol"), config.getoption("identify_apply")
    if (protocol == "cos_sin") != (apply is not None):
        _fail("--identify-apply NAME goes with --identify-protocol cos_sin, and only with it")
    expect = config.getoption("identify_expect")
    if expect:
        from ..identify.identification import parse_expected

        try:
            parse_expected(expect)
        except ValueError as error:
            _fail(str(error).replace("--expect", "--identify-expect"))
    return target, protocol, apply, expect


def _model(config) -> str | None:
    target = config.getoption("model")
    if target is not None:
        path, _, name = target.rpartition(":")
        if not path.endswith(".py") or not name.isidentifier() or not Path(path).is_file():
            _fail(f"--model takes FILE.py:NAME of an existing file, got {target!r}")
    return target


def _matrix_mode(config) -> str:
    mode, source = _value(config, "matrix_mode", "POSENC_MATRIX", "grid")
    if mode not in ("grid", "summary", "none"):
        _fail(f"{source}: {mode!r}; allowed: grid, summary, none")
    return mode


def read(config) -> Settings:
    """Every option and variable, validated; raises ``pytest.UsageError`` on the first bad one."""
    _no_unknown_variables()
    _fused_strict()
    _experiment()
    encoders, source = _value(config, "encoders", "POSENC_ENCODERS", None)
    if encoders is not None and not any(n.strip() for n in encoders.split(",")):
        _fail(f"{source} {encoders!r} names no encoder: give names or globs ('rope_*'), or leave it out to run "
              "every registered encoder")
    encoders = encoders or ""
    plugins = list(config.getoption("plugin"))
    plugins += [p for p in os.environ.get("POSENC_PLUGINS", "").split(os.pathsep) if p]
    return Settings(
        encoders=tuple(n.strip() for n in encoders.split(",") if n.strip()),
        plugins=tuple(plugins),
        device=_device(config),
        perf_devices=_perf_devices(config),
        perf_threads=_perf_threads(config),
        profile_run_dir=_profile_run_dir(config),
        matrix_dir=_matrix_dir(config),
        hypothesis_profile=hypothesis_profile(config),
        identify=_identify(config),
        model=_model(config),
        matrix_mode=_matrix_mode(config),
        perf_length=_perf_length(config),
        **dict(zip(("perf_compare", "perf_gates"), _perf_comparison(config))),
    )
