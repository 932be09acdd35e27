"""What a run prints fits the terminal: the grid, the surprises and the header, at 80 and 160 columns.

A node id is printed whole, so that it can be copied: pytest's own failure headlines and
``FAILED <node id>`` lines, and a rerun command's node id when it alone is wider than the
terminal. Everything else the harness prints is checked.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.harness.catalogue.builtin_records import BUILTIN_RECORDS
from posenc.harness.catalogue.published_records import PUBLISHED_RECORDS
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.states import SYMBOLS, State
from posenc.harness.run.terminal import fit_name, name_width, render_grid
from posenc.harness.verdicts.width import wrap_command

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (80, 160)
PYTEST_OWN = ("FAILED ", "ERROR ", "_")


def _synthetic(n_encoders=40):
    """A matrix of ``n_encoders`` with long names, every kind and every symbol, cross-checks included."""
    kinds = ("rotary", "attention", "additive", "bias")
    encoders = [f"encoder_with_a_rather_long_name_{i:02d}" for i in range(n_encoders)]
    shown = [s for s in SYMBOLS if s != State.NA]
    cells, roles = {}, {}
    for j, claim in enumerate((CONTRACT, *CLAIMS)):
        cells[claim] = {e: (shown[(i + j) % len(shown)] if (i + j) % 3 else State.NA) for i, e in enumerate(encoders)}
        roles[claim] = {e: ("cross-check" if (i * j) % 5 == 1 else "verdict") for i, e in enumerate(encoders)}
    return cells, roles, {e: kinds[i % len(kinds)] for i, e in enumerate(encoders)}


@pytest.mark.parametrize("width", WIDTHS)
def test_the_grid_fits_and_shows_every_cell_once(width):
    cells, roles, kinds = _synthetic()
    lines = render_grid(cells, roles, kinds, width)
    assert max(map(len, lines)) <= width, max(lines, key=len)
    names = name_width(kinds, width)
    assert len({fit_name(e, names) for e in kinds}) == len(kinds), "two encoders read alike"
    for encoder, kind in kinds.items():
        rows = [line for line in lines if line.split(" ", 1)[0] == fit_name(encoder, names)]
        tokens = [token for row in rows for token in row.split()[1:]]
        group = [e for e in kinds if kinds[e] == kind]
        claims = [c for c in cells if any(cells[c][e] not in (State.NA, State.NOT_RUN) for e in group)]
        expected = [(f"({SYMBOLS[cells[c][encoder]]})" if roles[c][encoder] == "cross-check"
                     else SYMBOLS[cells[c][encoder]]) for c in claims]
        assert tokens == expected, (encoder, tokens, expected)


def test_a_long_command_still_pastes_as_one():
    command = "pytest 'specs/test_call_paths.py::test_offset_path_equals_explicit_positions[bug-bfloat16]' " \
              "--plugin /somewhere/rather/deep/in/a/tree/defective_ropes.py --encoders bug  # seed=0, m=[1, 2]"
    lines = wrap_command(command, 100)
    assert all(len(line) <= 100 for line in lines), lines
    code = [line for line in lines if not line.lstrip().startswith("#")]
    assert all(line.endswith(" \\") for line in code[:-1]) and len(code) > 1
    assert " ".join(line.removesuffix(" \\").strip() for line in code) == command.partition("  #")[0]
    assert lines[-1].strip() == "# seed=0, m=[1, 2]"
    narrow = wrap_command(command, 60)  # the node id is longer than the line: it stays whole
    assert any("test_offset_path_equals_explicit_positions[bug-bfloat16]'" in line for line in narrow), narrow


def _unbreakable(line: str) -> bool:
    """A line that is one word (a node id in a rerun command): breaking it would break the paste."""
    return len(line.removesuffix(" \\").split()) == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_a_run_with_every_encoder_and_surprises_prints_nothing_wider(width, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}, "COLUMNS": str(width)}
    command = [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--plugin", "tests/plugins/defective_ropes.py", "-k", "offset_path or rejects_negative",
               "--matrix-dir", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    out = done.stdout
    assert "posenc verdicts" in out and "need a look" in out and "rotary encoders" in out, out[-2000:]
    plugin = (ROOT / "tests" / "plugins" / "defective_ropes.py").read_text()
    builtin = len(BUILTIN_RECORDS) + len(PUBLISHED_RECORDS)  # not posenc.records(): this process may hold plug-ins
    registered = builtin + len(re.findall(r'^_register\("', plugin, re.MULTILINE))
    assert f"posenc: encoders ({registered})" in out, out[:2000]  # the built-in and published, and the plug-in's
    wide = [line for line in out.splitlines()
            if len(line) > width and not line.startswith(PYTEST_OWN) and not _unbreakable(line)]
    assert not wide, "\n".join(wide)
