"""What the run prints at its end: the verdict matrix, where the reports are, one line per surprise."""

from __future__ import annotations

from .matrix import render_text, roles, surprise_lines
from .session import HarnessState


def verdict_summary(terminalreporter, state: HarnessState, matrix: dict) -> None:
    judged = {o.claim for o in state.matrix.outcomes}
    shown = {claim: row for claim, row in matrix.items() if claim in judged}
    written = state.written
    terminalreporter.section(f"verdict matrix (claims × encoders), run {state.status}")
    terminalreporter.write_line(render_text(shown, roles(state.records)))
    if len(shown) < len(matrix):
        terminalreporter.write_line(f"({len(matrix) - len(shown)} rows with no spec run are left out here; "
                                    f"every row is in {written.run_markdown})")
    terminalreporter.write_line(f"written: {written.run_json}, {written.run_markdown}")
    terminalreporter.write_line(f"         {written.note}")
    for line in surprise_lines(state.matrix.outcomes):
        terminalreporter.write_line(line)
