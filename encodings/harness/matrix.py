"""The verdict matrix: claims × encoders, aggregated from spec outcomes.

Each spec run yields an :class:`Outcome`; a cell aggregates the outcomes of
every spec of one claim on one encoder:

* ``holds``               - every spec passed;
* ``refuted``             - the declared refutation was observed (strict xfail on ClaimViolation);
* ``unexpectedly failing``- a spec raised ClaimViolation where the claim was declared to hold;
* ``unexpectedly holds``  - a declared refutation did not happen;
* ``crashed``             - a spec raised anything but ClaimViolation;
* ``n/a``                 - the claim does not apply to this encoder;
* ``not run``             - it applies, but no spec of it ran (deselected, e.g. ``-m perf``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .claims import CLAIMS, CONTRACT

_PRIORITY = ("crashed", "unexpectedly failing", "unexpectedly holds", "refuted", "holds")
SYMBOLS = {
    "holds": "ok",
    "refuted": "REF",
    "unexpectedly failing": "FAIL",
    "unexpectedly holds": "XPASS",
    "crashed": "CRASH",
    "n/a": ".",
    "not run": "-",
}


@dataclass(frozen=True)
class Outcome:
    claim: str
    encoder: str
    spec: str
    test_id: str
    state: str  # holds | refuted | unexpectedly failing | unexpectedly holds | crashed
    message: str = ""


def aggregate(states: list[str]) -> str:
    for state in _PRIORITY:
        if state in states:
            return state
    return "not run"


def build_matrix(records, outcomes: list[Outcome]) -> dict[str, dict[str, str]]:
    """``{claim: {encoder: state}}`` for every claim and every record."""
    by_cell: dict[tuple[str, str], list[str]] = {}
    for o in outcomes:
        by_cell.setdefault((o.claim, o.encoder), []).append(o.state)
    return {
        claim: {
            r.name: ("n/a" if not r.applies(claim) else aggregate(by_cell.get((claim, r.name), [])))
            for r in records
        }
        for claim in (CONTRACT, *CLAIMS)
    }


def declared_matrix(records) -> dict[str, dict[str, str]]:
    """The matrix a passing run must produce, rendered from the registry's declarations."""
    return {claim: {r.name: r.declared(claim).status for r in records} for claim in (CONTRACT, *CLAIMS)}


def render_markdown(matrix: dict[str, dict[str, str]]) -> str:
    encoders = list(next(iter(matrix.values())))
    lines = [
        "| claim | " + " | ".join(f"`{e}`" for e in encoders) + " |",
        "|---|" + "---|" * len(encoders),
    ]
    for claim, row in matrix.items():
        cells = [f"**{s}**" if s in ("unexpectedly failing", "unexpectedly holds", "crashed") else s for s in row.values()]
        lines.append(f"| {claim} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_text(matrix: dict[str, dict[str, str]]) -> str:
    encoders = list(next(iter(matrix.values())))
    width = max(len(c) for c in matrix)
    cell = max(max(len(s) for s in SYMBOLS.values()), 5)
    header = " " * width + " " + " ".join(f"{i:>{cell}}" for i in range(1, len(encoders) + 1))
    lines = [header]
    for claim, row in matrix.items():
        lines.append(f"{claim:<{width}} " + " ".join(f"{SYMBOLS[s]:>{cell}}" for s in row.values()))
    lines.append("")
    lines += [f"{i:>3} = {name}" for i, name in enumerate(encoders, 1)]
    lines.append("legend: " + ", ".join(f"{v} {k}" for k, v in SYMBOLS.items()))
    return "\n".join(lines)


def write(directory: Path, matrix, outcomes: list[Outcome], header: dict) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "verdicts.json", directory / "verdicts.md"
    payload = {"header": header, "matrix": matrix, "outcomes": [asdict(o) for o in outcomes]}
    json_path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(render_markdown(matrix))
    return json_path, md_path
