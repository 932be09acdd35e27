"""``python -m posenc suite-benchmark``: how long the default ``pytest specs`` takes, and where.

Runs the default run serially and with ``-n 2`` (``--repeat`` times each, start-up included),
then both again with a plug-in file of extra RoPEs added (``--added``), and reads every test's
time from pytest's JUnit XML: the cost of each spec family (module) and of each encoder, and the
time each added RoPE costs. ``--write`` keeps the figures in ``docs/measurements/suite.json``,
from which ``python -m posenc docs --write`` renders the table in the docs. A script, not a timed
test: timings belong in a benchmark run on an idle machine, never in a pass/fail test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from importlib.metadata import version
from pathlib import Path

from posenc.tools import cli

MEASUREMENTS = Path("docs/measurements/suite.json")
ADDED = "tests/plugins/production_ropes.py"
TARGET_ENCODERS = 40  # the encoder count the run's time budget is set for


def _run(extra: list[str], out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as users run it: pytest's rewritten modules cached between runs
    junit = out / "junit.xml"
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--matrix-dir", str(out),
               "--junitxml", str(junit), "--matrix", "none", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not (out / "verdicts.json").exists():
        raise RuntimeError(f"pytest {' '.join(extra)} wrote no report:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    header = json.loads((out / "verdicts.json").read_text())["header"]
    cases = [(case.get("classname", ""), case.get("name", ""), float(case.get("time", 0)))
             for case in ElementTree.parse(junit).iter("testcase")]
    print(f"  {' '.join(extra) or 'serial'}: {wall:.1f} s, {len(cases)} cases, {len(header['encoders'])} encoders",
          file=sys.stderr)
    return {"wall": wall, "encoders": header["encoders"], "cases": cases, "status": header["status"]}


def _encoder_of(name: str, encoders: list[str]) -> str | None:
    inside = name.partition("[")[2].rstrip("]")
    matches = [e for e in encoders if inside == e or inside.startswith(e + "-")]
    return max(matches, key=len) if matches else None


def measure(repeat: int, added: str) -> dict:
    runs: dict[str, list[dict]] = {"serial": [], "n2": [], "added": [], "added_n2": []}
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(repeat):
            for key, extra in (("serial", []), ("n2", ["-n", "2"]), ("added", ["--plugin", added]),
                               ("added_n2", ["--plugin", added, "-n", "2"])):
                out = Path(scratch) / f"{key}-{i}"
                out.mkdir()
                runs[key].append(_run(extra, out))
    base = runs["serial"][0]
    families: dict[str, float] = {}
    per_encoder: dict[str, float] = {}
    for classname, name, seconds in base["cases"]:
        family = classname.rsplit(".", 1)[-1]
        families[family] = families.get(family, 0.0) + seconds
        encoder = _encoder_of(name, base["encoders"])
        if encoder:
            per_encoder[encoder] = per_encoder.get(encoder, 0.0) + seconds
    count_added = len(runs["added"][0]["encoders"]) - len(base["encoders"])
    from posenc.harness.performance import machine

    return {
        "machine": machine.device_name("cpu"), "torch": __import__("torch").__version__,
        "pytest": version("pytest"), "pytest_xdist": version("pytest-xdist"),
        "date": time.strftime("%Y-%m-%d"), "repeat": repeat,
        "encoders": len(base["encoders"]), "cases": len(base["cases"]),
        "serial": [r["wall"] for r in runs["serial"]], "n2": [r["wall"] for r in runs["n2"]],
        "added": {"plugin": added, "count": count_added, "serial": [r["wall"] for r in runs["added"]],
                  "n2": [r["wall"] for r in runs["added_n2"]]},
        "families": dict(sorted(families.items(), key=lambda kv: -kv[1])),
        "per_encoder": dict(sorted(per_encoder.items(), key=lambda kv: -kv[1])),
    }


def table_markdown(path: Path = MEASUREMENTS, top: int = 10) -> str:
    if not Path(path).exists():
        return f"(not measured yet: `python -m posenc suite-benchmark --write` keeps the figures in {path})\n"
    data = json.loads(Path(path).read_text())
    median = statistics.median
    serial, parallel, added = median(data["serial"]), median(data["n2"]), median(data["added"]["serial"])
    count = data["added"]["count"]
    per_added = (added - serial) / count if count else float("nan")
    per_added_n2 = (median(data["added"]["n2"]) - parallel) / count if count else float("nan")
    missing = max(0, TARGET_ENCODERS - data["encoders"])  # encoders short of the budget's count
    runs = ", ".join(f"{t:.1f}" for t in data["serial"])
    versions = f", pytest {data['pytest']}, pytest-xdist {data['pytest_xdist']}" if "pytest" in data else ""
    measured = (f"Measured on {data['machine']}, torch {data['torch']}{versions}, {data['date']}: the default run with "
                f"{data['encoders']} encoders ({data['cases']} test cases), "
                + (f"median of {data['repeat']} runs each" if data["repeat"] > 1 else "one run each")
                + ", start-up included.")
    lines = [*textwrap.wrap(measured, 100, break_on_hyphens=False), "",
             "| run | wall time (median) | the runs |", "|---|---:|---|",
             f"| `pytest specs` | {serial:.1f} s | {runs} |",
             f"| `pytest specs -n 2` | {parallel:.1f} s | {', '.join(f'{t:.1f}' for t in data['n2'])} |",
             f"| serial, {data['added']['count']} RoPEs of `{data['added']['plugin']}` added | {added:.1f} s | "
             f"{', '.join(f'{t:.1f}' for t in data['added']['serial'])} |",
             f"| `-n 2`, with the {data['added']['count']} RoPEs added | {median(data['added']['n2']):.1f} s | "
             f"{', '.join(f'{t:.1f}' for t in data['added']['n2'])} |",
             f"| per added RoPE, serial | {per_added:.2f} s | |",
             f"| serial at {TARGET_ENCODERS} encoders (the default run plus {missing} × per added RoPE) | "
             f"{serial + missing * per_added:.1f} s | projected |",
             f"| `-n 2` at {TARGET_ENCODERS} encoders (likewise, per added RoPE under `-n 2`: "
             f"{per_added_n2:.2f} s) | {parallel + missing * per_added_n2:.1f} s | projected |", "",
             f"The {top} costliest spec families and encoders (serial, the first run; test time only):", "",
             "| spec module | s | encoder | s |", "|---|---:|---|---:|"]
    families, encoders = list(data["families"].items())[:top], list(data["per_encoder"].items())[:top]
    for (family, f_s), (encoder, e_s) in zip(families, encoders):
        lines.append(f"| `{family}` | {f_s:.1f} | `{encoder}` | {e_s:.1f} |")
    return "\n".join(lines) + "\n"


def summary_markdown(path: Path = MEASUREMENTS) -> str:
    """One sentence for README: the default run's wall time, where it was measured."""
    if not Path(path).exists():
        return "(the default run's wall time is not measured yet: `python -m posenc suite-benchmark --write`)\n"
    data = json.loads(Path(path).read_text())
    median = statistics.median
    text = (f"On {data['machine']} (torch {data['torch']}, {data['date']}) the default run of {data['encoders']} "
            f"encoders takes {median(data['serial']):.0f} s serially and {median(data['n2']):.0f} s with `-n 2`, "
            "start-up included (`python -m posenc suite-benchmark`).")
    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc suite-benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind (default 3; the table shows medians)")
    parser.add_argument("--added", default=ADDED, help=f"plug-in file of RoPEs to add (default {ADDED})")
    parser.add_argument("--write", action="store_true", help=f"keep the figures in {MEASUREMENTS}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    return cli.keep_measurements(measure(args.repeat, args.added), MEASUREMENTS, args.write, table_markdown)


if __name__ == "__main__":
    sys.exit(main())
