"""One defect, one primary claim: which failing cells of an encoder are consequences of another of
its failing cells, by the rules ``docs/reference/states.md`` writes down.

* **Half precision is ROPE-11's.** A failing cell whose failures all ran in float16 or bfloat16,
  while the same cell holds in float32 (an outcome of it in another dtype passed), on an encoder
  whose ROPE-11 cell fails, is a consequence of ROPE-11.
* **A cross-check is never primary.** A failing cell whose role is ``cross-check`` (the claim is not
  made about this design) on an encoder with a failing verdict cell is a consequence of the first
  such verdict cell, in the catalogue's order.

* **A wrong rotation is ROPE-1's.** ROPE-1 states the rotation in both its forms (the 2 × 2
  matrix and the complex multiplication); a failing ROPE-8 beside a failing ROPE-1 is its
  consequence, whatever the rotation got wrong (θ, pairing, sign, the rotated pairs).
* **An input changed in place is the contract's.** On an encoder whose contract cell fails
  because it modified its input in place, every other failing cell is a consequence of the
  contract: the specs reuse their inputs after a call, so they read values it overwrote.

A consequence stays a failure, and every report shows it: the reports list the primary cells
first and say of each consequence which cell it follows and by which rule.
"""

from __future__ import annotations

import re

from ..catalogue.claims import CLAIMS, CONTRACT
from ..catalogue.states import State

#: A spec run in a half dtype, by its parametrised test id.
HALF = re.compile(r"[\[-](b?float16)[\]-]")
HALF_RULE = "seen only in half precision, where ROPE-11 fails, while float32 holds"
CROSS_CHECK_RULE = "a cross-check of a claim not made about this design, beside a failing verdict"
ROTATION_RULE = "ROPE-1 states the rotation in both forms: a wrong rotation shows once, on ROPE-1"
IN_PLACE_RULE = "the encoder modifies its input in place: a spec that reuses an input after a call reads what it wrote"
#: The contract's message for an input changed in place (specs/test_contract.py).
IN_PLACE = "the input was modified in place"
ORDER = {claim: k for k, claim in enumerate((*CLAIMS, CONTRACT))}


def consequences(outcomes, roles: dict | None) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(claim, encoder): (primary claim, rule)}`` for each failing cell that follows another.
    ``outcomes``: :class:`~.matrix.Outcome` objects or their dicts; ``roles``: ``{claim: {encoder: role}}``."""
    cells: dict[str, dict[str, list]] = {}
    for o in outcomes:
        claim, encoder = _field(o, "claim"), _field(o, "encoder")
        cells.setdefault(encoder, {}).setdefault(claim, []).append(o)
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for encoder, by_claim in cells.items():
        failing = {claim: runs for claim, runs in by_claim.items()
                   if any(_state(o) == State.UNEXPECTEDLY_FAILING for o in runs)}
        if any(IN_PLACE in (_field(o, "message") or "") for o in failing.get(CONTRACT, ())):
            found.update({(claim, encoder): (CONTRACT, IN_PLACE_RULE) for claim in failing if claim != CONTRACT})
            continue
        if "ROPE-11" in failing:
            for claim, runs in failing.items():
                failed = [o for o in runs if _state(o) == State.UNEXPECTEDLY_FAILING]
                held_elsewhere = any(_state(o) == State.HOLDS and not HALF.search(_field(o, "test_id")) for o in runs)
                if claim != "ROPE-11" and held_elsewhere and all(HALF.search(_field(o, "test_id")) for o in failed):
                    found[(claim, encoder)] = ("ROPE-11", HALF_RULE)
        if "ROPE-1" in failing and "ROPE-8" in failing and ("ROPE-8", encoder) not in found:
            found[("ROPE-8", encoder)] = ("ROPE-1", ROTATION_RULE)
        role = (lambda claim: (roles or {}).get(claim, {}).get(encoder))
        verdicts = sorted((c for c in failing
                           if c != CONTRACT and role(c) != "cross-check" and (c, encoder) not in found),
                          key=lambda c: ORDER.get(c, len(ORDER)))
        if verdicts:
            for claim in failing:
                if role(claim) == "cross-check" and (claim, encoder) not in found:
                    found[(claim, encoder)] = (verdicts[0], CROSS_CHECK_RULE)
    return found


def as_json(found: dict[tuple[str, str], tuple[str, str]]) -> dict[str, dict[str, dict[str, str]]]:
    """``{claim: {encoder: {"primary": claim, "rule": why}}}``, as the JSON report keeps it."""
    shown: dict[str, dict[str, dict[str, str]]] = {}
    for (claim, encoder), (primary, rule) in sorted(found.items()):
        shown.setdefault(claim, {})[encoder] = {"primary": primary, "rule": rule}
    return shown


def _field(outcome, name: str):
    return outcome.get(name, "") if isinstance(outcome, dict) else getattr(outcome, name)


def _state(outcome) -> State:
    try:
        return State(_field(outcome, "state"))
    except ValueError:
        return State.CRASHED
