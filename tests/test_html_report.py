"""``verdicts.html`` shows exactly what ``verdicts.json`` says: every cell once with its state, every
outcome with its message and rerun command, only in-page links, and a run that is not complete says so first.

One small real run (``pytest specs`` with a defective plug-in RoPE, so that the report holds a
surprise with a reproducer) feeds the page checks; hand-built payloads check escaping and the status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from posenc.harness.verdicts import reports
from posenc.harness.catalogue.claims import CLAIMS
from posenc.harness.verdicts.html_report import render_html, state_class, state_descriptions, symbol
from posenc.harness.catalogue.states import SURPRISES, State
from posenc.tools import screenshot

pytestmark = pytest.mark.xdist_group("html_report")  # the module's run happens once, in one worker
ROOT = Path(__file__).resolve().parents[1]
SMALL_RUN = ["specs", "--plugin", "tests/plugins/defective_ropes.py",
             "--encoders", "rope_half_split,alibi,published_rope,bug_offset_in_input_dtype",
             "-k", "orthogonal or relative or offset_path", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
OUTCOME_FIELDS = ("claim", "encoder", "spec", "test_id", "state", "message", "reproducer", "python")


class Page(HTMLParser):
    """What the tests read of a page: ids, links, tables' cells, scripts' text and the visible text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.tags: Counter = Counter()
        self.tables: dict[str, list[list[tuple[dict, str]]]] = {}
        self.scripts: dict[str, str] = {}
        self.text: list[str] = []
        self._tables: list[str] = []
        self._cell: tuple[dict, list[str]] | None = None
        self._script: str | None = None
        self._skipped: str | None = None  # inside <style> or <title>: not the page's visible text
        self.title = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.tags[tag] += 1
        if "id" in attributes:
            self.ids.append(attributes["id"])
        if tag == "a" and "href" in attributes:
            self.hrefs.append(attributes["href"])
        if tag == "table":
            self._tables.append(attributes.get("id", ""))
            self.tables.setdefault(self._tables[-1], [])
        elif tag == "tr" and self._tables:
            self.tables[self._tables[-1]].append([])
        elif tag in ("td", "th") and self._tables:
            self._cell = ({**attributes, "tag": tag}, [])
        elif tag == "script":
            self._script = attributes.get("id", "")
            self.scripts[self._script] = ""
        elif tag in ("style", "title"):
            self._skipped = tag

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            attributes, text = self._cell
            self.tables[self._tables[-1]][-1].append((attributes, "".join(text).strip()))
            self._cell = None
        elif tag == "table" and self._tables:
            self._tables.pop()
        elif tag == "script":
            self._script = None
        elif tag == self._skipped:
            self._skipped = None

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[self._script] += data
            return
        if self._skipped is not None:
            self.title += data if self._skipped == "title" else ""
            return
        if self._cell is not None:
            self._cell[1].append(data)
        self.text.append(data)

    @property
    def visible_text(self) -> str:
        return " ".join(" ".join(self.text).split())

    def cells(self, table: str, attribute: str) -> list[tuple[dict, str]]:
        """The ``<td>`` elements of ``table`` that carry ``attribute``."""
        return [(a, t) for row in self.tables.get(table, []) for a, t in row if a["tag"] == "td" and attribute in a]


def shown_symbol(state: str, role: str) -> str:
    return f"({symbol(state)})" if role == "cross-check" else symbol(state)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("html_run")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    done = subprocess.run([sys.executable, "-m", "pytest", *SMALL_RUN, "--matrix-dir", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert (out / "verdicts.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads((out / "verdicts.json").read_text())
    return out, payload, (out / "verdicts.html").read_text()


def test_a_real_run_writes_the_page_next_to_each_json(small_run):
    out, payload, _ = small_run
    run_dir = out / "runs" / payload["header"]["run_id"]
    assert (run_dir / "verdicts.html").read_text() == (out / "verdicts.html").read_text()
    assert (out / "verdicts.html").stat().st_size > 1000


def test_every_matrix_cell_appears_once_with_its_state(small_run):
    _, payload, text = small_run
    page = Page(text)
    cells = page.cells("matrix-table", "data-claim")
    seen = Counter((a["data-claim"], a["data-encoder"]) for a, _ in cells)
    expected = {(claim, encoder) for claim, row in payload["matrix"].items() for encoder in row}
    assert set(seen) == expected and set(seen.values()) == {1}
    states = {state for row in payload["matrix"].values() for state in row.values()}
    assert {State.HOLDS, State.REFUTED, State.UNEXPECTEDLY_FAILING, State.NA} <= states  # the run is a mix
    for attributes, shown in cells:
        claim, encoder = attributes["data-claim"], attributes["data-encoder"]
        state, role = payload["matrix"][claim][encoder], payload["roles"][claim][encoder]
        assert attributes["data-state"] == state and attributes["data-role"] == role, (claim, encoder)
        assert state_class(state) in attributes["class"].split() and shown == shown_symbol(state, role)
    heads = {a["data-claim"]: a["title"] for row in page.tables["matrix-table"] for a, _ in row
             if a["tag"] == "th" and "data-claim" in a}
    assert list(heads) == list(payload["matrix"])
    assert all(CLAIMS[c] in title for c, title in heads.items() if c in CLAIMS)
    rows = [a["data-encoder"] for a, _ in cells if a["data-claim"] == next(iter(payload["matrix"]))]
    kinds = list(dict.fromkeys(payload["kinds"][e] for e in payload["header"]["encoders"]))
    assert rows == [e for kind in kinds for e in payload["header"]["encoders"] if payload["kinds"][e] == kind]


def test_every_outcome_is_embedded_with_its_message_and_rerun_command(small_run):
    _, payload, text = small_run
    embedded = json.loads(Page(text).scripts["outcomes"])
    assert Counter(tuple(o[f] for f in OUTCOME_FIELDS) for o in embedded) == \
        Counter(tuple(o[f] for f in OUTCOME_FIELDS) for o in payload["outcomes"])
    assert all(o["rerun"] == (o["reproducer"] or f'pytest "{o["test_id"]}"') for o in embedded)
    failing = [o for o in embedded if o["state"] == State.UNEXPECTEDLY_FAILING]
    assert failing and all(o["message"] and o["reproducer"] and o["python"] for o in failing)


def test_every_link_is_an_in_page_anchor_that_resolves(small_run):
    _, _, text = small_run
    page = Page(text)
    assert len(page.ids) == len(set(page.ids)), [i for i, n in Counter(page.ids).items() if n > 1]
    assert page.hrefs and all(h.startswith("#") for h in page.hrefs), [h for h in page.hrefs if not h.startswith("#")]
    assert [h for h in page.hrefs if unquote(h[1:]) not in page.ids] == []
    assert "http://" not in text and "https://" not in text and "<link" not in text and "src=" not in text


def test_the_header_surprises_and_documents_verdicts_are_shown(small_run):
    _, payload, text = small_run
    page = Page(text)
    header = payload["header"]
    shown = page.visible_text
    assert f"Status: {header['status']}" in shown and header["selection"] in shown and header["run_id"] in shown
    assert header["torch"] in shown and header["started"] in shown and header["device"] in shown
    surprising = [(c, e) for c, row in payload["matrix"].items() for e, s in row.items() if s in SURPRISES]
    assert surprising
    for claim, encoder in surprising:
        assert f"{claim} on {encoder}" in shown
        first = next(o for o in payload["outcomes"] if (o["claim"], o["encoder"]) == (claim, encoder)
                     and o["state"] in SURPRISES)
        assert " ".join(first["message"].split()) in shown
    published = {(row[0][1], row[2][1], row[3][0]["data-state"]) for row in page.tables["published-table"][1:]}
    assert published == {(c, e, s) for c, row in payload["matrix"].items() for e, s in row.items()
                         if e.startswith("published_") and payload["roles"][c][e] == "verdict"}
    assert all(state in shown for state in State)  # the legend


# ---------------------------------------------------------------- hand-built payloads

def hand_built(status: str = "interrupted", selection: str = "full") -> dict:
    odd = 'odd "<enc>" & co'
    message = "</script><b>bold</b> & <!-- not a comment"
    return {
        "header": {"status": status, "selection": selection, "run_id": "20260101-000000-1",
                   "started": "2026-01-01T00:00:00+0000", "finished": "2026-01-01T00:01:00+0000",
                   "command": ["pytest", "specs", "-k", "x"], "encoders": [odd, "published_rope"], "plugins": [],
                   "device": "cpu", "torch": "2.x", "libraries": {"lib": "1.0"}, "python": "3.11",
                   "hypothesis_profile": "dev", "outcomes": 2},
        "matrix": {"ROPE-3": {odd: State.CRASHED.value, "published_rope": State.HOLDS_PARTIAL.value},
                   "ROPE-4": {odd: State.NA.value, "published_rope": State.REFUTED.value}},
        "roles": {"ROPE-3": {odd: "cross-check", "published_rope": "verdict"},
                  "ROPE-4": {odd: State.NA.value, "published_rope": "verdict"}},
        "outcomes": [
            {"claim": "ROPE-3", "encoder": odd, "spec": "test_norm", "test_id": "specs/t.py::test_norm[x]",
             "state": State.CRASHED.value, "message": message, "reproducer": "",
             "python": "print('</script>')\n"},
            {"claim": "ROPE-4", "encoder": "published_rope", "spec": "test_rel", "test_id": "specs/t.py::test_rel",
             "state": State.REFUTED.value, "message": "depends on m", "reproducer": "pytest 'specs/t.py::test_rel'",
             "python": ""},
        ],
    }


def test_text_is_escaped_everywhere():
    payload = hand_built()
    text = render_html(payload)
    page = Page(text)
    assert "</script><b>" not in text and 'odd "<enc>"' not in text
    assert page.tags["script"] == 3 and set(page.scripts) == {"outcomes", "state-descriptions", ""}
    assert json.loads(page.scripts["outcomes"])[0]["message"] == payload["outcomes"][0]["message"]
    assert json.loads(page.scripts["outcomes"])[0]["python"] == "print('</script>')\n"
    assert "</script><b>bold</b> & <!-- not a comment" in page.visible_text  # shown as text, in the surprises
    cells = {(a["data-claim"], a["data-encoder"]): a for a, _ in page.cells("matrix-table", "data-claim")}
    assert set(cells) == {(c, e) for c, row in payload["matrix"].items() for e in row}  # no kinds: one group
    assert [h for h in page.hrefs if unquote(h[1:]) not in page.ids] == [] and len(page.ids) == len(set(page.ids))
    assert 'pytest "specs/t.py::test_norm[x]"' in page.scripts["outcomes"].replace('\\"', '"')


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_a_run_that_is_not_complete_says_so_first(status):
    page = Page(render_html(hand_built(status)))
    shown = page.visible_text
    assert shown.startswith(f"This run is {status.upper()} (status: {status})")
    assert "not a complete verdict" in shown[:shown.index("Verdicts run")]
    assert page.ids[0] == "status" and status.upper() in page.title


def test_a_partial_selection_is_named_at_the_top():
    shown = Page(render_html(hand_built("complete", "partial selection (-k 'x')"))).visible_text
    assert shown.index("partial selection (-k 'x')") < shown.index("Verdicts run")
    assert "INTERRUPTED" not in shown and "Status: complete" in shown


def test_every_state_has_a_colour_class_a_symbol_and_a_description():
    descriptions = state_descriptions()
    assert all(descriptions.get(s.value) and symbol(s.value) for s in State)
    assert len({state_class(s.value) for s in State}) == len(State)
    css = render_html(hand_built())
    assert all(f".{state_class(s.value)} {{" in css for s in State)


def test_reports_write_the_page_in_the_run_and_publish_it_with_the_json(tmp_path):
    interrupted = reports.write(tmp_path, "run-1", hand_built("interrupted"), "md\n")
    assert interrupted.run_html == tmp_path / "runs" / "run-1" / "verdicts.html" and interrupted.run_html.exists()
    assert not (tmp_path / "verdicts.html").exists() and not interrupted.published
    complete = hand_built("complete")
    complete["header"]["started"] = "2026-01-02T00:00:00+0000"
    written = reports.write(tmp_path, "run-2", complete, "md\n")
    assert written.published and (tmp_path / "verdicts.html").read_text() == written.run_html.read_text()
    assert "Status: complete" in Page((tmp_path / "verdicts.html").read_text()).visible_text


# ---------------------------------------------------------------- the screenshot tool

def test_the_screenshot_tool_names_a_missing_browser(tmp_path):
    with pytest.raises(screenshot.BrowserMissing, match="no Chromium at /nowhere/chromium"):
        screenshot.find_browser(Path("/nowhere/chromium"))


def test_the_screenshot_tool_writes_a_png(tmp_path):
    if not screenshot.CHROMIUM.is_file():
        pytest.skip(f"{screenshot.CHROMIUM} is absent (apt-get install chromium)")
    report = tmp_path / "verdicts.html"
    report.write_text(render_html(hand_built()))
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, "-m", "posenc.tools.screenshot", str(report), str(out), "--size", "800x600"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 1000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
