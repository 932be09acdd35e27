"""What every ``python -m posenc`` subcommand shares: a parser whose errors are one line."""

from __future__ import annotations

import argparse
import sys


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option or argument is one line on stderr and exit code 2 (``--help`` has the rest)."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)
