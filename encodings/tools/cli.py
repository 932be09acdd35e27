"""What every ``python -m posenc`` subcommand shares: a parser whose errors are one line, and the
way a measuring command keeps its figures."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option or argument is one line on stderr and exit code 2 (``--help`` has the rest)."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def keep_measurements(data: dict, path: Path, write: bool, render: Callable[[Path], str]) -> int:
    """``--write``: keep ``data`` in ``path`` and print the table ``render`` makes of it; else print
    the figures as JSON. The command's exit code."""
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"kept in {path}", file=sys.stderr)
    print(render(path) if write else json.dumps(data, indent=1))
    return 0
