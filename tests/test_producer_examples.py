"""The how-to's three position-producer examples (``docs/examples/my_id_builder.py``,
``my_collator.py``, ``my_sharder.py``) run as a user runs them, and every claim of their family holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from posenc.harness.catalogue.claims import CONTRACT, PRODUCER_CLAIMS
from posenc.harness.catalogue.states import State
from tests.spec_runs import ROOT

EXAMPLES = {"my_id_builder": "mrope_ids", "my_collator": "packing", "my_sharder": "cp_shard"}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_a_how_to_example_producer_holds_its_familys_claims(tmp_path, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "--plugin", f"docs/examples/{name}.py",
                           "--encoders", name, "--matrix-dir", str(tmp_path), "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    matrix = json.loads((tmp_path / "verdicts.json").read_text())["matrix"]
    judged = {claim: State(row[name]) for claim, row in matrix.items() if State(row[name]) != State.NA}
    expected = set(PRODUCER_CLAIMS[EXAMPLES[name]]) | {CONTRACT}
    assert set(judged) == expected and all(state == State.HOLDS for state in judged.values()), judged
    assert "position producers" in done.stdout  # the terminal's grid names the kind
