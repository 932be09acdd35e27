"""The one vocabulary of verdict states: declared, judged, aggregated into a cell, rendered.

A record *declares* each claim ``holds``, ``refuted`` or ``n/a`` (:class:`~.records.Declared`).
A spec run is *judged* into one state (:mod:`..cases.judge`); a cell aggregates the states of its
specs (:func:`aggregate`); the reports render them (:data:`SYMBOLS`). Every module says these
states through :class:`State`; ``tests/test_layout.py`` checks that no other module spells one
as a string.

* ``holds``               - every spec of the cell ran and passed;
* ``holds (partial)``     - the specs that ran passed, but not all of the cell's specs ran
  (deselected, skipped, or the run was interrupted): never shown as plain ``holds``;
* ``refuted``             - the declared refutation was observed (a ClaimViolation);
* ``unexpectedly failing``- a spec raised ClaimViolation where the claim was declared to hold;
* ``unexpectedly holds``  - a declared refutation did not happen;
* ``crashed``             - a spec raised anything but ClaimViolation;
* ``failing and crashed`` - both: one spec found a violation, another crashed (neither hides the other);
* ``timed out``           - a spec ran past its timeout (a crash, named so);
* ``undecided``           - a measured claim whose confidence interval contains its bar;
* ``depends on ROPE-9``   - a violation found on an encoder whose output depends on its earlier
  calls: the spec's repeated calls alone may explain it, so it is not judged (ROPE-9 is failed once);
* ``blocked``             - not judged: the encoder breaks the shape contract, or an earlier
  spec of it timed out (the ``contract`` row, or the timed-out cell, says why);
* ``excluded``            - one spec needs a configuration the record excludes (a cell of only
  these reads ``n/a``);
* ``n/a``                 - the claim does not apply to this encoder;
* ``not run``             - it applies, but no spec of it ran (deselected, e.g. ``-m perf``);
* ``not decidable``       - an experiment's rule cannot decide the claim with the data it has.
"""

from __future__ import annotations

import enum
import re


class State(str, enum.Enum):
    HOLDS = "holds"
    HOLDS_PARTIAL = "holds (partial)"
    REFUTED = "refuted"
    UNEXPECTEDLY_FAILING = "unexpectedly failing"
    UNEXPECTEDLY_HOLDS = "unexpectedly holds"
    CRASHED = "crashed"
    FAILING_AND_CRASHED = "failing and crashed"
    TIMED_OUT = "timed out"
    UNDECIDED = "undecided"
    DEPENDS_ON_HISTORY = "depends on ROPE-9"
    BLOCKED = "blocked"
    EXCLUDED = "excluded"
    NA = "n/a"
    NOT_RUN = "not run"
    NOT_DECIDABLE = "not decidable"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: What a record may declare for a claim.
DECLARABLE = (State.HOLDS, State.REFUTED, State.NA)

#: The state of a cell is the first of these among its specs' states.
PRIORITY = (State.FAILING_AND_CRASHED, State.CRASHED, State.TIMED_OUT, State.UNEXPECTEDLY_FAILING,
            State.UNEXPECTEDLY_HOLDS, State.BLOCKED, State.DEPENDS_ON_HISTORY, State.REFUTED, State.UNDECIDED, State.HOLDS,
            State.EXCLUDED)

#: States a person must look at: one summary line each.
SURPRISES = (State.FAILING_AND_CRASHED, State.UNEXPECTEDLY_FAILING, State.UNEXPECTEDLY_HOLDS, State.CRASHED,
             State.TIMED_OUT, State.BLOCKED)

#: The matrix's symbol for each cell state.
SYMBOLS = {
    State.HOLDS: "ok",
    State.HOLDS_PARTIAL: "ok*",
    State.REFUTED: "REF",
    State.UNEXPECTEDLY_FAILING: "FAIL",
    State.UNEXPECTEDLY_HOLDS: "XPASS",
    State.CRASHED: "CRASH",
    State.FAILING_AND_CRASHED: "F+CR",
    State.TIMED_OUT: "TIME",
    State.BLOCKED: "BLOCK",
    State.UNDECIDED: "?",
    State.DEPENDS_ON_HISTORY: "dep",
    State.NA: ".",
    State.NOT_RUN: "-",
}


def meanings() -> dict[str, str]:
    """Each state's meaning, read from the bullet list of this module's docstring (its one source)."""
    found = re.finditer(r"^\* ``(.+?)``\s*-\s*(.+?)(?=^\* |\Z)", __doc__ or "", re.M | re.S)
    return {m.group(1): " ".join(m.group(2).replace("``", "`").split()).rstrip(";.") for m in found}


def aggregate(states) -> State:
    """The state of a cell from the states of its specs' runs."""
    states = {State(s) for s in states}
    if State.CRASHED in states and State.UNEXPECTEDLY_FAILING in states:
        return State.FAILING_AND_CRASHED
    for state in PRIORITY:
        if state in states:
            return state
    return State.NOT_RUN
