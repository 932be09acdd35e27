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
from posenc.harness.matrix import declared_matrix, render_markdown
from posenc.harness.spec_index import spec_functions


def matrix_markdown() -> str:
    return render_markdown(declared_matrix(BUILTIN_RECORDS))


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


SECTIONS = {"matrix": matrix_markdown, "specs-by-claim": specs_by_claim_markdown}
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


if __name__ == "__main__":
    if "--write" in sys.argv:
        write_readme()
    else:
        for name, render in SECTIONS.items():
            print(f"<!-- {name}:start -->\n{render()}<!-- {name}:end -->\n")
