"""An index of the spec functions: which claim each decides, for which kinds, under which markers."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SpecInfo:
    module: str
    name: str
    claim: str
    kinds: tuple[str, ...] | None
    markers: tuple[str, ...]
    takes_record: bool  # False: a demonstration of the harness itself, outside the matrix

    @property
    def nodeid(self) -> str:
        return f"specs/{self.module}.py::{self.name}"


def spec_functions() -> list[SpecInfo]:
    found = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"specs.{path.stem}")
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            marks = getattr(function, "pytestmark", [])
            for mark in marks:
                if mark.name == "claim":
                    kinds = mark.kwargs.get("kinds")
                    found.append(SpecInfo(path.stem, name, mark.args[0], tuple(kinds) if kinds else None,
                                          tuple(m.name for m in marks if m.name != "claim"),
                                          "record" in inspect.signature(function).parameters))
    return found
