"""Compare saved benchmark runs: ``python -m posenc compare [BEFORE] [AFTER]``.

Reads pytest-benchmark's histories (``pytest specs -m perf --benchmark-autosave``) and prints,
per benchmark, before → after and the change of median time, peak and static memory, ×copy and
kernel count. ``--fail GATE`` exits 1 with one line per regression (default gate:
``posenc.harness.performance.history.DEFAULT_GATE``); ``--trend DIR`` writes every saved run as TensorBoard
scalars with the run number as step. A run file that cannot be compared (not JSON, not a
pytest-benchmark save, or holding no benchmarks) is refused with one line naming it and its own
exit code: ``posenc.harness.performance.history.EXIT_CODES`` lists them all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc.harness.performance import history
from posenc.harness.performance.history import BAD_RUN_FILE, EXIT_CODES, OK, REGRESSED, USAGE
from posenc.tools import cli


def exit_codes_help() -> str:
    return "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc compare", description=__doc__.splitlines()[0],
                                epilog=exit_codes_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", nargs="?", default="previous", help="run number, file, or 'previous' (default)")
    parser.add_argument("after", nargs="?", default="latest", help="run number, file, or 'latest' (default)")
    parser.add_argument("--storage", default=".benchmarks", help="pytest-benchmark storage folder (default .benchmarks)")
    parser.add_argument("--sort", action="store_true", help="largest change first")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--csv", action="store_true", help="print CSV")
    output.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--fail", nargs="?", const=history.DEFAULT_GATE, default=None, metavar="GATE",
                        help=("exit 1 if a metric got worse than GATE allows (default "
                              f"{history.DEFAULT_GATE}). GATE: {history.GATE_HELP}").replace("%", "%%"))
    parser.add_argument("--trend", metavar="LOGDIR", help="write every saved run as TensorBoard scalars into LOGDIR")
    args = parser.parse_args(argv)
    try:
        return _compare(args)
    except history.RunFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_RUN_FILE


def _compare(args) -> int:
    if args.trend and (args.before, args.after) == ("previous", "latest") and len(
            history.saved_runs(Path(args.storage))) < 2 and not args.fail:
        tags = history.write_trend(Path(args.storage), Path(args.trend))  # nothing to compare yet
        print(f"trend: {len(tags)} scalar tags in {args.trend}", file=sys.stderr)
        return OK
    try:
        gates = history.parse_gate(args.fail) if args.fail else []
        before_path = history.find_run(Path(args.storage), args.before)
        after_path = history.find_run(Path(args.storage), args.after)
    except (LookupError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE
    before, after = history.read_run(before_path), history.read_run(after_path)
    odd = history.not_files(Path(args.storage))
    if odd:
        print(f"warning: left out, not regular files: {', '.join(map(str, odd))}", file=sys.stderr)
    for difference in history.machine_differences(before.machine, after.machine):
        print(f"warning: the runs differ in {difference}: their timings are not comparable", file=sys.stderr)
    rows = history.comparison_rows(before, after, sort=args.sort)
    if args.csv:
        print(history.render_csv(rows), end="")
    elif args.json:
        print(json.dumps({"before": str(before.path), "after": str(after.path), "rows": rows}, indent=2))
    else:
        print(f"before: run {before.number} ({before.commit}, {before.datetime})")
        print(f"after:  run {after.number} ({after.commit}, {after.datetime})")
        print(history.render_table(rows))
    if args.trend:
        tags = history.write_trend(Path(args.storage), Path(args.trend))
        print(f"trend: {len(tags)} scalar tags in {args.trend}", file=sys.stderr)
    found = history.regressions(before, after, gates)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        red, plain = ("\033[31m", "\033[0m") if sys.stderr.isatty() else ("", "")
        print(f"{red}FAILED: {len(found)} benchmark regression(s) beyond the gate {args.fail}{plain}", file=sys.stderr)
    return REGRESSED if found else OK


if __name__ == "__main__":
    sys.exit(main())
