"""The generated sections of README.md and docs/: every count, table and measured figure there.

A section lies between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in any Markdown file
of :data:`FILES`; :data:`SECTIONS` renders each from the code, the registry or a committed
measurement file. ``python -m posenc docs`` names the stale sections (exit 1 if any),
``--write`` rewrites them (run it from the repository root); ``tests/test_docs.py`` fails when
a section drifts, and when prose outside the sections types a count or a timing by hand. The
declared matrix equals the observed one on a passing run: strict expected failures enforce
every declared refutation, and every "holds" is a passing spec.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from posenc.harness.catalogue.builtin_records import BUILTIN_RECORDS
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.verdicts.matrix import declared_matrix, render_markdown, roles
from posenc.harness.catalogue.spec_index import spec_functions
from posenc.harness.catalogue.states import State
from posenc.tools import cli
from posenc.tools.perf_figures import documents_table_markdown, perf_table_markdown, run_summary_markdown, run_table_markdown, write_measurements
from posenc.tools import model_benchmark, precision, reference, suite_benchmark


def matrix_markdown() -> str:
    """The documents' declared matrix: the multi-axis encoders and claims have a page of their own."""
    from posenc.harness.catalogue.claims import MULTIAXIS_CLAIMS
    from posenc.harness.catalogue.published_records import PUBLISHED_RECORDS

    records = [r for r in (*BUILTIN_RECORDS, *PUBLISHED_RECORDS) if r.group != "multiaxis"]
    documents = {claim: row for claim, row in declared_matrix(records).items() if claim not in MULTIAXIS_CLAIMS}
    return render_markdown(documents, roles(records))


def multiaxis_matrix_markdown() -> str:
    """The multi-axis encoders' declared cells: their claims, and the rotary claims at equal ids."""
    records = [r for r in BUILTIN_RECORDS if r.group == "multiaxis"]
    declared = {claim: row for claim, row in declared_matrix(records).items()
                if any(r.applies(claim) for r in records)}
    return render_markdown(declared, roles(records))


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
        return f"{State.HOLDS}: {declared.reason}" if declared.reason else State.HOLDS
    if declared.status == State.NA:
        return f"n/a ({declared.reason})"
    where = f" in {', '.join(str(d).removeprefix('torch.') for d in declared.dtypes)}" if declared.dtypes else ""
    return f"**refuted**{where}: {declared.reason}"


def findings_markdown() -> str:
    """The documents' verdicts: each claim's cells on the ``published_*`` encoders it is about, then
    what the corrected design (the record each one ``corrects``) changes."""
    from posenc.harness.catalogue.claims import NOT_DECIDABLE, SUBJECTS
    from posenc.harness.catalogue.declarations import EXPERIMENT_CELLS
    from posenc.harness.catalogue.published_records import PUBLISHED_RECORDS
    from posenc.harness.catalogue.registry import get

    lines = ["| claim | published code | verdict on the published code | the corrected design |", "|---|---|---|---|"]
    for claim in CLAIMS:
        if claim in EXPERIMENT_CELLS:  # trained models, not a snippet's output
            record = get(EXPERIMENT_CELLS[claim])
            lines.append(f"| {claim} | — | decided by the length experiment (`-m slow`), which trains this project's "
                         f"implementation of the design | `{record.name}`: {_cell(record, claim)} |")
            continue
        if claim.startswith(("ALIBI-", "PATH-", "MROPE-")):
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


IDENTIFY_EXAMPLE = ("docs/examples/hf_llama3_rope.py:rope", "--protocol", "cos_sin", "--apply", "apply",
                    "--head-dim", "128")


class SectionUnavailable(RuntimeError):
    """A section that needs what this environment lacks (the ecosystem extra): kept as it is."""


def identify_example_markdown() -> str:
    """identify's report on transformers' Llama 3.1 RoPE (the ecosystem extra), up to its plug-in file."""
    if importlib.util.find_spec("transformers") is None:
        raise SectionUnavailable("identify-example needs transformers: pip install -e '.[ecosystem]'")
    done = subprocess.run([sys.executable, "-m", "posenc", "identify", *IDENTIFY_EXAMPLE], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COLUMNS": "100"})  # the page's width
    if done.returncode:
        raise RuntimeError(f"identify failed: {done.stderr.strip().splitlines()[-1:]}")
    report = done.stdout.split("\n# save as a plug-in file")[0].rstrip("\n")
    return ("```text\n$ python -m posenc identify " + " ".join(IDENTIFY_EXAMPLE) + "\n" + report
            + "\n…  (then the plug-in file registering the identified record)\n```\n")


def model_table_markdown() -> str:
    from posenc.ecosystem.findings import model_table_markdown as table

    return table()


def ecosystem_table_markdown() -> str:
    from posenc.ecosystem.findings import table_markdown

    return table_markdown()


LENGTH_EXPERIMENT = Path("docs/measurements/length-experiment.json")


def length_experiment_markdown(path: Path = LENGTH_EXPERIMENT) -> str:
    """The committed run's tables and verdicts (``results.md`` below its title, headings one level down)."""
    from posenc.experiments.length_extrapolation.outputs import markdown_report

    report = markdown_report(json.loads(Path(path).read_text())).split("\n", 1)[1]
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", report.strip("\n"), flags=re.MULTILINE) + "\n"


#: Sections whose figures are measured, not derived: they may differ in the last digits between runs.
MEASURED = {"precision", "identify-example"}

SECTIONS = {
    "counts": reference.counts_markdown,
    "matrix": matrix_markdown,
    "multiaxis-matrix": multiaxis_matrix_markdown,
    "fixes": fixes_markdown,
    "findings": findings_markdown,
    "specs-by-claim": specs_by_claim_markdown,
    "perf-table": perf_table_markdown,
    "documents-table": documents_table_markdown,
    "options": reference.options_markdown,
    "states": reference.states_markdown,
    "records": reference.records_markdown,
    "claims": reference.claims_markdown,
    "revisions": reference.revisions_markdown,
    "precision": precision.precision_markdown,
    "identify-example": identify_example_markdown,
    "ecosystem-table": ecosystem_table_markdown,
    "model-table": model_table_markdown,
    "model-budget": model_benchmark.budget_markdown,
    "length-experiment": length_experiment_markdown,
    "suite-benchmark": suite_benchmark.table_markdown,
    "suite-summary": suite_benchmark.summary_markdown,
    "perf-run": run_table_markdown,
    "perf-summary": run_summary_markdown,
}
README = Path("README.md")
DOCS = Path("docs")


def files(root: Path = Path(".")) -> list[Path]:
    """README.md, the claim catalogue and every Markdown page of docs/, relative to ``root``."""
    return [root / README, root / reference.CATALOGUE, *sorted((root / DOCS).rglob("*.md"))]


def section_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.DOTALL)


def readme_section(text: str, name: str) -> str:
    match = section_pattern(name).search(text)
    if match is None:
        raise ValueError(f"no section markers for {name!r}")
    return match.group(2)


def placements(root: Path = Path(".")) -> dict[str, list[Path]]:
    """``{section: the files that hold it}`` for every section of :data:`SECTIONS`."""
    found: dict[str, list[Path]] = {name: [] for name in SECTIONS}
    for path in files(root):
        text = path.read_text()
        for name in SECTIONS:
            if section_pattern(name).search(text):
                found[name].append(path)
    return found


def render_all() -> tuple[dict[str, str], list[str]]:
    """Every section this environment can render, and why the others cannot be."""
    rendered, unavailable = {}, []
    for name, render in SECTIONS.items():
        try:
            rendered[name] = render()
        except SectionUnavailable as why:
            unavailable.append(str(why))
    return rendered, unavailable


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def same(name: str, written: str, rendered: str) -> bool:
    """Equal text; for a :data:`MEASURED` section, the same words and figures within a factor 2."""
    if written == rendered or name not in MEASURED:
        return written == rendered
    if _NUMBER.sub("#", written) != _NUMBER.sub("#", rendered):
        return False
    pairs = zip(map(float, _NUMBER.findall(written)), map(float, _NUMBER.findall(rendered)))
    return all(a == b or (a * b > 0 and 0.5 <= a / b <= 2) or max(abs(a), abs(b)) < 1e-6 for a, b in pairs)


def stale(root: Path = Path(".")) -> list[str]:
    """``FILE: section NAME`` for every generated section that differs from what the code renders."""
    rendered, _ = render_all()
    out = []
    for name, paths in placements(root).items():
        for path in paths:
            if name in rendered and not same(name, readme_section(path.read_text(), name), rendered[name]):
                out.append(f"{path}: section {name}")
    return out


def write_docs(root: Path = Path(".")) -> list[Path]:
    """Rewrite every generated section this environment can render; returns the files that changed."""
    rendered, unavailable = render_all()
    for why in unavailable:
        print(f"kept as it is: {why}", file=sys.stderr)
    changed = []
    for path in files(root):
        text = original = path.read_text()
        for name, body in rendered.items():
            text = section_pattern(name).sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
        if text != original:
            path.write_text(text)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc docs",
                                description="Check (or --write) the generated sections of README.md and docs/ "
                                            "(run from the repository root).")
    parser.add_argument("--write", action="store_true", help="rewrite every generated section in place")
    parser.add_argument("--print", dest="show", metavar="SECTION", choices=sorted(SECTIONS),
                        help="print one section as it would be written")
    parser.add_argument("--ecosystem-json", metavar="VERDICTS.json", type=Path,
                        help="first keep the matrix of this ecosystem run (pytest specs --plugin posenc.ecosystem "
                             "--encoders ...) in docs/measurements/ecosystem-matrix.json, for the findings table")
    parser.add_argument("--model-json", metavar="VERDICTS.json", type=Path,
                        help="first keep the matrix of this model run (pytest specs --plugin posenc.ecosystem "
                             "--encoders 'lm_*') in docs/measurements/model-matrix.json, for the model findings")
    parser.add_argument("--perf-json", metavar="BENCH.json", type=Path,
                        help="first keep the measured benchmarks of this pytest-benchmark JSON (pytest specs -m perf "
                             "--benchmark-json BENCH.json) in docs/measurements/perf-cpu.json, for the perf tables")
    args = parser.parse_args(argv)
    if args.perf_json:
        print(f"measurements kept in {write_measurements(args.perf_json)}", file=sys.stderr)
    if args.ecosystem_json:
        from posenc.ecosystem.findings import MEASURED, kept_matrix

        kept = kept_matrix(json.loads(args.ecosystem_json.read_text()))
        Path(MEASURED).write_text(json.dumps(kept, indent=1) + "\n")
        print(f"ecosystem matrix kept in {MEASURED}", file=sys.stderr)
    if args.model_json:
        from posenc.ecosystem.findings import MODEL_MEASURED, kept_matrix

        kept = kept_matrix(json.loads(args.model_json.read_text()))
        Path(MODEL_MEASURED).write_text(json.dumps(kept, indent=1) + "\n")
        print(f"model matrix kept in {MODEL_MEASURED}", file=sys.stderr)
    if args.show:
        print(SECTIONS[args.show](), end="")
        return 0
    if args.write:
        for path in write_docs():
            print(f"rewritten: {path}")
        return 0
    missing = [name for name, paths in placements().items() if not paths]
    out_of_date = stale()
    for line in out_of_date:
        print(f"stale: {line} (python -m posenc docs --write)")
    for name in missing:
        print(f"unplaced: section {name} is in no file")
    if not (out_of_date or missing):
        print(f"every generated section is current ({sum(map(len, placements().values()))} in {len(files())} files)")
    return 1 if out_of_date or missing else 0


if __name__ == "__main__":
    sys.exit(main())
