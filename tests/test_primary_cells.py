"""One defect, one primary claim: the rules of ``docs/reference/states.md`` that mark a failing
cell a consequence of another, and the reports that list primary cells first."""

from __future__ import annotations

from posenc.harness.catalogue.states import State
from posenc.harness.verdicts import primary
from posenc.harness.verdicts.html_report import render_html
from posenc.harness.verdicts.matrix import Outcome, surprises

FAIL, HOLDS = State.UNEXPECTEDLY_FAILING, State.HOLDS


def _outcome(claim, state, dtype="float32", encoder="e", spec="t"):
    return Outcome(claim, encoder, spec, f"specs/x.py::{spec}[{encoder}-{dtype}]", state, f"{claim} {state}")


ROLES = {"ROPE-1": {"e": "verdict"}, "ROPE-4": {"e": "verdict"}, "ROPE-11": {"e": "verdict"},
         "ATT-4": {"e": "cross-check"}}


def test_a_failure_only_in_half_precision_follows_rope_11():
    outcomes = [_outcome("ROPE-11", FAIL, "float16"), _outcome("ROPE-4", FAIL, "bfloat16"),
                _outcome("ROPE-4", HOLDS, "float32"), _outcome("ROPE-1", FAIL, "float32")]
    found = primary.consequences(outcomes, ROLES)
    assert found == {("ROPE-4", "e"): ("ROPE-11", primary.HALF_RULE)}, found  # ROPE-1 fails in float32: its own


def test_without_a_failing_rope_11_or_a_float32_pass_nothing_follows():
    assert primary.consequences([_outcome("ROPE-4", FAIL, "float16"), _outcome("ROPE-4", HOLDS, "float32")], ROLES) == {}
    assert primary.consequences([_outcome("ROPE-11", FAIL, "float16"), _outcome("ROPE-4", FAIL, "float16")],
                                ROLES) == {}


def test_a_cross_check_is_never_primary_beside_a_failing_verdict():
    outcomes = [_outcome("ATT-4", FAIL), _outcome("ROPE-4", FAIL)]
    assert primary.consequences(outcomes, ROLES) == {("ATT-4", "e"): ("ROPE-4", primary.CROSS_CHECK_RULE)}
    assert primary.consequences([_outcome("ATT-4", FAIL)], ROLES) == {}  # alone, it is all there is


def test_the_terminal_and_the_html_list_primary_cells_first():
    outcomes = [_outcome("ATT-4", FAIL), _outcome("ROPE-4", FAIL)]
    lines = [line for line, _ in surprises(outcomes, ROLES)]
    assert lines[0].startswith("FAIL  ROPE-4 on e") and "a consequence of ROPE-4" in lines[1], lines
    matrix = {"ROPE-4": {"e": FAIL.value}, "ATT-4": {"e": FAIL.value}}
    page = render_html({"header": {"status": "complete"}, "matrix": matrix, "roles": ROLES,
                        "consequences": primary.as_json(primary.consequences(outcomes, ROLES)),
                        "outcomes": [o.as_dict() for o in outcomes]})
    section = page[page.index('id="surprises"'):]
    assert section.index("ROPE-4 on e") < section.index("ATT-4 on e") and "a consequence of ROPE-4" in section
