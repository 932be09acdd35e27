"""What the run prints at its end, fitted to the terminal's width: the answer first.

1. the counts of cells by state, then each surprising cell (:func:`..verdicts.matrix.surprises`): its
   first message, and the command that reruns it, broken over lines so that it still pastes;
2. where the reports are (``verdicts.html`` first);
3. with ``--matrix grid`` (the default), the matrix as a grid: encoders as rows, grouped by kind,
   each group showing only the claims that apply to it, columns split into blocks that fit.

``--matrix summary`` stops after 2; ``--matrix none`` prints only where the reports are.
"""

from __future__ import annotations

from collections import Counter

from ..catalogue.claims import CONTRACT, LITERATURE_CLAIMS, MODEL_CLAIMS, MULTIAXIS_CLAIMS, VLM_CLAIMS
from ..verdicts.matrix import not_applicable, roles, surprises
from .session import HarnessState
from ..catalogue.states import SURPRISES, SYMBOLS, State
from ..verdicts.width import terminal_width, wrap, wrap_all, wrap_command

MATRIX_MODES = ("grid", "summary", "none")
KIND_ORDER = ("rotary", "multiaxis", "attention", "additive", "bias", "model", "producer")
KIND_TITLES = {"rotary": "rotary encoders (RoPE and its variants)", "attention": "attention modules",
               "multiaxis": "multi-axis rotary encoders (M-RoPE, 2D RoPE: a position per axis)",
               "additive": "absolute (additive) encodings", "bias": "attention biases (ALiBi)",
               "model": "whole models (the relations through which a model calls its encoding)",
               "producer": "position producers (id builders, packing collators, context-parallel shards)"}
#: Cell states in the order the counts line names them.
COUNT_ORDER = (*SURPRISES, State.HOLDS, State.HOLDS_PARTIAL, State.REFUTED, State.UNDECIDED,
               State.DEPENDS_ON_HISTORY, State.NOT_RUN, State.NOT_DECIDABLE)
COLUMN_GAP = 1


def count_line(cells: dict[str, dict[str, State]]) -> str:
    """``412 cells judged: 360 holds, 48 refuted, …`` over the cells a claim applies to."""
    counts = Counter(State(s) for row in cells.values() for s in row.values() if State(s) != State.NA)
    parts = [f"{counts[s]} {s}" for s in COUNT_ORDER if counts[s]]
    return f"{sum(counts.values())} cells that apply: " + ", ".join(parts)


def _label(claim: str) -> tuple[str, str]:
    """(family, number) of a claim's column: ``ROPE-10a`` is (``ROPE``, ``10a``)."""
    if claim == CONTRACT:
        return "", "ctr"
    family, _, number = claim.partition("-")
    return family, number


def _symbol(state: State, role: str) -> str:
    return f"({SYMBOLS[state]})" if role == "cross-check" else SYMBOLS[state]


def _shown(state: State) -> bool:
    return state not in (State.NA, State.NOT_RUN)


def _blocks(columns: list[tuple[str, int]], room: int) -> list[list[tuple[str, int]]]:
    """Columns (claim, width) packed left to right into blocks no wider than ``room``."""
    blocks, current, used = [], [], 0
    for column in columns:
        need = column[1] + COLUMN_GAP
        if current and used + need > room:
            blocks.append(current)
            current, used = [], 0
        current.append(column)
        used += need
    return blocks + ([current] if current else [])


def _family_line(block: list[tuple[str, int]]) -> str:
    """Each family's name over its first column, cut to the columns it spans."""
    out, index = "", 0
    while index < len(block):
        family = _label(block[index][0])[0]
        span = index
        while span < len(block) and _label(block[span][0])[0] == family:
            span += 1
        room = sum(w + COLUMN_GAP for _, w in block[index:span])
        out += f"{family[:room - COLUMN_GAP]:<{room}}"
        index = span
    return out.rstrip()


def fit_name(name: str, width: int) -> str:
    """``name`` in ``width`` characters: its head and its tail around a ``~``, so that names that
    differ only at the end (``…_004``) stay apart."""
    if len(name) <= width:
        return name
    tail = (width - 1) // 3
    return name[:width - 1 - tail] + "~" + name[len(name) - tail:]


def name_width(encoders, width: int) -> int:
    return min(max(len(e) for e in encoders), max(width // 3, 12))


def render_grid(cells: dict[str, dict[str, State]], roles: dict[str, dict[str, str]],
                kinds: dict[str, str], width: int) -> list[str]:
    """The matrix as encoder rows grouped by kind, in blocks of claim columns that fit ``width``."""
    encoders = list(next(iter(cells.values()))) if cells else []
    lines: list[str] = []
    left_out = 0
    for kind in sorted({kinds[e] for e in encoders}, key=lambda k: (KIND_ORDER + (k,)).index(k)):
        group = [e for e in encoders if kinds[e] == kind]
        claims = [c for c in cells if any(_shown(State(cells[c][e])) for e in group)]
        left_out += sum(1 for c in cells if c not in claims and any(State(cells[c][e]) != State.NA for e in group))
        if not claims:
            continue
        names = name_width(group, width)
        columns = [(c, max(len(_label(c)[1]), *(len(_symbol(State(cells[c][e]), roles[c][e])) for e in group)))
                   for c in claims]
        lines += ["", f"{KIND_TITLES.get(kind, kind)}: {len(group)}"]
        for block in _blocks(columns, width - names - COLUMN_GAP):
            pad = " " * (names + COLUMN_GAP)
            lines.append(pad + _family_line(block))
            lines.append((pad + "".join(f"{_label(c)[1]:>{w}}" + " " * COLUMN_GAP for c, w in block)).rstrip())
            for encoder in group:
                row = "".join(f"{_symbol(State(cells[c][encoder]), roles[c][encoder]):>{w}}" + " " * COLUMN_GAP
                              for c, w in block)
                lines.append((f"{fit_name(encoder, names):<{names}}" + " " * COLUMN_GAP + row).rstrip())
    if left_out:
        lines.append(f"({left_out} cells with no spec run are left out here; every cell is in the reports)")
    legend = "legend: " + ", ".join(f"{symbol} {state}" for state, symbol in SYMBOLS.items())
    lines += ["", *wrap(legend, width, "        ")]
    lines += wrap("ok* = the specs that ran passed, but not all of the cell's specs ran; (…) = cross-check: the claim "
                  "is not made about this design, so it is no verdict on the documents", width)
    lines += wrap(f"{', '.join(LITERATURE_CLAIMS)}: the literature's claims about ALiBi; MROPE-1 … "
                  f"{MULTIAXIS_CLAIMS[-1]}: the literature's on multi-axis RoPE; PATH-1 … PATH-3: the "
                  f"harness's own (equivalent call paths agree); MODEL-1 … {MODEL_CLAIMS[-1]}: the harness's "
                  f"relations of a whole model; VLM-1 … {VLM_CLAIMS[-1]}: of a vision-language model; IDS, PACK, "
                  "CP: of the code that builds M-RoPE ids, packs documents and cuts context-parallel shards; ctr: the "
                  "contract (shape, dtype, bad input, gradients)", width)
    return lines


def report_lines(state: HarnessState, cells: dict, mode: str, width: int) -> list[str]:
    written = state.written
    html = getattr(written, "run_html", None)
    also = [p for p in (written.run_json, written.run_markdown) if p != (html or written.run_json)]
    shown = [path for path in (html or written.run_json, *also) if path is not None and path.exists()]
    if not written.saved or not shown:  # never point at files that are not there
        where = [f"report: not written ({written.note}); the journal keeps what it could: python -m posenc "
                 f"report --recover --matrix-dir {state.settings.matrix_dir}"]
    else:
        where = [f"report: {shown[0]}", *(f"  also: {path}" for path in shown[1:]), f"  {written.note}"]
    if mode == "none":
        return wrap_all(where, width, " " * 8)
    found = surprises(state.matrix.outcomes, roles(state.records))
    lines = wrap(count_line(cells), width)
    if found:
        following = sum(" a consequence of " in line for line, _ in found)
        also = f"; {following} of them a consequence of another, listed last" if following else ""
        lines += wrap(f"{len(found)} cell{'s' if len(found) > 1 else ''} need{'' if len(found) > 1 else 's'} a look "
                      f"(first message and a command to rerun each{also}):", width)
        for line, again in found:
            lines += wrap(line, width, "      ")
            if again and len(again) + 9 <= width:
                lines.append(f"  rerun: {again}")
            elif again:
                lines += ["  rerun:", *("    " + piece for piece in wrap_command(again, width - 4, "  "))]
    else:
        lines.append("no surprise: every cell that ran is as its record declares")
    lines += _not_applicable(state, cells, width)
    lines += wrap_all(where, width, " " * 8)
    if mode == "grid":
        kinds = {r.name: r.group for r in state.records}
        lines += render_grid(cells, roles(state.records), kinds, width)
    return lines


#: Runs of this many encoders or fewer (a ``--model`` run, a plug-in of one's own) say why each
#: ``n/a`` cell does not apply; larger runs leave the reasons to the reports.
NA_REASONS_UP_TO = 3


def _not_applicable(state: HarnessState, cells: dict, width: int) -> list[str]:
    """Why each ``n/a`` cell of a small run does not apply (:func:`..verdicts.matrix.not_applicable`),
    one line for the claims a reason shares."""
    if len(state.records) > NA_REASONS_UP_TO:
        return []
    order, grouped = list(cells), {}
    table = not_applicable(state.records, cells, state.matrix.outcomes)
    for claim, row in table.items():
        for encoder, said in row.items():
            grouped.setdefault((encoder, said), []).append(claim)
    lines = []
    for (encoder, said), claims in grouped.items():
        at = [order.index(claim) for claim in claims]
        named = f"{claims[0]} … {claims[-1]}" if len(claims) > 2 and at == list(range(at[0], at[0] + len(at))) \
            else ", ".join(claims[:-1]) + f" and {claims[-1]}" if len(claims) > 1 else claims[0]
        lines += wrap(f"n/a   {named} on {encoder}: {said}", width, "      ")
    count = sum(len(row) for row in table.values())
    return (wrap(f"{count} cell{'s' if count > 1 else ''} do{'' if count > 1 else 'es'} not apply, and why:", width)
            + lines) if lines else []


def verdict_summary(terminalreporter, state: HarnessState, cells: dict, mode: str = "grid") -> None:
    width = terminal_width()
    title = f"posenc verdicts, run {state.status}"
    terminalreporter.section(title, fullwidth=width)
    bad = any(State(s) in SURPRISES for row in cells.values() for s in row.values())
    for line in report_lines(state, cells, mode, width):
        terminalreporter.write_line(line, red=bad and line.startswith(tuple(SYMBOLS[s] for s in SURPRISES)))


def write_notes(terminalreporter, notes) -> None:
    """The run's notes and warnings (``None`` skipped), each wrapped to the terminal."""
    for note in filter(None, notes):
        for line in wrap(note, terminal_width()):
            terminalreporter.write_line(line, yellow=True)
