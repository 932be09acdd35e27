"""The verdict matrix: claims × encoders, aggregated from spec outcomes.

Each spec run yields an :class:`Outcome`; a cell aggregates the outcomes of
every spec of one claim on one encoder:

* ``holds``               - every spec of the cell ran and passed;
* ``holds (partial)``     - the specs that ran passed, but not all of the cell's specs ran
  (deselected, skipped, or the run was interrupted): never shown as plain ``holds``;
* ``refuted``             - the declared refutation was observed (strict xfail on ClaimViolation);
* ``unexpectedly failing``- a spec raised ClaimViolation where the claim was declared to hold;
* ``unexpectedly holds``  - a declared refutation did not happen;
* ``crashed``             - a spec raised anything but ClaimViolation;
* ``failing and crashed`` - both: one spec found a violation, another crashed (neither hides the other);
* ``timed out``           - a spec ran past its timeout (a crash, named so);
* ``undecided``           - a measured claim whose confidence interval contains its bar;
* ``blocked``             - not judged: the encoder breaks the shape contract, or an earlier
  spec of it timed out (the ``contract`` row, or the timed-out cell, says why);
* ``n/a``                 - the claim does not apply to this encoder (or every spec of the cell
  needs a configuration the record excludes);
* ``not run``             - it applies, but no spec of it ran (deselected, e.g. ``-m perf``).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from .claims import CLAIMS, CONTRACT, HARNESS_CLAIMS, LITERATURE_CLAIMS

_PRIORITY = ("failing and crashed", "crashed", "timed out", "unexpectedly failing", "unexpectedly holds", "blocked", "refuted", "undecided",
             "holds", "excluded")
SURPRISES = ("failing and crashed", "unexpectedly failing", "unexpectedly holds", "crashed", "timed out", "blocked")
SYMBOLS = {
    "holds": "ok",
    "holds (partial)": "ok*",
    "refuted": "REF",
    "unexpectedly failing": "FAIL",
    "unexpectedly holds": "XPASS",
    "crashed": "CRASH",
    "failing and crashed": "F+CR",
    "timed out": "TIME",
    "blocked": "BLOCK",
    "undecided": "?",
    "n/a": ".",
    "not run": "-",
}


@dataclass(frozen=True)
class Outcome:
    claim: str
    encoder: str
    spec: str
    test_id: str
    state: str  # holds | refuted | unexpectedly failing | unexpectedly holds | crashed | timed out | blocked | excluded
    message: str = ""
    reproducer: str = ""  # a pytest command with the drawn values
    python: str = ""  # a standalone script that raises the failure again


def aggregate(states: list[str]) -> str:
    if "crashed" in states and "unexpectedly failing" in states:
        return "failing and crashed"
    for state in _PRIORITY:
        if state in states:
            return state
    return "not run"


def surprise_lines(outcomes: list[Outcome]) -> list[str]:
    """One line per cell with a surprise (FAIL, CRASH, both, XPASS, TIME, BLOCK): its first message
    of each kind, how many specs, and a reproducer."""
    cells: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        if o.state in SURPRISES:
            cells.setdefault((o.claim, o.encoder), []).append(o)
    lines = []
    for (claim, encoder), found in cells.items():
        states = [o.state for o in found]
        shown = aggregate(states)
        firsts = {}
        for o in found:
            firsts.setdefault(o.state, o)
        messages = " | ".join(f"{SYMBOLS[s]}: {o.message}" for s, o in firsts.items())
        specs = len({o.spec for o in found})
        again = next((o.reproducer for o in found if o.reproducer), "")
        lines.append(f"{SYMBOLS[shown]:<5} {claim} on {encoder} ({specs} spec{'s' if specs > 1 else ''}): {messages}"
                     + (f"  ⟶ {again}" if again else ""))
    return lines


def build_matrix(records, outcomes: list[Outcome], expected: dict[tuple[str, str], set[str]] | None = None,
                 complete: bool = True) -> dict[str, dict[str, str]]:
    """``{claim: {encoder: state}}`` for every claim and every record.

    ``expected`` maps a cell to the test ids that were collected for it; a ``holds`` cell with
    fewer outcomes is partial. Without it, every ``holds`` of an incomplete run is partial.
    """
    by_cell: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        by_cell.setdefault((o.claim, o.encoder), []).append(o)

    def cell(claim: str, record) -> str:
        if not record.applies(claim):
            return "n/a"
        ran = by_cell.get((claim, record.name), [])
        state = aggregate([o.state for o in ran])
        if state == "excluded":
            return "n/a"
        if state != "holds":
            return state
        if expected is None:
            return "holds" if complete else "holds (partial)"
        missing = expected.get((claim, record.name), set()) - {o.test_id for o in ran}
        return "holds (partial)" if missing else "holds"

    return {claim: {r.name: cell(claim, r) for r in records} for claim in (CONTRACT, *CLAIMS)}


def roles(records) -> dict[str, dict[str, str]]:
    """``{claim: {encoder: role}}``: ``verdict`` where the documents make the claim about the
    encoder's design, ``cross-check`` where the harness checks it anyway, ``n/a`` elsewhere."""
    return {claim: {r.name: r.role(claim) for r in records} for claim in (CONTRACT, *CLAIMS)}


def declared_matrix(records) -> dict[str, dict[str, str]]:
    """The matrix a passing run must produce, rendered from the registry's declarations."""
    return {claim: {r.name: r.declared(claim).status for r in records} for claim in (CONTRACT, *CLAIMS)}

HARNESS_NOTE = (f"\n{', '.join(LITERATURE_CLAIMS)} are the literature's claims about ALiBi, the length experiment's "
                "baseline. "
                f"{', '.join(HARNESS_CLAIMS)} are the harness's own requirements (equivalent call paths agree), "
                "not claims of the documents.\n")


CROSS_CHECK_NOTE = ("Cross-checks: cells on designs a claim is not about (a RoPE claim on the hybrid, a long-context "
                    "variant or ALiBi). They test this harness's reading of the design, never a verdict on the documents.")


def _markdown_table(matrix, keep) -> list[str]:
    encoders = list(next(iter(matrix.values())))
    lines = ["| claim | " + " | ".join(f"`{e}`" for e in encoders) + " |", "|---|" + "---|" * len(encoders)]
    for claim, row in matrix.items():
        cells = [(f"**{s}**" if s in SURPRISES else s) if keep(claim, e) else "" for e, s in row.items()]
        if any(cells):
            label = f"{claim} (harness)" if claim in HARNESS_CLAIMS else \
                f"{claim} (literature)" if claim in LITERATURE_CLAIMS else claim
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def render_markdown(matrix: dict[str, dict[str, str]], roles_: dict[str, dict[str, str]] | None = None) -> str:
    """The verdicts on the documents' claims; with ``roles_``, the cross-checks in a table of their own."""
    if roles_ is None:
        return "\n".join(_markdown_table(matrix, lambda c, e: True)) + "\n" + HARNESS_NOTE
    verdicts = _markdown_table(matrix, lambda c, e: roles_[c][e] != "cross-check")
    checks = _markdown_table(matrix, lambda c, e: roles_[c][e] == "cross-check")
    return ("\n".join(verdicts) + "\n" + HARNESS_NOTE + "\n#### Cross-checks (not verdicts on the documents)\n\n"
            + CROSS_CHECK_NOTE + "\n\n" + "\n".join(checks) + "\n")


def render_text(matrix: dict[str, dict[str, str]], roles_: dict[str, dict[str, str]] | None = None) -> str:
    """One column per encoder; with ``roles_``, cross-check cells are in parentheses."""
    encoders = list(next(iter(matrix.values())))
    width = max(len(c) for c in matrix)
    cell = max(max(len(s) for s in SYMBOLS.values()) + 2, 5)

    def symbol(claim, encoder, state):
        crossed = roles_ is not None and roles_[claim][encoder] == "cross-check"
        return f"({SYMBOLS[state]})" if crossed else SYMBOLS[state]

    header = " " * width + " " + " ".join(f"{i:>{cell}}" for i in range(1, len(encoders) + 1))
    lines = [header]
    for claim, row in matrix.items():
        lines.append(f"{claim:<{width}} " + " ".join(f"{symbol(claim, e, s):>{cell}}" for e, s in row.items()))
    lines.append("")
    lines += [f"{i:>3} = {name}" for i, name in enumerate(encoders, 1)]
    legend = "legend: " + ", ".join(f"{v} {k}" for k, v in SYMBOLS.items())
    lines += textwrap.wrap(legend, 160, subsequent_indent="        ")
    lines.append("ok* = the specs that ran passed, but not all of the cell's specs ran")
    if roles_ is not None:
        lines.append("(…) = cross-check: the claim is not made about this design; not a verdict on the documents")
    lines.append(HARNESS_NOTE.strip())
    return "\n".join(lines)
