"""What the project's tests that start spec runs of their own share."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A spec run in two processes where there are two CPUs and these tests run serially (-n gives the
#: serial run's matrix, tests/test_parallel.py); under ``pytest tests -n N`` the tests' own workers
#: fill the cores, and each spec run is serial. Read at collection, before the session fixture of
#: tests/conftest.py hides the worker's variables from the spec runs.
WORKERS = ["-n", "2"] if (os.cpu_count() or 1) >= 2 and "PYTEST_XDIST_WORKER" not in os.environ else []


def interruptible() -> None:
    """In the child (``preexec_fn``): SIGINT raises KeyboardInterrupt, even where these tests were
    started with SIGINT ignored (a shell's background job), which Python would otherwise pass on
    to its children."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def needs(library: str) -> None:
    """Skip, with the install hint, where ``library`` is not installed."""
    import pytest

    from posenc.ecosystem import support

    if not support.available(library):
        pytest.skip(f"{library} is not installed: {support.INSTALL_HINT}")


def ecosystem_run(out: Path, encoders: str) -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest specs --plugin posenc.ecosystem --encoders ENCODERS`` in a subprocess, no harness variable
    of this environment passed on (skipped without transformers): its ``verdicts.json`` and the completed process."""
    needs("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", *WORKERS,
               "--plugin", "posenc.ecosystem", "--encoders", encoders, "--matrix-dir", str(out)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert (out / "verdicts.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text()), result
