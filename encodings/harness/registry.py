"""The registry: the built-in records, then those that users' plug-in files register.

Plug-ins call :func:`register` from an ordinary Python file loaded by
``pytest specs --plugin FILE`` or ``POSENC_PLUGINS=FILE[:FILE…]``.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from .builtin_records import BUILTIN_RECORDS
from .records import EncoderRecord

_REGISTRY: dict[str, EncoderRecord] = {record.name: record for record in BUILTIN_RECORDS}


def register(record: EncoderRecord) -> EncoderRecord:
    """Add ``record`` to the registry; a name may be registered once."""
    if not isinstance(record, EncoderRecord):
        raise TypeError(f"register() takes an EncoderRecord, got {type(record).__name__}")
    if record.name in _REGISTRY:
        raise ValueError(f"an encoder named {record.name!r} is already registered")
    _REGISTRY[record.name] = record
    return record


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def records() -> list[EncoderRecord]:
    """Every registered record, built-ins first, in registration order."""
    return list(_REGISTRY.values())


def get(name: str) -> EncoderRecord:
    if name not in _REGISTRY:
        raise KeyError(f"no encoder named {name!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


class PluginError(Exception):
    """A plug-in file that cannot be loaded: ``FILE:LINE: Error: message``."""


def _where(path: Path, error: BaseException) -> str:
    """``FILE:LINE`` of the plug-in's own line that raised (the last frame inside the file)."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f"{path}:{error.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename) == path]
    return f"{path}:{lines[-1]}" if lines else str(path)


def load_plugin(path: str | Path) -> list[EncoderRecord]:
    """Execute a user file that calls :func:`register`; return the records it added.

    Raises :class:`PluginError` naming the file, the line and the error when the file is
    missing, does not parse, raises, or registers a bad or duplicate record.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"plug-in {path}: file not found")
    before = set(_REGISTRY)
    module_name = f"posenc_plugin_{abs(hash(str(path)))}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:  # noqa: BLE001 - whatever the user's file raises, name where
            del sys.modules[module_name]
            for name in set(_REGISTRY) - before:  # a half-loaded file leaves nothing behind
                del _REGISTRY[name]
            message = error.msg if isinstance(error, SyntaxError) else str(error)
            raise PluginError(f"plug-in {_where(path, error)}: {type(error).__name__}: {message}") from error
    added = [name for name in _REGISTRY if name not in before]
    for name in added:
        _REGISTRY[name] = replace(_REGISTRY[name], origin=str(path))
    return [_REGISTRY[name] for name in added]
