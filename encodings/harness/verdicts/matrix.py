"""The verdict matrix: claims × encoders, aggregated from spec outcomes.

Each spec run yields an :class:`Outcome`; a cell aggregates the outcomes of every spec of one
claim on one encoder (:func:`posenc.harness.catalogue.states.aggregate`, states in :mod:`..catalogue.states`). The
matrix is built once per run (:class:`Matrix`) and read by every report.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass

from ..catalogue.claims import CLAIMS, CONTRACT, HARNESS_CLAIMS, LITERATURE_CLAIMS, MULTIAXIS_CLAIMS
from ..catalogue.states import SURPRISES, SYMBOLS, State, aggregate
from .primary import consequences

@dataclass(frozen=True)
class Outcome:
    claim: str
    encoder: str
    spec: str
    test_id: str
    state: State
    message: str = ""
    reproducer: str = ""  # a pytest command with the drawn values
    python: str = ""  # a standalone script that raises the failure again
    blame: str = ""  # the component at fault where it is not the positions (a NotPositional violation)

    def __post_init__(self):
        object.__setattr__(self, "state", State(self.state))  # a worker's outcome arrives as its value

    def as_dict(self) -> dict:
        """Plain values (the state as its string), as pytest-xdist and JSON carry them."""
        return {**asdict(self), "state": self.state.value}


def surprises(outcomes: list[Outcome], roles_: dict | None = None) -> list[tuple[str, str]]:
    """One (line, rerun command) per cell with a surprise (FAIL, CRASH, both, XPASS, TIME, BLOCK):
    its first message of each kind, how many specs, and a reproducer (empty if none). Primary
    cells first; a failing cell that is a consequence of another (:mod:`.primary`) comes last and
    says which cell it follows."""
    cells: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        if o.state in SURPRISES:
            cells.setdefault((o.claim, o.encoder), []).append(o)
    following = consequences(outcomes, roles_)
    found = []
    # the contract after the claims (a formula defect often also fails it, and the formula's claim
    # says more), and consequences last
    for (claim, encoder), seen in sorted(cells.items(), key=lambda cell: (cell[0] in following,
                                                                          cell[0][0] == CONTRACT)):
        shown = aggregate([o.state for o in seen])
        firsts = {}
        for o in seen:
            firsts.setdefault(o.state, o)
        messages = " | ".join(f"{SYMBOLS[s]}: {o.message}" for s, o in firsts.items())
        specs = len({o.spec for o in seen})
        again = next((o.reproducer for o in seen if o.reproducer), "")
        after = following.get((claim, encoder))
        follows = f" a consequence of {after[0]} ({after[1]}):" if after else ""
        found.append((f"{SYMBOLS[shown]:<5} {claim} on {encoder} ({specs} spec{'s' if specs > 1 else ''}):{follows} "
                      f"{messages}", again))
    return found


def surprise_lines(outcomes: list[Outcome], roles_: dict | None = None) -> list[str]:
    """:func:`surprises` as one line each, the reproducer after an arrow."""
    return [line + (f"  ⟶ {again}" if again else "") for line, again in surprises(outcomes, roles_)]


class Matrix:
    """The claims × encoders matrix of one run, filled as the run goes and read by every report.

    Each cell is keyed by (claim, encoder) from the start: collection names the test ids a cell
    expects (:meth:`expect`), each judged spec adds its outcome (:meth:`add`), and
    :meth:`states` aggregates them. A ``holds`` cell missing any expected test id is partial;
    without expected ids, every ``holds`` of an incomplete run is.
    """

    def __init__(self, records):
        self.records = list(records)
        self.outcomes: list[Outcome] = []
        self._ran: dict[tuple[str, str], list[Outcome]] = {}
        self._expected: dict[tuple[str, str], set[str]] | None = None

    def expect(self, expected: dict[tuple[str, str], set[str]]) -> None:
        """Test ids collected per cell (this process's, or merged from pytest-xdist's workers)."""
        merged = dict(self._expected or {})
        for cell, ids in expected.items():
            merged[cell] = merged.get(cell, set()) | set(ids)
        self._expected = merged

    @property
    def expected(self) -> dict[tuple[str, str], set[str]] | None:
        return self._expected

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        self._ran.setdefault((outcome.claim, outcome.encoder), []).append(outcome)

    def state(self, claim: str, record, complete: bool = True) -> State:
        if not record.applies(claim):
            return State.NA
        ran = self._ran.get((claim, record.name), [])
        state = aggregate([o.state for o in ran])
        if state == State.EXCLUDED:
            return State.NA
        if state != State.HOLDS:
            return state
        if self._expected is None:
            return State.HOLDS if complete else State.HOLDS_PARTIAL
        missing = self._expected.get((claim, record.name), set()) - {o.test_id for o in ran}
        return State.HOLDS_PARTIAL if missing else State.HOLDS

    def states(self, complete: bool = True) -> dict[str, dict[str, State]]:
        """``{claim: {encoder: state}}`` for every claim and every record."""
        return {claim: {r.name: self.state(claim, r, complete) for r in self.records} for claim in (CONTRACT, *CLAIMS)}


def roles(records) -> dict[str, dict[str, str]]:
    """``{claim: {encoder: role}}``: ``verdict`` where the documents make the claim about the
    encoder's design, ``cross-check`` where the harness checks it anyway, ``n/a`` elsewhere."""
    return {claim: {r.name: r.role(claim) for r in records} for claim in (CONTRACT, *CLAIMS)}


def not_applicable(records, cells: dict, outcomes: list[Outcome]) -> dict[str, dict[str, str]]:
    """Why each ``n/a`` cell of a claim about its record's kind does not apply: the record's declared
    reason and its specs' exclusions, ``{claim: {encoder: reason}}``."""
    from ..catalogue.claims import is_subject

    reasons: dict[tuple[str, str], list[str]] = {}
    for record in records:
        for claim, row in cells.items():
            if claim != CONTRACT and is_subject(claim, (record.kind,)) and row.get(record.name) == State.NA:
                declared = record.claims.get(claim)
                reasons[claim, record.name] = [declared.reason] if declared is not None and declared.reason else []
    for outcome in outcomes:
        found = reasons.get((outcome.claim, outcome.encoder))
        said = outcome.message.removeprefix("not applicable: ")
        if found is not None and outcome.state in (State.EXCLUDED, State.NA) and said not in found:
            found.append(said)
    table: dict[str, dict[str, str]] = {}
    for (claim, encoder), said in reasons.items():
        table.setdefault(claim, {})[encoder] = "; ".join(said) or "none of its specs applies to what the record declares"
    return table


def declared_matrix(records) -> dict[str, dict[str, str]]:
    """The matrix a passing run must produce, rendered from the registry's declarations."""
    return {claim: {r.name: r.declared(claim).status for r in records} for claim in (CONTRACT, *CLAIMS)}

HARNESS_NOTE = (f"\n{', '.join(LITERATURE_CLAIMS)} are the literature's claims about ALiBi, the length experiment's "
                f"baseline; {', '.join(MULTIAXIS_CLAIMS)} the literature's about multi-axis RoPE (M-RoPE, 2D). "
                f"{', '.join(HARNESS_CLAIMS)} are the harness's own requirements (equivalent call paths agree; "
                "MODEL: relations of a whole model around its encoding; VLM: of a vision-language model around its "
                "M-RoPE; IDS, PACK, CP: of the code that makes position ids), not claims of the documents.\n")


CROSS_CHECK_NOTE = ("Cross-checks: cells on designs a claim is not about (a RoPE claim on the hybrid, a long-context "
                    "variant or ALiBi). They test this harness's reading of the design, never a verdict on the documents.")


def _markdown_table(matrix, keep) -> list[str]:
    encoders = list(next(iter(matrix.values())))
    shown = [e.replace("|", "\\|").replace("`", "'").replace("\n", " ") for e in encoders]  # one cell each
    lines = ["| claim | " + " | ".join(f"`{e}`" for e in shown) + " |", "|---|" + "---|" * len(encoders)]
    for claim, row in matrix.items():
        cells = [(f"**{s}**" if s in SURPRISES else s) if keep(claim, e) else "" for e, s in row.items()]
        if any(cells):
            label = f"{claim} (harness)" if claim in HARNESS_CLAIMS else \
                f"{claim} (literature)" if claim in LITERATURE_CLAIMS else claim
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def status_line(header: dict) -> str:
    """What a run's report is worth, first: its status, selection and times; a recovery says why."""
    line = (f"**Run {header.get('run_id', '?')}: {header.get('status', '?')}** ({header.get('selection', '?')}; "
            f"started {header.get('started') or '?'}, finished {header.get('finished') or 'never'})")
    if header.get("recovered"):
        why = header.get("report_missing") or "the process died" + (
            f" while {header['crashed_in']['encoder']} ran" if header.get("crashed_in") else "")
        line += f"; recovered from its journal at {header['recovered']}: {why}"
    if header.get("journal_cut"):
        line += f"; {header['journal_cut']}"
    return line + "\n\n"


def render_markdown(matrix: dict[str, dict[str, str]], roles_: dict[str, dict[str, str]] | None = None,
                    header: dict | None = None) -> str:
    """The verdicts on the documents' claims; with ``roles_``, the cross-checks in a table of their
    own; with the report's ``header``, its :func:`status_line` first."""
    first = status_line(header) if header else ""
    if roles_ is None:
        return first + "\n".join(_markdown_table(matrix, lambda c, e: True)) + "\n" + HARNESS_NOTE
    verdicts = _markdown_table(matrix, lambda c, e: roles_[c][e] != "cross-check")
    checks = _markdown_table(matrix, lambda c, e: roles_[c][e] == "cross-check")
    return (first + "\n".join(verdicts) + "\n" + HARNESS_NOTE + "\n#### Cross-checks (not verdicts on the documents)\n\n"
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
