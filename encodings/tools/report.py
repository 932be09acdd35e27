"""Reports of runs that died: ``python -m posenc report --recover [--matrix-dir DIR]``.

A run killed by ``os._exit``, a fatal signal or the out-of-memory killer, or whose report writer
failed, leaves ``runs/<run id>/journal.jsonl`` and no report. ``--recover`` writes the report of
every such run (its process gone) from its journal, status ``crashed``: every outcome up to the
crash, and the spec that was running as a CRASH of its encoder. The next ``pytest specs`` on the
directory does the same by itself. Exit 0, also when there was nothing to recover; 2 on bad usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

from posenc.harness.verdicts.journal import recover_unfinished
from posenc.tools import cli


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc report", description=__doc__.splitlines()[0])
    parser.add_argument("--recover", action="store_true",
                        help="write the report of every run in the directory that died without one (required)")
    parser.add_argument("--matrix-dir", default="reports", help="the report directory (default reports)")
    options = parser.parse_args(argv)
    if not options.recover:
        parser.error("nothing to do: give --recover")
    directory = Path(options.matrix_dir)
    if not directory.is_dir():
        parser.error(f"--matrix-dir: no directory {str(directory)!r}")
    lines = recover_unfinished(directory)
    print("\n".join(lines) if lines else f"nothing to recover in {directory}: every run there has its report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
