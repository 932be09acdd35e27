"""README and docs/ stay true: generated sections current, no count or timing typed by hand,
README a front page, every link resolves, the site builds strictly, and README's plug-in example
behaves as described."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.harness.catalogue.states import State
from posenc.tools import docs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_LIMIT = 12 * 1024

#: A count or a measured figure: a number with a unit of time, size or share, or a count of things.
UNITS = (r"(?:s|ms|µs|us|ns|seconds?|minutes?|min|hours?|encoders?|cases|mutants?|specs?|claims?|records?|"
         r"built-ins?|refutations?|cells?|runs?|tests?|plug-ins?|configurations?|libraries|architectures?|rows?|"
         r"columns?|defects?|benchmarks?|alarms?|lines?|KB|MB|MiB|GB|GiB|%|×)")
HAND_TYPED = re.compile(r"(?<![\w.^/-])(?!00[04]\b)\d[\d,.]*(?:\s*(?:to|–|-)\s*\d[\d,.]*)?\s?" + UNITS + r"(?!\w)")


def prose(text: str):
    """(line number, text) of every line outside code blocks and generated sections, code spans removed."""
    fence = generated = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if re.match(r"<!-- [\w-]+:start -->", line):
            generated = True
            continue
        if re.match(r"<!-- [\w-]+:end -->", line):
            generated = False
            continue
        if not (fence or generated):
            yield number, re.sub(r"`[^`]*`", "", line)


def hand_typed(text: str) -> list[str]:
    return [f"{n}: {m.group(0)!r} in {line.strip()[:80]!r}" for n, line in prose(text) for m in HAND_TYPED.finditer(line)]


def test_generated_sections_are_current():
    done = subprocess.run([sys.executable, "-m", "posenc", "docs"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"stale docs (run `python -m posenc docs --write`):\n{done.stdout}{done.stderr}"


def test_every_section_is_placed_and_only_the_counts_twice():
    placed = {name: len(paths) for name, paths in docs.placements(ROOT).items()}
    assert placed.pop("counts") == 2, "README and the docs' home page lead with the counts"
    assert set(placed.values()) == {1}, placed


def test_the_hand_typed_check_has_teeth():
    assert hand_typed("The default run takes 47 s for 34 encoders.") and hand_typed("a 4 MiB regression, 22 %")
    assert not hand_typed("000 §3.2 and 004 §7 at `n = 2048`, head_dim 64\n```\n120 s\n```")


# The claim catalogue quotes the documents' own figures (PERF-1's 1.2 ms): they are the claims, not ours.
@pytest.mark.parametrize("page", [p for p in docs.files(ROOT) if not p.match("specs/claims.md")],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_count_or_timing_is_typed_by_hand(page):
    found = hand_typed(page.read_text())
    assert not found, (f"{page.name}: counts and figures belong in generated sections "
                       f"(encodings/tools/docs.py):\n" + "\n".join(found))


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.encode()) <= README_LIMIT, f"README is {len(text.encode())} bytes, over {README_LIMIT}"
    assert "<!-- matrix:start -->" not in text, "the matrix belongs in docs/findings/documents.md"
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["## Install and run", "## Check your own RoPE", "## Check the RoPE inside your model",
                            "## What a run tells you"], headings


def _links(page: Path):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
            yield target.split("#")[0]


@pytest.mark.parametrize("page", docs.files(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = [t for t in _links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed: pip install -e '.[docs]'")
def test_the_site_builds_strictly_and_offline(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    pages = list((tmp_path / "site").rglob("index.html"))
    assert len(pages) >= len(list((ROOT / "docs").rglob("*.md"))), pages
    remote = [p for p in pages if re.search(r"<script[^>]+src=\"https?://", p.read_text())]
    assert not remote, f"pages load scripts from the network: {remote[:3]}"


def test_the_docs_example_file_is_the_readme_example():
    code = re.search(r"```python\n(# my_rope\.py\n.*?)```", README.read_text(), re.DOTALL).group(1)
    assert (ROOT / "docs" / "examples" / "my_rope.py").read_text() == code


def test_readme_plugin_example_behaves_as_described(tmp_path):
    text = README.read_text()
    code = re.search(r"```python\n(# my_rope\.py\n.*?)```", text, re.DOTALL).group(1)
    plugin = tmp_path / "my_rope.py"
    plugin.write_text(code)
    command = [sys.executable, "-m", "pytest", "specs", "--plugin", str(plugin), "--encoders", "my_rope", "-q",
               "-p", "no:cacheprovider", "--matrix-dir", str(tmp_path / "reports")]
    env = {**os.environ, "POSENC_HYPOTHESIS_PROFILE": "triage"}
    subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    matrix = json.loads((tmp_path / "reports" / "verdicts.json").read_text())["matrix"]
    row = {claim: cells["my_rope"] for claim, cells in matrix.items()}
    assert row.pop("contract") == State.REFUTED
    assert row.pop("ROPE-13") == State.REFUTED
    assert {state for state in row.values()} <= {State.HOLDS, State.NA, State.NOT_RUN}, row
    assert (tmp_path / "reports" / "verdicts.html").exists()
