"""Mutant encoders: each reproduces one known defect, so that the specs can show they catch it.

A plug-in file, loaded only on request::

    pytest specs --plugin tests.mutants --encoders <mutant names>

Every mutant is the record of the correct design it imitates, with a broken ``build``: it keeps
that design's declarations, so a spec that catches the defect reports the claim as
"unexpectedly failing" with a ``ClaimViolation`` (a kill). A crash is not a kill.

Each mutant is declared where it is defined, by family (one module each), with the claims it
fails, exactly (``fails=``): a defect fails its own claim and the others the mathematics forces,
which ``why=`` names. ``survives=`` marks a mutant no spec can kill yet, with the missing check.
``EXPECTED_CLAIMS``, ``WHY`` and ``KNOWN_SURVIVORS`` are read off those declarations.
"""

from __future__ import annotations

import posenc

# Each family module declares its mutants on import, in this order (the order of the matrix's columns).
from . import published_snippets, rotary, attention, mixed, absolute, teeth, alibi, multiaxis  # noqa: F401, I001
from ._scaffold import MUTANTS, Mutant

FAMILIES = ("published_snippets", "rotary", "attention", "mixed", "absolute", "teeth", "alibi", "multiaxis")
EXPECTED_CLAIMS: dict[str, set[str]] = {m.record.name: set(m.fails) for m in MUTANTS}
WHY: dict[str, str] = {m.record.name: m.why for m in MUTANTS if m.why}
KNOWN_SURVIVORS: dict[str, str] = {m.record.name: m.survives for m in MUTANTS if m.survives}

__all__ = ["EXPECTED_CLAIMS", "FAMILIES", "KNOWN_SURVIVORS", "MUTANTS", "Mutant", "WHY"]

for _mutant in MUTANTS:
    posenc.register(_mutant.record)
