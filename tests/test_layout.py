"""The house keeps the shape docs/reference/layout.md describes, measured from its own imports.

* **No circles:** no module reaches itself through imports (deferred imports count too).
* **No arrow runs back up:** rooms are ordered ``posenc.encoders`` < ``posenc.harness`` <
  ``posenc`` (the public face) and ``posenc.tools`` < ``specs`` < ``tests``; a module imports
  only from its own room or from rooms below it.
* **Encoders know nothing of the harness:** a module under ``posenc.encoders`` imports torch,
  the standard library and ``posenc.encoders`` only.
* **No room is a warehouse:** no module of the package or of the spec helpers holds more than
  20% of their lines.
* **The hook layer is thin:** ``posenc.harness.pytest_plugin`` holds hooks that hand their work on,
  at most :data:`HOOK_LAYER_LINES` lines.
* **One state vocabulary:** no module spells a cell state as a string; they say
  ``posenc.harness.catalogue.states.State``.
* **The harness shows its road:** each module of ``posenc.harness`` lives in the stage
  docs/reference/layout.md gives it (and ``posenc.harness.STAGES``); a stage imports only from
  stages of its rank or below; no folder of the package holds more than :data:`FOLDER_MODULES`
  modules; each stage's ``__init__`` says its job in one sentence; the old flat paths still import,
  with a warning.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Rooms from the ground up; a module may import from its own rank or below.
RANKS = {"posenc.encoders": 0, "posenc.harness": 1, "posenc": 2, "posenc.tools": 2, "posenc.ecosystem": 2,
         "posenc.experiments": 2,
         "specs": 3, "tests": 4, "conftest": 4}
#: Third-party libraries an encoder module may import besides torch (the ecosystem adapters, a room of
#: their own above the face, import theirs).
ENCODER_LIBRARIES = {"torch"}
LARGEST_SHARE = 0.20
HOOK_LAYER_LINES = 250
STATES_MODULE = "posenc.harness.catalogue.states"
FOLDER_MODULES = 12
LAYOUT = ROOT / "docs" / "reference" / "layout.md"


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[0] == "encodings":
        parts[0] = "posenc"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    files = [*ROOT.glob("encodings/**/*.py"), *ROOT.glob("specs/**/*.py"), *ROOT.glob("tests/**/*.py"),
             ROOT / "conftest.py"]
    return {module_name(p): p for p in files}


MODULES = source_files()


def imports_of(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, at the top or inside functions, resolved to the modules of this tree
    where they are ours and to their top-level package otherwise."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target and target.split(".")[0] in ("posenc", "specs", "tests"):
                target = target.rpartition(".")[0]
            found.add(target if target in MODULES else target.split(".")[0])
    found.discard(name)
    return found


GRAPH = {name: {t for t in imports_of(name, path) if t in MODULES} for name, path in MODULES.items()}


def room(name: str) -> str:
    for prefix in sorted(RANKS, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    raise AssertionError(f"{name} is in no room of RANKS")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert circles(GRAPH) == []


def test_no_arrow_runs_back_up():
    upward = [f"{a} ({room(a)}) -> {b} ({room(b)})" for a, targets in GRAPH.items() for b in targets
              if RANKS[room(b)] > RANKS[room(a)]]
    assert upward == [], "imports from a lower room to a higher one:\n" + "\n".join(upward)


def test_encoders_import_torch_the_standard_library_and_each_other_only():
    allowed = ENCODER_LIBRARIES | set(sys.stdlib_module_names) | {"__future__"}
    wrong = [f"{name} -> {target}" for name, path in MODULES.items() if room(name) == "posenc.encoders"
             for target in imports_of(name, path)
             if not (target in allowed or target == "posenc.encoders" or target.startswith("posenc.encoders."))]
    assert wrong == [], "encoder modules importing outside torch, stdlib and posenc.encoders:\n" + "\n".join(wrong)


def test_no_module_holds_more_than_a_fifth_of_the_lines():
    counted = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()
               if room(name).startswith("posenc") or name in ("specs.support", "specs.strategies", "conftest")}
    total = sum(counted.values())
    largest = max(counted, key=counted.get)
    assert counted[largest] <= LARGEST_SHARE * total, f"{largest}: {counted[largest]} of {total} lines"


def test_the_hook_layer_is_thin():
    lines = len(MODULES["posenc.harness.pytest_plugin"].read_text().splitlines())
    assert lines <= HOOK_LAYER_LINES, f"pytest_plugin.py has {lines} lines; move work into the module that does it"


def state_literals(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every plain string constant that spells a cell state."""
    from posenc.harness.catalogue.states import State

    values = {state.value for state in State}
    tree = ast.parse(source)
    exported = {id(element) for node in tree.body if isinstance(node, ast.Assign)  # __all__ names functions
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                for element in ast.walk(node.value)}
    return [(node.lineno, node.value) for node in ast.walk(tree) if id(node) not in exported
            and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values]


def test_no_module_spells_a_cell_state_as_a_string():
    spelled = [f"{path.relative_to(ROOT)}:{line}: {text!r}" for name, path in MODULES.items() if name != STATES_MODULE
               for line, text in state_literals(path.read_text())]
    assert spelled == [], "say posenc.harness.catalogue.states.State instead:\n" + "\n".join(spelled)


# ---------------------------------------------------------------- the harness's stages


def layout_stages() -> dict[str, tuple[int, set[str]]]:
    """The stage table of docs/reference/layout.md: stage -> (rank, its modules)."""
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| [^|]+ \| ([^|]+) \|$", LAYOUT.read_text(), flags=re.MULTILINE)
    return {stage: (int(rank), set(re.findall(r"`(\w+)`", modules))) for stage, rank, modules in rows}


def harness_stage(name: str) -> str | None:
    """The stage of a ``posenc.harness`` module (None for the package and its hooks)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["posenc", "harness"] else None


def test_every_harness_module_lives_in_the_stage_the_layout_gives_it():
    from posenc.harness import STAGES

    documented = layout_stages()
    assert documented == {stage: (rank, set(names)) for stage, (rank, names) in STAGES.items()}, \
        "docs/reference/layout.md's stage table and posenc.harness.STAGES differ"
    where = {name: stage for stage, (_, names) in documented.items() for name in names}
    found = {name.rpartition(".")[2]: harness_stage(name) for name in MODULES if harness_stage(name)
             and not name.endswith(tuple(f".{stage}" for stage in documented))}
    misplaced = {name: (stage, where.get(name)) for name, stage in found.items() if where.get(name) != stage}
    assert not misplaced, f"modules outside the stage the layout gives them (found, given): {misplaced}"
    loose = sorted(n for n in MODULES if n.startswith("posenc.harness.") and n.count(".") == 2
                   and n.rpartition(".")[2] not in {*documented, "pytest_plugin"})
    assert not loose, f"modules directly in posenc.harness, in no stage: {loose}"


def test_no_arrow_runs_back_up_the_road():
    from posenc.harness import STAGES

    rank = {stage: r for stage, (r, _) in STAGES.items()}
    top = max(rank.values()) + 1  # the hooks
    level = {name: rank.get(harness_stage(name), top) for name in MODULES if name.startswith("posenc.harness")}
    upward = [f"{a} -> {b}" for a in level for b in GRAPH[a] if b in level and level[b] > level[a]]
    assert upward == [], "imports from a stage to a higher one:\n" + "\n".join(upward)


def test_no_folder_holds_more_than_a_dozen_modules():
    crowded = {str(folder.relative_to(ROOT)): count for folder in (ROOT / "encodings").rglob("*")
               if folder.is_dir() and folder.name != "__pycache__"
               and (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > FOLDER_MODULES}
    assert not crowded, f"folders over {FOLDER_MODULES} modules: {crowded}"


def test_each_stage_says_its_job_in_one_sentence():
    from posenc.harness import STAGES

    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((ROOT / "encodings" / "harness" / stage / "__init__.py").read_text()))
        assert doc and doc.endswith(".") and doc.count(". ") == 0 and "\n\n" not in doc, (stage, doc)


def test_old_paths_import_the_moved_modules_with_a_warning():
    import subprocess

    from posenc.harness import MOVED

    script = ("import importlib, sys, warnings\n"
              "warnings.simplefilter('error', DeprecationWarning)\n"
              "import posenc\n"
              "for old, stage in %r.items():\n"
              "    new = importlib.import_module(f'posenc.harness.{stage}.{old}')\n"
              "    try:\n"
              "        importlib.import_module(f'posenc.harness.{old}')\n"
              "    except DeprecationWarning as warned:\n"
              "        assert f'posenc.harness.{stage}.{old}' in str(warned), warned\n"
              "    else:\n"
              "        raise SystemExit(f'no warning for posenc.harness.{old}')\n"
              "    warnings.simplefilter('ignore', DeprecationWarning)\n"
              "    assert importlib.import_module(f'posenc.harness.{old}') is new, old\n"
              "    warnings.simplefilter('error', DeprecationWarning)\n"
              "print('ok', len(%r))\n") % (MOVED, MOVED)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr


def test_paths_a_module_derives_from_its_own_file_still_reach_their_targets():
    """A module that moved a folder deeper must climb one more: the registry's specs, identify's
    package frames."""
    import posenc
    from posenc.harness.catalogue import registry
    from posenc.harness.identify import identification

    assert registry.SPECS_DIR == ROOT / "specs"
    assert identification._NOT_THE_TARGETS[0] == str(Path(posenc.__file__).resolve().parent)


# ---------------------------------------------------------------- the test can fail

def test_the_checks_catch_a_circle_an_upward_arrow_and_an_encoder_importing_the_harness():
    assert harness_stage("posenc.harness.cases.judge") == "cases"
    assert harness_stage("posenc.harness.pytest_plugin") is None
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert RANKS[room("posenc.harness.catalogue.registry")] > RANKS[room("posenc.encoders.rotary")]
    assert RANKS[room("specs.support")] > RANKS[room("posenc")]


def test_the_state_check_finds_a_spelled_state_and_passes_the_enumeration():
    spelled = "holds (par" + "tial)"  # not spelled here, where the check reads it
    assert state_literals(f'if cell == "{spelled}":\n    pass\nx = "holds, mostly"') == [(1, spelled)]
    assert state_literals("if cell == State.HOLDS_PARTIAL:\n    pass") == []


@pytest.mark.parametrize("source, expected", [
    ("from posenc.harness.catalogue.records import BuildConfig", {"posenc.harness.catalogue.records"}),
    ("from ..harness.catalogue import registry", {"posenc.harness.catalogue.registry"}),
    ("from . import rotary", {"posenc.encoders.rotary"}),
    ("import pytest", {"pytest"}),
    ("def f():\n    import posenc", {"posenc"}),
])
def test_imports_are_resolved_to_modules_of_the_tree(tmp_path, source, expected):
    path = ROOT / "encodings" / "encoders" / "absolute.py"
    fake = tmp_path / "absolute.py"
    fake.write_text(source)
    assert imports_of(module_name(path), fake) == expected


def _timeouts_of_their_own(source: str) -> list[int]:
    """Lines of ``source`` with a ``pytest.mark.timeout(...)`` or a ``timeout=`` keyword of a
    ``subprocess`` call (in code, not in strings)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "timeout" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "mark":
            found.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess" and \
                any(k.arg == "timeout" for k in node.keywords):
            found.append(node.lineno)
    return found


def test_the_projects_tests_set_no_timeout_of_their_own(request):
    """A slow machine gives a slow run, never a red one: only the user's ``--timeout`` limits them."""
    own = {path.name: lines for path in sorted((ROOT / "tests").glob("test_*.py"))
           if path.name != "test_faults.py" and (lines := _timeouts_of_their_own(path.read_text()))}
    assert own == {}, own
    assert _timeouts_of_their_own("import pytest\n@pytest.mark.timeout(9)\ndef f(): pass\n") == [2]
    assert _timeouts_of_their_own("import subprocess\nsubprocess.run(['x'], timeout=9)\n") == [2]
    if request.config.getoption("timeout", default=None) is None:
        assert request.node.get_closest_marker("timeout").args == (0,)
