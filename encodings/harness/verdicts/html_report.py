"""The verdict report as one self-contained HTML page (``verdicts.html``): run header, counts, surprises,
a filterable claims × encoders matrix whose cells open their spec outcomes, and the documents' verdicts.

No network: CSS, JS and data are inline, and every link is an in-page anchor.
"""

from __future__ import annotations

import html
import json
import re
import shlex

from ..catalogue import states as states_module
from ..catalogue.claims import CLAIMS, CONTRACT, HARNESS_CLAIMS, LITERATURE_CLAIMS
from ..catalogue.states import SURPRISES, SYMBOLS, State

#: Symbols for the states the text matrix never shows (it reads ``excluded`` as ``n/a``).
EXTRA_SYMBOLS = {State.EXCLUDED: "EXCL", State.NOT_DECIDABLE: "ND"}
CONTRACT_STATEMENT = "the calling contract: shape, dtype and device preserved; bad input rejected with a clear error"
CROSS_CHECK = "cross-check"
VERDICT = "verdict"
PUBLISHED_PREFIX = "published_"
COMPLETE = "complete"

#: Background and text colour of each state's cells.
COLOURS = {
    State.HOLDS: ("#b9e4bd", "#14451a"),
    State.HOLDS_PARTIAL: ("#e3f1c1", "#3d5214"),
    State.REFUTED: ("#b7d3f5", "#0d3566"),
    State.UNEXPECTEDLY_FAILING: ("#f28b82", "#5c0a05"),
    State.UNEXPECTEDLY_HOLDS: ("#ffb74d", "#4d2a00"),
    State.CRASHED: ("#c62828", "#ffffff"),
    State.FAILING_AND_CRASHED: ("#7f0000", "#ffffff"),
    State.TIMED_OUT: ("#ad1457", "#ffffff"),
    State.UNDECIDED: ("#fff176", "#4a4000"),
    State.DEPENDS_ON_HISTORY: ("#bcaaa4", "#3e2723"),
    State.BLOCKED: ("#8d6e63", "#ffffff"),
    State.EXCLUDED: ("#eeeeee", "#616161"),
    State.NA: ("#fafafa", "#b0b0b0"),
    State.NOT_RUN: ("#dcdcdc", "#555555"),
    State.NOT_DECIDABLE: ("#e1bee7", "#3e1a47"),
}
UNKNOWN_COLOURS = ("#ffffff", "#000000")


def slug(value: str) -> str:
    """``holds (partial)`` -> ``holds-partial``, ``n/a`` -> ``n-a``."""
    return re.sub(r"[^a-z0-9]+", "-", str(value).lower()).strip("-") or "unknown"


def state_class(value: str) -> str:
    return "state-" + slug(value)


def symbol(value: str) -> str:
    try:
        state = State(value)
    except ValueError:
        return str(value)
    return SYMBOLS.get(state) or EXTRA_SYMBOLS.get(state) or state.value


def state_descriptions() -> dict[str, str]:
    """Each state's meaning (:func:`..catalogue.states.meanings`), without the code quotes."""
    return {state: meaning.replace("`", "") for state, meaning in states_module.meanings().items()}


def cell_id(claim: str, encoder: str) -> str:
    """A page-unique element id for a matrix cell; ``~`` never occurs in the escaped parts."""
    def part(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", lambda m: f".{ord(m.group()):x}.", text)
    return f"cell~{part(claim)}~{part(encoder)}"


def statement(claim: str) -> str:
    text = CONTRACT_STATEMENT if claim == CONTRACT else CLAIMS.get(claim, "")
    if claim in HARNESS_CLAIMS:
        text += " - the harness's own requirement, not a claim of the documents"
    elif claim in LITERATURE_CLAIMS:
        text += " - the literature's claim about ALiBi, not a claim of the documents"
    return text


def rerun_command(outcome: dict) -> str:
    return outcome.get("reproducer") or f'pytest "{outcome.get("test_id", "")}"'


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _chip(value: str) -> str:
    return f'<span class="chip {state_class(value)}">{_e(symbol(value))}</span> {_e(value)}'


# ---------------------------------------------------------------- the page's parts

def _ordered_encoders(payload: dict) -> list[str]:
    matrix = payload.get("matrix") or {}
    in_matrix = list(dict.fromkeys(e for row in matrix.values() for e in row))
    header_order = [e for e in payload.get("header", {}).get("encoders") or [] if e in in_matrix]
    return header_order + [e for e in in_matrix if e not in header_order]


def _groups(payload: dict) -> list[tuple[str, list[str]]]:
    """Encoders grouped by kind, groups in order of their first encoder; one unnamed group without kinds."""
    kinds = payload.get("kinds") or {}
    encoders = _ordered_encoders(payload)
    if not kinds:
        return [("", encoders)]
    groups: dict[str, list[str]] = {}
    for encoder in encoders:
        groups.setdefault(kinds.get(encoder, "other"), []).append(encoder)
    return list(groups.items())


def _status_banner(header: dict) -> str:
    status = header.get("status", "unknown")
    selection = header.get("selection", "")
    parts = []
    if status != COMPLETE:
        crashed = header.get("crashed_in") or {}
        why = (f"pytest ended with an error (exit status {header.get('exit_status')})" if status == "failed"
               else f"its process died in {crashed.get('test_id') or 'an unknown spec'} (recovered from its journal)"
               if status == State.CRASHED else "it was stopped")
        parts.append(f'<p class="banner banner-{_e(slug(status))}" id="status"><strong>This run is '
                     f'{_e(status).upper()}</strong> (status: {_e(status)}): {_e(why)} before every spec ran, so '
                     f'this is not a complete verdict. A cell whose specs all passed reads '
                     f'<em>{_e(State.HOLDS_PARTIAL.value)}</em>; the top-level report keeps the last complete run.'
                     f'</p>')
    elif header.get("journal_cut"):
        parts.append(f'<p class="banner banner-interrupted" id="status"><strong>This run finished, but its record '
                     f'is partial</strong> (status: {_e(status)}): {_e(header["journal_cut"])}. Its report was '
                     f'recovered from its journal; the top-level report keeps the last complete run.</p>')
    else:
        parts.append(f'<p class="banner banner-complete" id="status">Status: <strong>{_e(status)}</strong></p>')
    if selection and selection != "full":
        parts.append(f'<p class="banner banner-partial" id="selection-warning"><strong>{_e(selection)}</strong>: '
                     'only part of the specs were selected; cells outside the selection read '
                     f'<em>{_e(State.NOT_RUN.value)}</em> or <em>{_e(State.HOLDS_PARTIAL.value)}</em>.</p>')
    return "\n".join(parts)


def _run_header(header: dict) -> str:
    command = header.get("command")
    command = shlex.join(command) if isinstance(command, list) else command
    libraries = header.get("libraries") or {}
    seed = header.get("hypothesis_seed")
    fields = [
        ("status", header.get("status")), ("selection", header.get("selection")), ("run id", header.get("run_id")),
        ("started", header.get("started")), ("finished", header.get("finished")), ("command", command),
        ("device", header.get("device")), ("torch", header.get("torch")), ("python", header.get("python")),
        ("libraries", ", ".join(f"{k} {v}" for k, v in libraries.items()) or "none"),
        ("plugins", ", ".join(header.get("plugins") or []) or "none"),
        ("hypothesis profile", header.get("hypothesis_profile") if seed is None
         else f"{header.get('hypothesis_profile')} (seed: {seed})"),
        ("exit status", header.get("exit_status")), ("outcomes", header.get("outcomes")),
        ("encoders", len(header.get("encoders") or [])),
    ]
    if header.get("concurrent_runs"):
        fields.append(("concurrent runs", ", ".join(header["concurrent_runs"])))
    items = "".join(f'<div class="field field-{slug(k)}"><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>'
                    for k, v in fields if v is not None)
    return f'<dl class="run-header">{items}</dl>'


def _cells(payload: dict):
    """``(claim, encoder, state, role)`` of every matrix cell."""
    roles = payload.get("roles") or {}
    for claim, row in (payload.get("matrix") or {}).items():
        for encoder, state in row.items():
            yield claim, encoder, str(state), roles.get(claim, {}).get(encoder, VERDICT)


def _counts(payload: dict) -> str:
    total: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    for _, _, state, role in _cells(payload):
        total[state] = total.get(state, 0) + 1
        verdicts[state] = verdicts.get(state, 0) + (role == VERDICT)
    order = [s.value for s in State if s.value in total] + [s for s in total if s not in {x.value for x in State}]
    items = "".join(f'<li class="count" data-state="{_e(s)}" title="{verdicts[s]} of them verdicts on the documents">'
                    f'{_chip(s)} <b>{total[s]}</b></li>' for s in order)
    return f'<ul class="counts">{items}</ul>'


def _by_cell(outcomes: list[dict]) -> dict[tuple[str, str], list[dict]]:
    found: dict[tuple[str, str], list[dict]] = {}
    for outcome in outcomes:
        found.setdefault((outcome.get("claim"), outcome.get("encoder")), []).append(outcome)
    return found


def _surprises(payload: dict, by_cell) -> str:
    """Primary cells first; a consequence of another failing cell (the report's ``consequences``)
    last, saying which it follows."""
    surprising = {s.value for s in SURPRISES}
    following = payload.get("consequences") or {}
    items, later = [], []
    for claim, encoder, state, role in _cells(payload):
        if state not in surprising:
            continue
        after = following.get(claim, {}).get(encoder) if isinstance(following.get(claim), dict) else None
        follows = (f' <span class="consequence">a consequence of {_e(str(after.get("primary")))} '
                   f'({_e(str(after.get("rule")))})</span>') if isinstance(after, dict) else ""
        found = by_cell.get((claim, encoder), [])
        first = next((o for o in found if str(o.get("state")) in surprising), found[0] if found else {})
        message = first.get("message") or "(no message)"
        rerun = f'<code class="rerun">{_e(rerun_command(first))}</code>' if first else ""
        (later if follows else items).append(
            f'<li>{_chip(state)} <a href="#{_e(cell_id(claim, encoder))}">{_e(claim)} on {_e(encoder)}</a>'
            f'{" (cross-check)" if role == CROSS_CHECK else ""}:{follows} <span class="message">{_e(message)}</span> '
            f'{rerun}</li>')
    items += later
    if not items:
        return ('<p class="none">No surprises: no cell is failing, crashed, timed out, blocked or '
                'unexpectedly holding.</p>')
    return f'<ul class="surprises">{"".join(items)}</ul>'


def _not_applicable_reasons(payload: dict) -> dict[tuple[str, str], str]:
    """Why a cell does not apply: the report's ``not_applicable`` table, else its specs' outcomes."""
    reasons: dict[tuple[str, str], str] = {}
    table = payload.get("not_applicable")
    for claim, row in (table if isinstance(table, dict) else {}).items():
        for encoder, said in (row if isinstance(row, dict) else {}).items():
            reasons[str(claim), str(encoder)] = str(said)
    for outcome in payload.get("outcomes") or []:
        if isinstance(outcome, dict) and outcome.get("state") in (State.EXCLUDED.value, State.NA.value):
            reasons.setdefault((str(outcome.get("claim")), str(outcome.get("encoder"))),
                               str(outcome.get("message") or "").removeprefix("not applicable: "))
    return reasons


def _matrix_table(payload: dict) -> str:
    matrix = payload.get("matrix") or {}
    roles = payload.get("roles") or {}
    why = _not_applicable_reasons(payload)
    claims = list(matrix)
    aside = ' class="claim-aside"'
    head = "".join(
        f'<th scope="col" data-claim="{_e(c)}" title="{_e(c)}: {_e(statement(c))}"'
        f'{aside if c in HARNESS_CLAIMS or c in LITERATURE_CLAIMS else ""}><span>{_e(c)}</span></th>' for c in claims)
    bodies = []
    for kind, encoders in _groups(payload):
        rows = [f'<tr class="group"><th scope="rowgroup" colspan="{len(claims) + 1}">{_e(kind)} '
                f'<small>({len(encoders)})</small></th></tr>'] if kind else []
        for encoder in encoders:
            cells = []
            for claim in claims:
                state = str(matrix[claim].get(encoder, State.NOT_RUN.value))
                role = roles.get(claim, {}).get(encoder, VERDICT)
                crossed = role == CROSS_CHECK
                shown = f"({symbol(state)})" if crossed else symbol(state)
                reason = f": {why[claim, encoder]}" if state == State.NA.value and (claim, encoder) in why else ""
                cells.append(f'<td id="{_e(cell_id(claim, encoder))}" class="cell {state_class(state)}'
                             f'{" cross" if crossed else ""}" data-claim="{_e(claim)}" data-encoder="{_e(encoder)}" '
                             f'data-state="{_e(state)}" data-role="{_e(role)}" tabindex="0" '
                             f'title="{_e(claim)} on {_e(encoder)}: {_e(state)}{" (cross-check)" if crossed else ""}'
                             f'{_e(reason)}">'
                             f'{_e(shown)}</td>')
            published = ' class="published"' if encoder.startswith(PUBLISHED_PREFIX) else ""
            rows.append(f'<tr data-encoder="{_e(encoder)}" data-kind="{_e(kind)}"><th scope="row"{published}>'
                        f'{_e(encoder)}</th>{"".join(cells)}</tr>')
        bodies.append(f'<tbody data-kind="{_e(kind)}">{"".join(rows)}</tbody>')
    return (f'<div class="matrix-wrap"><table id="matrix-table" class="matrix"><thead><tr>'
            f'<th class="corner" scope="col">encoder \\ claim</th>{head}</tr></thead>{"".join(bodies)}</table></div>')


def _filters(payload: dict) -> str:
    present = {state for _, _, state, _ in _cells(payload)}
    boxes = "".join(f'<label class="{state_class(s.value)}"><input type="checkbox" data-state-filter '
                    f'value="{_e(s.value)}" checked> {_e(symbol(s.value))} {_e(s.value)}</label>'
                    for s in State if s.value in present)
    return ('<form class="filters" id="filters" onsubmit="return false">'
            '<label>encoder <input type="search" id="filter-encoder" placeholder="e.g. rope, published_"></label>'
            '<label>claim <input type="search" id="filter-claim" placeholder="e.g. ROPE-4, norm"></label>'
            '<label><input type="checkbox" id="filter-verdicts"> verdicts only (hide cross-checks)</label>'
            '<button type="button" id="states-all">all states</button>'
            '<button type="button" id="states-surprises">surprises only</button>'
            f'<span id="filter-summary"></span><div class="state-filters">{boxes}</div></form>')


def _published_verdicts(payload: dict, by_cell) -> str:
    rows = []
    for claim, encoder, state, role in _cells(payload):
        if role != VERDICT or not encoder.startswith(PUBLISHED_PREFIX):
            continue
        message = next((o.get("message") for o in by_cell.get((claim, encoder), []) if o.get("message")), "")
        rows.append(f'<tr><td>{_e(claim)}</td><td class="statement">{_e(statement(claim))}</td>'
                    f'<td><a href="#{_e(cell_id(claim, encoder))}">{_e(encoder)}</a></td>'
                    f'<td class="verdict-state" data-state="{_e(state)}">{_chip(state)}</td>'
                    f'<td class="message">{_e(message)}</td></tr>')
    if not rows:
        return ('<p class="none">No verdict cells on the documents\' own code (<code>published_*</code>) '
                'in this run.</p>')
    return ('<table class="published-verdicts" id="published-table"><thead><tr><th>claim</th><th>statement</th>'
            f'<th>encoder</th><th>state</th><th>first message</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _legend() -> str:
    descriptions = state_descriptions()
    items = "".join(f'<li><span class="chip {state_class(s.value)}">{_e(symbol(s.value))}</span> <b>{_e(s.value)}</b>'
                    f' - {_e(descriptions.get(s.value, ""))}</li>' for s in State)
    return (f'<ul class="legend">{items}</ul><p><span class="chip cross {state_class(State.HOLDS.value)}">'
            f'({_e(symbol(State.HOLDS.value))})</span> in parentheses and italics: a cross-check - the claim is not '
            'made about this design; the harness checks it anyway, and it is no verdict on the documents. '
            'Underlined column heads (' + _e(", ".join((*LITERATURE_CLAIMS, *HARNESS_CLAIMS))) +
            ') are the literature\'s or the harness\'s claims, not the documents\'.</p>')


def _outcomes_blob(outcomes: list[dict]) -> str:
    """The outcomes as JSON inside a script element; ``<`` is escaped so no text can end the element."""
    shown = [{**o, "state": str(o.get("state", "")), "rerun": rerun_command(o)} for o in outcomes]
    text = json.dumps(shown, ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="outcomes">{text}</script>'


def render_html(payload: dict) -> str:
    """The whole page for one report payload (the dict written as ``verdicts.json``)."""
    header = payload.get("header") or {}
    outcomes = list(payload.get("outcomes") or [])
    by_cell = _by_cell(outcomes)
    status = header.get("status", "unknown")
    title = f"posenc verdicts - {status if status == COMPLETE else status.upper()} - {header.get('run_id', '')}"
    described = state_descriptions()
    descriptions = json.dumps({s.value: described.get(s.value, "") for s in State}).replace("<", "\\u003c")
    surprising = json.dumps([s.value for s in SURPRISES])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_css()}</style>
</head>
<body>
{_status_banner(header)}
<header id="top">
<h1>Verdicts <small>run {_e(header.get('run_id', ''))}</small></h1>
{_run_header(header)}
<nav><a href="#counts">counts</a> <a href="#surprises">surprises</a> <a href="#matrix">matrix</a>
<a href="#published">documents' verdicts</a> <a href="#legend">legend</a></nav>
</header>
<section id="counts"><h2>Cells by state</h2>{_counts(payload)}</section>
<section id="surprises"><h2>Surprises</h2>{_surprises(payload, by_cell)}</section>
<section id="matrix"><h2>Matrix <small>encoders × claims; click a cell for its spec outcomes</small></h2>
{_filters(payload)}
{_matrix_table(payload)}
</section>
<section id="published"><h2>The documents' verdicts <small>verdict cells on the documents' own code</small></h2>
{_published_verdicts(payload, by_cell)}
</section>
<section id="legend"><h2>Legend</h2>{_legend()}</section>
<dialog id="cell-dialog"><form method="dialog"><button class="close" value="close">close</button></form>
<h2 id="dialog-title"></h2><p id="dialog-statement"></p><div id="dialog-outcomes"></div></dialog>
{_outcomes_blob(outcomes)}
<script type="application/json" id="state-descriptions">{descriptions}</script>
<script>var SURPRISES = {surprising};
{_SCRIPT}</script>
</body>
</html>
"""


def _css() -> str:
    state_rules = "\n".join(f".{state_class(s.value)} {{ background: {COLOURS.get(s, UNKNOWN_COLOURS)[0]}; "
                            f"color: {COLOURS.get(s, UNKNOWN_COLOURS)[1]}; }}" for s in State)
    return _STYLE + state_rules


_STYLE = """
* { box-sizing: border-box; }
body { font: 13px/1.35 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0 12px 24px;
  color: #1d1d1d; background: #fff; }
h1 { font-size: 18px; margin: 6px 0 4px; } h2 { font-size: 15px; margin: 10px 0 4px; }
h1 small, h2 small { font-weight: normal; color: #666; font-size: 12px; }
.banner { margin: 8px 0 0; padding: 6px 10px; border-radius: 4px; font-size: 14px; }
.banner-complete { background: #e8f5e9; color: #1b5e20; padding: 3px 10px; font-size: 13px; }
.banner-interrupted, .banner-failed, .banner-unknown { background: #c62828; color: #fff; font-size: 16px; }
.banner-partial { background: #fff3cd; color: #5c4400; border: 1px solid #e0c060; }
.run-header { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 0 14px; margin: 0; }
.run-header .field { display: flex; gap: 6px; min-width: 0; }
.run-header .field-command, .run-header .field-device, .run-header .field-libraries { grid-column: span 2; }
.run-header dt { color: #666; white-space: nowrap; } .run-header dt::after { content: ":"; }
.run-header dd { margin: 0; overflow-wrap: anywhere; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
  font-size: 12px; }
nav { margin: 3px 0; } nav a { margin-right: 10px; } a { color: #0b57d0; }
section { margin: 0; }
.counts { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 14px; padding: 0; margin: 0; }
.chip { display: inline-block; min-width: 2.4em; padding: 0 4px; border-radius: 3px; text-align: center;
  font: bold 11px/16px ui-monospace, "DejaVu Sans Mono", monospace; border: 1px solid rgba(0,0,0,.12); }
.chip.cross { font-style: italic; font-weight: normal; }
.surprises { margin: 0; padding-left: 18px; max-height: 22vh; overflow: auto; }
.surprises li { margin: 1px 0; } .message { color: #333; } code, pre { font-family: ui-monospace, monospace; }
.rerun { color: #555; font-size: 11px; }
.none { color: #2e7d32; margin: 2px 0; }
.filters { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 12px; margin: 2px 0 6px; }
.filters input[type=search] { width: 13em; }
.state-filters { display: flex; flex-wrap: wrap; gap: 3px; width: 100%; }
.state-filters label { padding: 0 5px; border-radius: 3px; font-size: 11px; cursor: pointer;
  border: 1px solid rgba(0,0,0,.15); }
#filter-summary { color: #666; }
.matrix-wrap { overflow: auto; max-height: 78vh; border: 1px solid #ccc; }
table.matrix { border-collapse: separate; border-spacing: 0;
  font: 10.5px/1.25 ui-monospace, "DejaVu Sans Mono", monospace; }
.matrix th, .matrix td { border-right: 1px solid #fff; border-bottom: 1px solid #fff; }
.matrix thead th { position: sticky; top: 0; z-index: 2; background: #f3f3f3; vertical-align: bottom;
  padding: 4px 1px; border-bottom: 1px solid #bbb; font-weight: 600; }
.matrix thead th span { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }
.matrix thead th.claim-aside span { text-decoration: underline dotted; color: #555; }
.matrix thead th.corner { left: 0; z-index: 3; text-align: left; vertical-align: bottom; font-weight: normal;
  color: #666; padding: 4px 6px; }
.matrix tbody th { position: sticky; left: 0; z-index: 1; background: #f3f3f3; text-align: left; padding: 1px 6px;
  white-space: nowrap; font-weight: normal; border-right: 1px solid #bbb; }
.matrix tbody th.published { font-weight: 700; }
.matrix tr.group th { background: #444; color: #fff; font: bold 11px system-ui, sans-serif; padding: 2px 6px;
  text-transform: uppercase; letter-spacing: .04em; }
.matrix tr.group th small { text-transform: none; font-weight: normal; }
.matrix td { text-align: center; padding: 1px 2px; min-width: 21px; cursor: pointer; white-space: nowrap; }
.matrix td.cross { font-style: italic; letter-spacing: -0.06em; opacity: .8; }
.matrix td:hover, .matrix td:focus { outline: 2px solid #000; outline-offset: -2px; }
.matrix td.masked { background: #fff; color: transparent; }
.matrix .off { display: none; }
table.published-verdicts { border-collapse: collapse; }
.published-verdicts th, .published-verdicts td { border: 1px solid #ddd; padding: 2px 6px; text-align: left;
  vertical-align: top; }
.published-verdicts .statement { color: #444; max-width: 380px; }
.published-verdicts .message { max-width: 520px; overflow-wrap: anywhere; font-size: 12px; }
.legend { list-style: none; padding: 0; margin: 0; columns: 2 420px; }
.legend li { margin: 2px 0; break-inside: avoid; }
dialog { max-width: min(1100px, 95vw); max-height: 90vh; overflow: auto; border: 1px solid #888; border-radius: 6px; }
dialog::backdrop { background: rgba(0,0,0,.35); }
dialog .close { float: right; }
.outcome { border-left: 6px solid #ccc; padding: 2px 8px; margin: 8px 0; background: #fafafa; }
.outcome dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 4px 0; }
.outcome dt { color: #666; } .outcome dd { margin: 0; overflow-wrap: anywhere; white-space: pre-wrap; }
.outcome pre { background: #f0f0f0; padding: 6px; overflow: auto; max-height: 40vh; font-size: 12px; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var outcomes = JSON.parse(document.getElementById("outcomes").textContent);
  var descriptions = JSON.parse(document.getElementById("state-descriptions").textContent);
  var byCell = {};
  outcomes.forEach(function (o) {
    var key = o.claim + "\u0000" + o.encoder;
    (byCell[key] = byCell[key] || []).push(o);
  });
  var table = document.getElementById("matrix-table");
  var cells = Array.prototype.slice.call(table.querySelectorAll("td[data-claim]"));
  var heads = Array.prototype.slice.call(table.querySelectorAll("thead th[data-claim]"));
  var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr[data-encoder]"));
  var groups = Array.prototype.slice.call(table.querySelectorAll("tbody"));
  var boxes = Array.prototype.slice.call(document.querySelectorAll("input[data-state-filter]"));
  var encoderInput = document.getElementById("filter-encoder");
  var claimInput = document.getElementById("filter-claim");
  var verdictsOnly = document.getElementById("filter-verdicts");

  function applyFilters() {
    var encoderText = encoderInput.value.trim().toLowerCase();
    var claimText = claimInput.value.trim().toLowerCase();
    var shown = {};
    boxes.forEach(function (b) { if (b.checked) { shown[b.value] = true; } });
    var encoderMatch = {}, claimMatch = {}, rowHas = {}, columnHas = {};
    rows.forEach(function (tr) {
      encoderMatch[tr.dataset.encoder] = (tr.dataset.encoder + " " + tr.dataset.kind).toLowerCase()
        .indexOf(encoderText) >= 0;
    });
    heads.forEach(function (th) {
      claimMatch[th.dataset.claim] = th.title.toLowerCase().indexOf(claimText) >= 0;
    });
    cells.forEach(function (td) {
      var on = !!shown[td.dataset.state] && !(verdictsOnly.checked && td.dataset.role === "cross-check");
      td.classList.toggle("masked", !on);
      if (on && encoderMatch[td.dataset.encoder] && claimMatch[td.dataset.claim]) {
        rowHas[td.dataset.encoder] = true;
        columnHas[td.dataset.claim] = true;
      }
    });
    var columnOn = {}, columns = 0, visibleRows = 0;
    heads.forEach(function (th) {
      var on = claimMatch[th.dataset.claim] && !!columnHas[th.dataset.claim];
      columnOn[th.dataset.claim] = on;
      th.classList.toggle("off", !on);
      columns += on ? 1 : 0;
    });
    cells.forEach(function (td) { td.classList.toggle("off", !columnOn[td.dataset.claim]); });
    rows.forEach(function (tr) {
      var on = encoderMatch[tr.dataset.encoder] && !!rowHas[tr.dataset.encoder];
      tr.classList.toggle("off", !on);
      visibleRows += on ? 1 : 0;
    });
    groups.forEach(function (tbody) {
      var group = tbody.querySelector("tr.group");
      if (group) {
        group.classList.toggle("off", !tbody.querySelector("tr[data-encoder]:not(.off)"));
        group.firstElementChild.colSpan = columns + 1;
      }
    });
    document.getElementById("filter-summary").textContent =
      "showing " + visibleRows + " of " + rows.length + " encoders, " + columns + " of " + heads.length + " claims";
  }

  function field(list, name, value) {
    var dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = name;
    dd.textContent = value;
    list.appendChild(dt);
    list.appendChild(dd);
  }

  function openCell(td) {
    var claim = td.dataset.claim, encoder = td.dataset.encoder, state = td.dataset.state;
    var found = byCell[claim + "\u0000" + encoder] || [];
    var head = heads.filter(function (th) { return th.dataset.claim === claim; })[0];
    document.getElementById("dialog-title").textContent = claim + " on " + encoder + ": " + state +
      (td.dataset.role === "cross-check" ? " (cross-check)" : "");
    document.getElementById("dialog-statement").textContent = (head ? head.title : claim) +
      " | " + state + ": " + (descriptions[state] || "");
    var box = document.getElementById("dialog-outcomes");
    box.textContent = "";
    if (!found.length) {
      var none = document.createElement("p");
      none.textContent = "No spec outcome was recorded for this cell.";
      box.appendChild(none);
    }
    found.forEach(function (o) {
      var div = document.createElement("div"), h = document.createElement("h3"), list = document.createElement("dl");
      div.className = "outcome outcome-" + o.state.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
      h.textContent = o.spec + ": " + o.state;
      div.appendChild(h);
      field(list, "test id", o.test_id);
      field(list, "state", o.state);
      field(list, "message", o.message || "(none)");
      field(list, "rerun", o.rerun);
      div.appendChild(list);
      if (o.python) {
        var label = document.createElement("p"), pre = document.createElement("pre");
        label.textContent = "standalone reproducer:";
        pre.textContent = o.python;
        div.appendChild(label);
        div.appendChild(pre);
      }
      box.appendChild(div);
    });
    var dialog = document.getElementById("cell-dialog");
    if (dialog.open) { return; }
    if (typeof dialog.showModal === "function") { dialog.showModal(); } else { dialog.setAttribute("open", ""); }
  }

  function openFromHash() {
    var target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (target && target.matches("td[data-claim]")) {
      target.scrollIntoView({block: "center", inline: "center"});
      openCell(target);
    }
  }

  table.addEventListener("click", function (event) {
    var td = event.target.closest("td[data-claim]");
    if (td) { openCell(td); }
  });
  table.addEventListener("keydown", function (event) {
    var td = event.target.closest("td[data-claim]");
    if (td && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); openCell(td); }
  });
  [encoderInput, claimInput].forEach(function (input) { input.addEventListener("input", applyFilters); });
  verdictsOnly.addEventListener("change", applyFilters);
  boxes.forEach(function (b) { b.addEventListener("change", applyFilters); });
  document.getElementById("states-all").addEventListener("click", function () {
    boxes.forEach(function (b) { b.checked = true; });
    applyFilters();
  });
  document.getElementById("states-surprises").addEventListener("click", function () {
    boxes.forEach(function (b) { b.checked = SURPRISES.indexOf(b.value) >= 0; });
    applyFilters();
  });
  window.addEventListener("hashchange", openFromHash);
  applyFilters();
  openFromHash();
})();
"""
