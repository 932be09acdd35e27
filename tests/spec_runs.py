"""What the project's tests that start spec runs of their own share."""

import os
import signal

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
