"""The last-level cache one core shares, as the kernel decides how to walk a tensor by it.

Linux lists each core's caches under ``/sys/devices/system/cpu/cpu0/cache/index*/`` (``level``,
``type``, ``size``); the largest level that holds data is the last-level cache. glibc's
``sysconf(_SC_LEVEL3_CACHE_SIZE)`` is asked only where sysfs lists none: on some virtual machines
it reports the whole package's L3 (256 MiB where a core shares 32 MiB), which would keep a tensor
eight times too large on the cache-resident path.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK_BYTES = 16 << 20  # neither sysfs nor sysconf knows: a common desktop and server L3
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"32768K"`` -> 33554432; sysfs writes sizes with a K, M or G suffix."""
    text = text.strip().upper()
    unit = text[-1] if text and text[-1] in _UNITS else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit():
        raise ValueError(f"not a cache size: {text!r}")
    return int(number) * _UNITS[unit]


def sysfs_last_level_bytes(root: Path = SYSFS_CACHES) -> int | None:
    """The size of the highest-level data or unified cache listed under ``root``; None if none is."""
    best: tuple[int, int] | None = None
    for index in sorted(root.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            entry = (int((index / "level").read_text()), parse_size((index / "size").read_text()))
        except (OSError, ValueError):
            continue
        best = max(best, entry) if best else entry
    return best[1] if best else None


@functools.cache
def last_level_cache_bytes() -> int:
    listed = sysfs_last_level_bytes()
    if listed:
        return listed
    try:
        reported = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):
        reported = 0
    return reported if reported > 0 else FALLBACK_BYTES
