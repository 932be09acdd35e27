"""An index of the spec functions: which claim each decides, for which kinds, under which markers.

Read from the spec modules themselves (their ``claim`` markers), so README tables, the
catalogue check and the mutation tests never list a spec by hand.
"""

from __future__ import annotations

import importlib
import inspect
import sys
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


def spec_functions(specs_dir: str | Path = "specs") -> list[SpecInfo]:
    """Every function marked ``claim`` in ``specs_dir/test_*.py`` (imported as ``specs.<module>``)."""
    specs_dir = Path(specs_dir).resolve()
    if str(specs_dir.parent) not in sys.path:
        sys.path.insert(0, str(specs_dir.parent))
    found = []
    for path in sorted(specs_dir.glob("test_*.py")):
        module = importlib.import_module(f"{specs_dir.name}.{path.stem}")
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            marks = getattr(function, "pytestmark", [])
            for mark in marks:
                if mark.name == "claim":
                    kinds = mark.kwargs.get("kinds")
                    found.append(SpecInfo(path.stem, name, mark.args[0], tuple(kinds) if kinds else None,
                                          tuple(m.name for m in marks if m.name not in ("claim", "timeout", "parametrize")),
                                          "record" in inspect.signature(function).parameters))
    return found


def spec_claims(specs_dir: str | Path) -> dict[str, str]:
    """``{spec function name: the claim it decides}``, read from the spec modules' source (nothing is
    imported), so that registration can check the spec names a declaration is aimed at."""
    import ast

    found: dict[str, str] = {}
    for path in sorted(Path(specs_dir).glob("test_*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "claim" and decorator.args):
                    claim = decorator.args[0]
                    if isinstance(claim, ast.Constant):
                        found[node.name] = claim.value
                    elif isinstance(claim, ast.Name) and claim.id == "CONTRACT":
                        found[node.name] = "contract"
    return found
