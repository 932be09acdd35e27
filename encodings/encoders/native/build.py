"""Compile the package's C kernels once per machine and load them with ctypes.

A kernel's shared library is built by the C compiler (``$CC``, else ``cc``) with ``-O3
-march=native`` and OpenMP, or without OpenMP where the compiler has none, into
``$POSENC_KERNEL_CACHE`` (default ``~/.cache/posenc/kernels``), named by a hash of the source,
the compiler, the flags and the CPU's features (a cache shared between machines never hands one
a library built for another's instructions), and written under a temporary name then renamed, so
concurrent processes (pytest-xdist workers) never load half a file. :func:`load` raises
:class:`KernelUnavailable` naming the compiler's complaint when no build succeeds.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAG_SETS = (("-O3", "-march=native", "-fopenmp"), ("-O3", "-march=native"), ("-O3",))


class KernelUnavailable(RuntimeError):
    """No C compiler, or none that builds the kernel, on this machine."""


def cache_dir() -> Path:
    configured = os.environ.get("POSENC_KERNEL_CACHE", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "posenc" / "kernels"


def _cpu_features() -> bytes:
    """What ``-march=native`` reads: the CPU's feature flags where the system lists them."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.encode()
    except OSError:
        pass
    return platform.processor().encode()


def _build(source: Path, compiler: list[str], flags: tuple[str, ...]) -> Path:
    text = source.read_bytes()
    key = hashlib.sha256(b"\0".join([text, *map(str.encode, compiler), *map(str.encode, flags),
                                     platform.machine().encode(), _cpu_features()])).hexdigest()[:16]
    target = cache_dir() / f"{source.stem}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        done = subprocess.run([*compiler, *flags, "-shared", "-fPIC", str(source), "-o", str(built)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if "error" in line.lower()] or done.stderr.splitlines()
            raise KernelUnavailable(f"{' '.join(compiler)} {' '.join(flags)} exited {done.returncode}: "
                                    + " | ".join(line.strip() for line in said[-3:]))
        os.replace(built, target)
    return target


@functools.cache
def load(name: str) -> ctypes.CDLL:
    """The library built from ``<name>.c`` beside this module, compiled on first use."""
    compiler = shlex.split(os.environ.get("CC", "").strip() or "cc")  # CC may carry a launcher: "ccache gcc"
    failures = []
    for flags in FLAG_SETS:
        try:
            return ctypes.CDLL(str(_build(HERE / f"{name}.c", compiler, flags)))
        except (KernelUnavailable, OSError, subprocess.SubprocessError) as error:
            failures.append(str(error))
    raise KernelUnavailable(f"could not build {name}.c: " + "; ".join(failures))
