"""How wide the terminal is, and text wrapped to it: nothing the harness prints is wider.

The width is ``$COLUMNS`` when set, else the terminal's own when output is a terminal, else
:data:`DEFAULT_WIDTH`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import textwrap

DEFAULT_WIDTH = 100
#: Below this a table cannot be laid out at all; narrower terminals get lines of this width.
MIN_WIDTH = 40


def terminal_width() -> int:
    columns = os.environ.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    if sys.stdout.isatty():
        return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)
    return DEFAULT_WIDTH


def wrap(text: str, width: int, indent: str = "    ") -> list[str]:
    """``text`` as lines of at most ``width`` characters, continuation lines indented; a word
    longer than the line (a path, a node id) is broken rather than left overlong."""
    lines = []
    for paragraph in text.splitlines() or [""]:
        if len(paragraph) <= width:
            lines.append(paragraph)
            continue
        lines += textwrap.wrap(paragraph, width, subsequent_indent=indent, break_long_words=True,
                               break_on_hyphens=False, drop_whitespace=True) or [""]
    return lines


def wrap_all(lines, width: int, indent: str = "    ") -> list[str]:
    return [piece for line in lines for piece in wrap(line, width, indent)]


def wrap_command(command: str, width: int, indent: str = "    ") -> list[str]:
    """A shell command over lines of at most ``width``, broken at spaces between words with a
    trailing `` \\``, so that it still pastes as one command; a trailing ``# comment`` goes on a
    line of its own. A single word longer than the line (a node id) is never broken: it would no
    longer paste."""
    code, hash_, comment = command.partition("  # ")
    try:
        words = [shlex.quote(w) for w in shlex.split(code)]
    except ValueError:
        words = code.split()
    lines, current = [], ""
    for word in words:
        candidate = f"{current} {word}" if current else word
        if len(candidate) + 2 <= width or not current.strip():
            current = candidate
        else:
            lines.append(current + " \\")
            current = indent + word
    lines.append(current)
    if hash_:
        lines += wrap("# " + comment, width, indent + "# ")
    return lines
