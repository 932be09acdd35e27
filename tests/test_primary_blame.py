"""One defect, one claim: specs that once blamed a defect on a claim that does not own it now leave
it to the claim that does (``tests/plugins/misblamed.py`` describes each defect and the misfire).

* ROPE-3's orthogonality stays inside ROPE-3's range (positions up to 10^4; past it is ROPE-10a's);
* ROPE-11 leaves to ROPE-10a what is not finite in float32 too;
* ROPE-2 reads each matrix off a fresh module (stale state is ROPE-9's);
* ATT-2 checks the scale and the row sums over the keys the module lets a query see (the mask
  is ATT-3's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.harness.catalogue.states import State
from tests.test_faults import run_specs

PLUGIN = Path(__file__).resolve().parent / "plugins" / "misblamed.py"
pytestmark = pytest.mark.xdist_group("misblamed")
#: The run selects some specs of each claim: a cell that holds reads "holds (partial)".
HOLDS = (State.HOLDS, State.HOLDS_PARTIAL)


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[str, dict[str, State]]:
    """encoder -> claim -> cell, of one run of the specs that misfired and the claims that own them."""
    reports = tmp_path_factory.mktemp("misblamed") / "reports"
    run_specs("--plugin", PLUGIN, "--encoders", "misblamed_*", "-k",
              "orthogonal or half_precision or far_past_any_table or frequencies_follow or used_module "
              "or fresh or rows_sum_to_one or causal", matrix_dir=reports)
    verdicts = json.loads((reports / "verdicts.json").read_text() if (reports / "verdicts.json").exists()
                          else next((reports / "runs").glob("*/verdicts.json")).read_text())
    found: dict[str, dict[str, State]] = {}
    for claim, row in verdicts["matrix"].items():
        for encoder, state in row.items():
            found.setdefault(encoder, {})[claim] = State(state)
    return found


def test_half_precision_positions_are_blamed_on_far_positions_only(cells):
    row = cells["misblamed_fp16_positions"]
    assert row["ROPE-3"] in HOLDS, row  # the rotation stays orthogonal up to 10^4
    assert row["ROPE-11"] in HOLDS, row  # not finite in float32 too: not precision's
    assert row["ROPE-10a"] == State.UNEXPECTEDLY_FAILING, row  # the claim that owns far positions


def test_a_length_keyed_cache_is_blamed_on_stale_state_not_on_the_frequencies(cells):
    row = cells["misblamed_length_keyed_cache"]
    assert row["ROPE-2"] in HOLDS, row
    assert row["ROPE-9"] == State.UNEXPECTEDLY_FAILING, row


def test_a_mask_that_sees_the_next_token_is_blamed_on_causality_not_on_the_weights(cells):
    row = cells["misblamed_attention_sees_next"]
    assert row["ATT-2"] in HOLDS, row
    assert row["ATT-3"] == State.UNEXPECTEDLY_FAILING, row
