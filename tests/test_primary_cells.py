"""One defect, one primary claim: the rules of ``docs/reference/states.md`` that mark a failing
cell a consequence of another, and the reports that list primary cells first."""

from __future__ import annotations

import dataclasses

import torch

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


def test_an_input_changed_in_place_makes_every_other_failure_the_contracts():
    from posenc.harness.verdicts import primary

    def outcome(claim, message=""):
        return {"claim": claim, "encoder": "e", "test_id": f"t[{claim}]", "state": FAIL,
                "message": message}

    found = primary.consequences([outcome("contract", "[contract] e: the input was modified in place"),
                                  outcome("ROPE-1"), outcome("ROPE-4")], roles={})
    assert found == {("ROPE-1", "e"): ("contract", primary.IN_PLACE_RULE),
                     ("ROPE-4", "e"): ("contract", primary.IN_PLACE_RULE)}
    other = primary.consequences([outcome("contract", "[contract] e: shape changed"), outcome("ROPE-1")], roles={})
    assert ("ROPE-1", "e") not in other


def test_a_negative_position_is_blamed_only_where_the_rotation_holds_at_the_others():
    """The contract's garbage check: a wrong θ everywhere is the rotation claims' (no contract
    blame); a table that wraps at −2 while 0, 1, 3 are right is the contract's."""
    import posenc
    from specs import support as s
    from specs.test_contract import _not_the_rotation_at

    record = posenc.get("rope_interleaved")
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    p = torch.tensor([0, 1, -2, 3])
    check = _not_the_rotation_at(record, x, p)
    right = s.reference_rotation(s.as_heads(x), p[None], record.geometry, s.SPEC_CONFIG.head_dim).to(x.dtype)
    other = s.reference_rotation(s.as_heads(x), p[None], dataclasses.replace(record.geometry, base=500.0),
                                 s.SPEC_CONFIG.head_dim).to(x.dtype)  # a wrong θ at every position
    wrapped = right.clone()
    wrapped[:, 2] = posenc.RotaryEmbedding(s.SPEC_CONFIG.head_dim)(x, torch.tensor([0, 1, 2046, 3]))[:, 2]
    assert check(right) is None and check(other) is None
    assert check(wrapped).startswith("not R_p x at p = [0, 1, -2, 3]")


def test_a_wrong_rotation_shows_once_on_rope_1():
    from posenc.harness.verdicts import primary

    def outcome(claim):
        return {"claim": claim, "encoder": "e", "test_id": f"t[{claim}-float32]", "state": FAIL, "message": ""}

    found = primary.consequences([outcome("ROPE-1"), outcome("ROPE-8")], roles={})
    assert found == {("ROPE-8", "e"): ("ROPE-1", primary.ROTATION_RULE)}
    assert primary.consequences([outcome("ROPE-8")], roles={}) == {}  # alone, ROPE-8 is primary
