"""README stays true: generated sections in sync, and its plug-in example behaves as described."""

import json
import re
import subprocess
import sys

import pytest

from posenc.tools.readme import README, SECTIONS, readme_section
from posenc.harness.states import State

ROOT = README.parent


@pytest.mark.parametrize("name", list(SECTIONS))
def test_generated_section_is_current(name):
    assert readme_section(README.read_text(), name) == SECTIONS[name](), \
        f"README section {name!r} is stale: run `python -m posenc.tools.readme --write`"


def test_readme_plugin_example_behaves_as_described(tmp_path):
    text = README.read_text()
    code = re.search(r"```python\n(# my_rope\.py\n.*?)```", text, re.DOTALL).group(1)
    plugin = tmp_path / "my_rope.py"
    plugin.write_text(code)
    command = [sys.executable, "-m", "pytest", "specs", "--plugin", str(plugin), "--encoders", "my_rope", "-q",
               "-p", "no:cacheprovider", "--matrix-dir", str(tmp_path / "reports")]
    env = {**__import__("os").environ, "POSENC_HYPOTHESIS_PROFILE": "triage"}
    subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    matrix = json.loads((tmp_path / "reports" / "verdicts.json").read_text())["matrix"]
    row = {claim: cells["my_rope"] for claim, cells in matrix.items()}
    assert row.pop("contract") == State.REFUTED
    assert row.pop("ROPE-13") == State.REFUTED
    assert {state for state in row.values()} <= {State.HOLDS, State.NA, State.NOT_RUN}, row
