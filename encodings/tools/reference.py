"""The reference pages' generated sections, read from the code itself.

Options and ``POSENC_*`` variables from :func:`posenc.harness.run.options.addoptions`; cell states
from :mod:`posenc.harness.catalogue.states`; record fields from the dataclasses of
:mod:`posenc.harness.catalogue.records` (each field's trailing comment is its description); the claim
catalogue from ``specs/claims.md``; the counts README leads with from the registry, the spec
index and the mutant declarations.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

from posenc.harness.run import options

from posenc.harness.catalogue import records, states
from posenc.harness.catalogue.claims import CLAIMS
from posenc.harness.catalogue.spec_index import spec_functions

CATALOGUE = Path("specs/claims.md")
MUTANTS = Path("tests/mutants")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


class _Options:
    """Stands in for pytest's parser and keeps every ``addoption`` call."""

    def __init__(self):
        self.added: list[tuple[tuple[str, ...], dict]] = []

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.added.append((names, kwargs))


def options_markdown() -> str:
    collected = _Options()
    options.addoptions(collected)
    variable_of = {flag: variable for variable, flag in options.VARIABLES.items() if flag.startswith("--")}
    lines = ["| option | environment variable | default | what it does |", "|---|---|---|---|"]
    for names, kwargs in collected.added:
        flag = names[0]
        shown = flag + (f" {kwargs['metavar']}" if "metavar" in kwargs else "")
        if "choices" in kwargs:
            shown = flag + " " + "|".join(kwargs["choices"])
        default = kwargs.get("default")
        default = "" if default in (None, [], False, "") else f"`{default}`"
        variable = f"`{variable_of[flag]}`" if flag in variable_of else ""
        help_text = kwargs.get("help", "").replace("%%", "%")
        lines.append(f"| `{_cell(shown)}` | {variable} | {default} | {_cell(help_text)} |")
    lines += ["", "Variables without an option:", ""]
    lines += [f"- `{variable}`: {meaning}" for variable, meaning in options.VARIABLES.items()
              if not meaning.startswith("--")]
    return "\n".join(lines) + "\n"


def states_markdown() -> str:
    meanings = states.meanings()
    lines = ["| state | symbol | a person should | meaning |", "|---|---|---|---|"]
    for state in states.State:
        symbol = f"`{states.SYMBOLS[state]}`" if state in states.SYMBOLS else ""
        look = "look at it" if state in states.SURPRISES else ""
        meaning = meanings.get(state.value, "")
        lines.append(f"| `{state.value}` | {symbol} | {look} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


#: The dataclasses a plug-in author fills in, in the order a record is written.
RECORD_CLASSES = (records.EncoderRecord, records.Calling, records.RotaryGeometry, records.Limits,
                  records.Declared, records.Tolerance, records.BuildConfig)
_FIELD = re.compile(r"^    (\w+): ([^=#]+?)(?: = ([^#]+?))?\s*(?:#\s*(.*))?$")


def records_markdown() -> str:
    lines = []
    for cls in RECORD_CLASSES:
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        lines += [f"### `posenc.{cls.__name__}`", "", summary, "", "| field | type | default | meaning |",
                  "|---|---|---|---|"]
        for source_line in inspect.getsource(cls).splitlines():
            match = _FIELD.match(source_line)
            if match and not match.group(1).startswith("_"):
                name, annotation, default, comment = match.groups()
                lines.append(f"| `{name}` | `{_cell(annotation.strip())}` | "
                             f"{'`' + _cell(default.strip()) + '`' if default else 'required'} | "
                             f"{_cell(comment or '')} |")
        lines.append("")
    return "\n".join(lines)


def revisions_markdown() -> str:
    """Each claim's revisions (``posenc.harness.catalogue.claims.REVISIONS``): what its specs stopped deciding,
    when, and which claim decides it now."""
    from posenc.harness.catalogue.claims import REVISIONS

    lines = [*textwrap.wrap("A declaration written for a claim's old meaning reads `unexpectedly holds` after a "
                            "revision; its message names the revision and the claim to declare instead.", 100), "",
             "| claim | date | what changed | decided now by |", "|---|---|---|---|"]
    lines += [f"| {claim} | {r.date} | {r.change} | {r.moved_to or '(no claim)'} |"
              for claim, revisions in REVISIONS.items() for r in revisions]
    return "\n".join(lines) + "\n"


def claims_markdown() -> str:
    """``specs/claims.md`` below its title, its headings one level down (its generated sections as
    text, their markers dropped: each section is placed once, in ``specs/claims.md``)."""
    text = re.sub(r"^<!-- [a-z-]+:(start|end) -->\n", "", CATALOGUE.read_text(), flags=re.MULTILINE)
    body = text.split("\n", 1)[1] if text.startswith("# ") else text
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", body.strip("\n"), flags=re.MULTILINE) + "\n"


def counts_markdown() -> str:
    from posenc.harness.catalogue.builtin_records import BUILTIN_RECORDS
    from posenc.harness.catalogue.published_records import PUBLISHED_RECORDS

    specs = {(s.module, s.name) for s in spec_functions()}
    mutants = sum(len(re.findall(r"^@mutant\(", path.read_text(), re.MULTILINE)) for path in MUTANTS.glob("*.py"))
    text = (f"At a glance: {len(BUILTIN_RECORDS) + len(PUBLISHED_RECORDS)} encoders registered "
            f"({len(BUILTIN_RECORDS)} built-in, {len(PUBLISHED_RECORDS)} transcriptions of the documents' code), "
            f"{len(CLAIMS)} claims and the calling contract, decided by {len(specs)} spec functions; "
            f"{mutants} planted defects (mutants) check that each spec fails when its claim is broken.")
    return "\n".join(textwrap.wrap(text, 100)) + "\n"
