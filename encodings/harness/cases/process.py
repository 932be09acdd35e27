"""The process a spec run happens in: how it allocates memory, and how it exits.

A spec run allocates and frees tensors of up to hundreds of megabytes thousands of times (tables
and prefixes at far positions). glibc hands each block above its mmap threshold (128 KiB) back to
the system when freed, so the next one is faulted in page by page again: a sixth of a run's time
went to the kernel. :func:`tune` raises the thresholds (``mallopt``) so that freed memory stays in
the process for reuse, and has the process exit without Python's last garbage collections, which
walk every object the run made (Hypothesis's, torch.compile's): seconds per process, each
pytest-xdist worker's included. Elsewhere than glibc, the allocator is left as it is.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import gc
import sys

#: ``mallopt`` parameters (glibc's malloc.h) and the values a spec run sets.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
ALLOCATOR_SETTINGS = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: (1 << 31) - 1, M_TOP_PAD: 1 << 28}


def tune() -> bool:
    """Keep freed memory for reuse and exit without collecting; True where glibc took the settings."""
    atexit.register(gc.freeze)  # runs at exit, after the reports are written
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return all(libc.mallopt(parameter, value) == 1 for parameter, value in ALLOCATOR_SETTINGS.items())
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
