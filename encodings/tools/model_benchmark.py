"""``python -m posenc model-benchmark``: what the model relations of every transformers
architecture add to a serial ``pytest specs`` run, with one and with two torch threads, on an
idle machine and beside another job.

Runs, serially and ``--repeat`` times each, ``pytest specs --plugin posenc.ecosystem`` with the
model records only (``--encoders 'lm_*'``) and the same run with one contract case selected
(start-up, the plug-in's import and collection: what any run pays already), and reads each case's time from
pytest's JUnit XML. The added time is the difference of the medians. Each pair runs with
``--perf-threads 1`` and ``2``, idle and beside a job that keeps every core busy (a torch matmul
loop with torch's default threads, started before the pair and stopped after it). ``--write``
keeps the figures in ``docs/measurements/model-benchmark.json``, from which ``python -m posenc
docs --write`` renders them. A script, not a timed test.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from posenc.tools import cli
from posenc.tools.suite_benchmark import _encoder_of, _run

MEASUREMENTS = Path("docs/measurements/model-benchmark.json")
PLUGIN = ["--plugin", "posenc.ecosystem", "--encoders", "lm_*"]  # posenc.ecosystem.findings.MODEL_ENCODERS
#: What any run pays already: start-up, the plug-in's import, collection, and one contract case.
BASELINE = ["--plugin", "posenc.ecosystem", "--encoders", "lm_gpt2", "-k", "test_a_model_answers"]
#: The other job: torch matmuls with torch's default thread count, until stopped.
BUSY = "import torch\na = torch.randn(1024, 1024)\nwhile True:\n    a @ a\n"
THREADS = (1, 2)
LOADS = ("idle", "beside a job")


def condition(threads: int, load: str) -> str:
    """A condition's name: ``"1 thread, idle"``, ``"2 threads, beside a job"``."""
    return f"{threads} thread{'s' * (threads > 1)}, {load}"


@contextlib.contextmanager
def _load(kind: str):
    job = subprocess.Popen([sys.executable, "-c", BUSY]) if kind == LOADS[1] else None
    try:
        yield
    finally:
        if job is not None:
            job.kill()
            job.wait()


def measure(repeat: int) -> dict:
    conditions: dict[str, dict] = {}
    per_model: dict[str, float] = {}
    base = None
    with tempfile.TemporaryDirectory() as scratch:
        for load in LOADS:
            for threads in THREADS:
                runs: dict[str, list[dict]] = {"models": [], "start-up": []}
                with _load(load):
                    for i in range(repeat):
                        for key, extra in (("models", PLUGIN), ("start-up", BASELINE)):
                            out = Path(scratch) / f"{load}-{threads}-{key}-{i}"
                            out.mkdir()
                            runs[key].append(_run([*extra, "--perf-threads", str(threads)], out))
                conditions[condition(threads, load)] = {
                    "threads": threads, "load": load, "with_models": [r["wall"] for r in runs["models"]],
                    "start_up": [r["wall"] for r in runs["start-up"]]}
                if base is None:
                    base = runs["models"][0]
    for _, name, seconds in base["cases"]:
        model = _encoder_of(name, base["encoders"])
        if model:
            per_model[model] = per_model.get(model, 0.0) + seconds
    from posenc.harness.performance import machine

    return {"machine": machine.device_name("cpu"), "torch": __import__("torch").__version__,
            "transformers": __import__("transformers").__version__, "date": time.strftime("%Y-%m-%d"),
            "repeat": repeat, "models": len(base["encoders"]), "cases": len(base["cases"]),
            "conditions": conditions, "per_model": dict(sorted(per_model.items(), key=lambda kv: -kv[1]))}


def _added(condition: dict) -> float:
    return statistics.median(condition["with_models"]) - statistics.median(condition["start_up"])


def budget_markdown(path: Path = MEASUREMENTS) -> str:
    if not Path(path).exists():
        return f"(not measured yet: `python -m posenc model-benchmark --write` keeps the figures in {path})\n"
    data = json.loads(Path(path).read_text())
    machine = data["machine"].split(",")[0] + ", " + data["machine"].split(",")[1].strip()
    costliest = ", ".join(f"`{m}` {s:.1f} s" for m, s in list(data["per_model"].items())[:3])
    text = (f"Measured on {machine} (torch {data['torch']}, transformers {data['transformers']}, {data['date']}; "
            + (f"median of {data['repeat']} runs" if data["repeat"] > 1 else "one run")
            + f"): the model relations of all {data['models']} models ({data['cases']} cases) add to a serial "
            f"run, start-up excluded:")
    lines = textwrap.wrap(text, 100, break_on_hyphens=False) + ["", "| torch threads | idle | beside a job |",
                                                                 "|---|---|---|"]
    for threads in THREADS:
        cells = [f"{_added(data['conditions'][condition(threads, load)]):.1f} s" for load in LOADS]
        lines.append(f"| {threads} | " + " | ".join(cells) + " |")
    lines += ["", *textwrap.wrap(f"Costliest with one thread, idle: {costliest}.", 100, break_on_hyphens=False)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc model-benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind (default 3; medians are shown)")
    parser.add_argument("--write", action="store_true", help=f"keep the figures in {MEASUREMENTS}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    return cli.keep_measurements(measure(args.repeat), MEASUREMENTS, args.write, budget_markdown)


if __name__ == "__main__":
    sys.exit(main())
