"""Generated README sections: the declared verdict matrix and the specs deciding each claim.

``python -m posenc.tools.readme`` prints both; ``--write`` updates ``README.md`` in the current
directory (run it from the repository root). ``tests/test_readme.py`` keeps README in sync. The
declared matrix equals the observed one on a passing run: strict expected failures enforce
every declared refutation, and every "holds" is a passing spec.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from posenc.harness.builtin_records import BUILTIN_RECORDS
from posenc.harness.claims import CLAIMS, CONTRACT
from posenc.harness.matrix import declared_matrix, render_markdown, roles
from posenc.harness.spec_index import spec_functions
from posenc.harness.states import State
from posenc.tools import cli
from posenc.tools.perf_figures import perf_table_markdown, write_measurements


def matrix_markdown() -> str:
    from posenc.harness.published_records import PUBLISHED_RECORDS

    records = (*BUILTIN_RECORDS, *PUBLISHED_RECORDS)
    return render_markdown(declared_matrix(records), roles(records))


def specs_by_claim_markdown() -> str:
    specs = spec_functions()
    lines = ["| claim | statement | decided by |", "|---|---|---|"]
    for claim in (CONTRACT, *CLAIMS):
        names = sorted({f"`{s.module}::{s.name}`"
                        + (f" ({', '.join(s.markers)})" if s.markers else "")
                        + ("" if s.takes_record else " (demonstration, outside the matrix)")
                        for s in specs if s.claim == claim})
        statement = CLAIMS.get(claim, "calling contract: shape, dtype, device, bad input, gradients")
        lines.append(f"| {claim} | {statement} | {'<br>'.join(names)} |")
    return "\n".join(lines) + "\n"


def _cell(record, claim) -> str:
    declared = record.declared(claim)
    if declared.status == State.HOLDS:
        return State.HOLDS
    if declared.status == State.NA:
        return f"n/a ({declared.reason})"
    where = f" in {', '.join(str(d).removeprefix('torch.') for d in declared.dtypes)}" if declared.dtypes else ""
    return f"**refuted**{where}: {declared.reason}"


def findings_markdown() -> str:
    """The documents' verdicts: each claim's cells on the ``published_*`` encoders it is about, then
    what the corrected design (the record each one ``corrects``) changes."""
    from posenc.harness.claims import NOT_DECIDABLE, SUBJECTS
    from posenc.harness.declarations import EXPERIMENT_CELLS
    from posenc.harness.published_records import PUBLISHED_RECORDS
    from posenc.harness.registry import get

    lines = ["| claim | published code | verdict on the published code | the corrected design |", "|---|---|---|---|"]
    for claim in CLAIMS:
        if claim in EXPERIMENT_CELLS:  # trained models, not a snippet's output
            record = get(EXPERIMENT_CELLS[claim])
            lines.append(f"| {claim} | — | decided by the length experiment (`-m slow`), which trains this project's "
                         f"implementation of the design | `{record.name}`: {_cell(record, claim)} |")
            continue
        if claim.startswith(("ALIBI-", "PATH-")):
            continue  # the literature's and the harness's own claims, not the documents'

        subjects = [r for r in PUBLISHED_RECORDS if set(r.designs) & set(SUBJECTS[claim])]
        if not subjects or claim in NOT_DECIDABLE:
            why = NOT_DECIDABLE.get(claim) or (
                f"no published snippet implements {', '.join(SUBJECTS[claim])}; decided on this project's "
                "implementation (see the matrix)")
            lines.append(f"| {claim} | — | not decided from published code: {why} | |")
            continue
        for record in subjects:
            corrected = get(record.corrects)
            change = _cell(corrected, claim)
            lines.append(f"| {claim} | `{record.name}` ({record.source}) | {_cell(record, claim)} | "
                         f"`{corrected.name}`: {change} |")
    return "\n".join(lines) + "\n"


def fixes_markdown() -> str:
    """Every change made to the published snippets, with the error the published line raises."""
    from posenc.encoders.published import doc000, doc004

    lines = ["| snippet | class | change (a `FIX` line) | the published line raises |", "|---|---|---|---|"]
    lines += [f"| {s} | `{c}` | {change} | `{error}` |" for s, c, change, error in doc000.FIXES + doc004.FIXES]
    return "\n".join(lines) + "\n"


SECTIONS = {"matrix": matrix_markdown, "fixes": fixes_markdown, "findings": findings_markdown,
            "specs-by-claim": specs_by_claim_markdown, "perf-table": perf_table_markdown}
README = Path("README.md")


def section_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.DOTALL)


def readme_section(text: str, name: str) -> str:
    match = section_pattern(name).search(text)
    if match is None:
        raise ValueError(f"README has no section markers for {name!r}")
    return match.group(2)


def write_readme(readme: Path = README) -> None:
    text = readme.read_text()
    for name, render in SECTIONS.items():
        readme_section(text, name)
        text = section_pattern(name).sub(lambda m, body=render(): m.group(1) + body + m.group(3), text)
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc readme",
                                     description="Print README's generated sections (run from the repository root).")
    parser.add_argument("--write", action="store_true", help="write them between their markers in README.md")
    parser.add_argument("--perf-json", metavar="BENCH.json", type=Path,
                        help="first keep the measured benchmarks of this pytest-benchmark JSON (pytest specs -m perf "
                             "--benchmark-json BENCH.json) in docs/measurements/perf-cpu.json, for the perf table")
    args = parser.parse_args(argv)
    if args.perf_json:
        print(f"measurements kept in {write_measurements(args.perf_json)}", file=sys.stderr)
    if args.write:
        write_readme()
        return 0
    for name, render in SECTIONS.items():
        print(f"<!-- {name}:start -->\n{render()}<!-- {name}:end -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
