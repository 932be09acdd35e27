"""``python -m posenc model-benchmark``: what the model relations of every transformers
architecture add to a serial ``pytest specs`` run.

Runs, serially and ``--repeat`` times each, ``pytest specs --plugin posenc.ecosystem`` with the
model records only (``--encoders 'lm_*'``) and the same run with one contract case selected
(start-up, the plug-in's import and collection: what any run pays already), and reads each case's time from
pytest's JUnit XML. The added time is the difference of the medians. ``--write`` keeps the
figures in ``docs/measurements/model-benchmark.json``, from which ``python -m posenc docs
--write`` renders them. A script, not a timed test.
"""

from __future__ import annotations

import json
import statistics
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


def measure(repeat: int) -> dict:
    runs: dict[str, list[dict]] = {"models": [], "start-up": []}
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(repeat):
            for key, extra in (("models", PLUGIN), ("start-up", BASELINE)):
                out = Path(scratch) / f"{key}-{i}"
                out.mkdir()
                runs[key].append(_run(extra, out))
    base = runs["models"][0]
    per_model: dict[str, float] = {}
    for _, name, seconds in base["cases"]:
        model = _encoder_of(name, base["encoders"])
        if model:
            per_model[model] = per_model.get(model, 0.0) + seconds
    from posenc.harness import machine

    return {"machine": machine.device_name("cpu"), "torch": __import__("torch").__version__,
            "transformers": __import__("transformers").__version__, "date": time.strftime("%Y-%m-%d"),
            "repeat": repeat, "models": len(base["encoders"]), "cases": len(base["cases"]),
            "with_models": [r["wall"] for r in runs["models"]], "start_up": [r["wall"] for r in runs["start-up"]],
            "per_model": dict(sorted(per_model.items(), key=lambda kv: -kv[1]))}


def budget_markdown(path: Path = MEASUREMENTS) -> str:
    if not Path(path).exists():
        return f"(not measured yet: `python -m posenc model-benchmark --write` keeps the figures in {path})\n"
    data = json.loads(Path(path).read_text())
    median = statistics.median
    added = median(data["with_models"]) - median(data["start_up"])
    costliest = ", ".join(f"`{m}` {s:.1f} s" for m, s in list(data["per_model"].items())[:3])
    text = (f"Measured on {data['machine']} (torch {data['torch']}, transformers {data['transformers']}, "
            f"{data['date']}; " + (f"median of {data['repeat']} runs" if data["repeat"] > 1 else "one run")
            + f"): the model relations of all {data['models']} models ({data['cases']} cases) add "
            f"**{added:.1f} s** to a serial run ({median(data['with_models']):.1f} s with them, "
            f"{median(data['start_up']):.1f} s for start-up, collection and one case). Costliest: {costliest}.")
    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc model-benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind (default 3; medians are shown)")
    parser.add_argument("--write", action="store_true", help=f"keep the figures in {MEASUREMENTS}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    data = measure(args.repeat)
    if args.write:
        MEASUREMENTS.write_text(json.dumps(data, indent=1) + "\n")
        print(f"kept in {MEASUREMENTS}", file=sys.stderr)
    print(budget_markdown(MEASUREMENTS) if args.write else json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
