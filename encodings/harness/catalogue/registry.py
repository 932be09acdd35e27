"""The registry: the built-in records, then those that users' plug-in files register.

Plug-ins call :func:`register` from an ordinary Python file loaded by
``pytest specs --plugin FILE`` or ``POSENC_PLUGINS=FILE[:FILE…]``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import traceback
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from .builtin_records import BUILTIN_RECORDS
from .published_records import PUBLISHED_RECORDS
from .records import EncoderRecord
from .spec_index import spec_claims

#: The spec folder beside the package (a checkout, known by its catalogue); without it no names are checked.
SPECS_DIR = Path(__file__).resolve().parents[3] / "specs"  # catalogue, harness, the package, the repository

_REGISTRY: dict[str, EncoderRecord] = {record.name: record for record in (*BUILTIN_RECORDS, *PUBLISHED_RECORDS)}


@functools.cache
def _spec_claims() -> dict[str, str] | None:
    return spec_claims(SPECS_DIR) if (SPECS_DIR / "claims.md").is_file() else None


def check_spec_names(record: EncoderRecord, known: dict[str, str] | None = None) -> None:
    """Every spec a declaration is aimed at (``refuted(specs=…)``) exists and decides that claim;
    ``known`` maps spec names to claims (default: the spec folder's)."""
    known = _spec_claims() if known is None else known
    if known is None:
        return
    for claim, declared in record.claims.items():
        wrong = [spec for spec in declared.specs if known.get(spec) != claim]
        if wrong:
            own = sorted(spec for spec, decided in known.items() if decided == claim)
            raise ValueError(f"encoder {record.name!r}: {claim} is aimed at {', '.join(wrong)}, which "
                             f"{'is no spec of it' if len(wrong) == 1 else 'are no specs of it'}; "
                             f"the specs of {claim}: {', '.join(own) or 'none'}")


def check_registered() -> None:
    """The spec names of every registered record (the built-ins are registered at import)."""
    for record in _REGISTRY.values():
        check_spec_names(record)


def register(record: EncoderRecord) -> EncoderRecord:
    """Add ``record`` to the registry; a name may be registered once, and every spec name its
    declarations aim at must be a spec of that claim."""
    if not isinstance(record, EncoderRecord):
        raise TypeError(f"register() takes an EncoderRecord, got {type(record).__name__}")
    if record.name in _REGISTRY:
        raise ValueError(f"an encoder named {record.name!r} is already registered")
    check_spec_names(record)
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


class ExitAtImport(BaseException):
    """``os._exit`` called by a plug-in file while it is imported (raised instead of exiting)."""


@contextmanager
def _no_exit_at_import():
    """``os._exit`` raises :class:`ExitAtImport` while a plug-in is imported: one line, not a silent end."""
    real = os._exit

    def refuse(status=0):
        raise ExitAtImport(status)

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real


def _exit_message(error: BaseException) -> str:
    if isinstance(error, (SystemExit, ExitAtImport, KeyboardInterrupt)):
        called = {SystemExit: "sys.exit", ExitAtImport: "os._exit"}.get(type(error), "KeyboardInterrupt raised")
        shown = f"{called}({error.args[0] if error.args else ''})" if called != "KeyboardInterrupt raised" else called
        return f"{shown} at import; a plug-in file should only define and register encoders"
    return str(error)


def _is_module_name(name: str) -> bool:
    return not name.endswith(".py") and "/" not in name and all(part.isidentifier() for part in name.split("."))


def load_plugin(path: str | Path) -> list[EncoderRecord]:
    """Execute a user file that calls :func:`register`, or import a module that does (a dotted
    name such as ``posenc.ecosystem``); return the records it added.

    Raises :class:`PluginError` naming the file, the line and the error when the file is
    missing, does not parse, raises, or registers a bad or duplicate record.
    """
    if isinstance(path, str) and _is_module_name(path) and not Path(path).is_file():
        return _import_plugin(path)
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
            with _no_exit_at_import():
                spec.loader.exec_module(module)
        except (Exception, SystemExit, KeyboardInterrupt, ExitAtImport) as error:  # noqa: BLE001 - name where
            del sys.modules[module_name]
            for name in set(_REGISTRY) - before:  # a half-loaded file leaves nothing behind
                del _REGISTRY[name]
            message = error.msg if isinstance(error, SyntaxError) else _exit_message(error)
            raise PluginError(f"plug-in {_where(path, error)}: {type(error).__name__}: {message}") from error
    return _mark_origin(before, str(path))


def _mark_origin(before: set[str], origin: str) -> list[EncoderRecord]:
    added = [name for name in _REGISTRY if name not in before]
    for name in added:
        _REGISTRY[name] = replace(_REGISTRY[name], origin=origin)
    return [_REGISTRY[name] for name in added]


_IMPORTED: dict[str, list[str]] = {}


def _import_plugin(name: str) -> list[EncoderRecord]:
    """Import a plug-in module by name; a second load returns the records of the first."""
    if name in _IMPORTED:
        return [_REGISTRY[n] for n in _IMPORTED[name] if n in _REGISTRY]
    before = set(_REGISTRY)
    try:
        with _no_exit_at_import():
            importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise PluginError(f"plug-in {name}: no such file or module ({error})") from error
    except (Exception, SystemExit, KeyboardInterrupt, ExitAtImport) as error:  # noqa: BLE001 - name it
        for added in set(_REGISTRY) - before:
            del _REGISTRY[added]
        raise PluginError(f"plug-in {name}: {type(error).__name__}: {_exit_message(error)}") from error
    records = _mark_origin(before, name)
    _IMPORTED[name] = [r.name for r in records]
    return records
