"""``python -m posenc extrapolation``: the length-extrapolation experiment.

Trains one small causal LM per (encoding, seed) at length L, scores it at L … 8L, prints
``results.md`` and writes it with ``results.json``, TensorBoard summaries and a PNG under ``--out``.
Progress goes to stderr. ``--quick`` is the CI-sized run (L = 16, one seed, a few steps).

The engine is :mod:`posenc.experiments.length_extrapolation`.
"""

from __future__ import annotations

import sys

from posenc.experiments.length_extrapolation import ENCODINGS, ExperimentConfig, markdown_report, run_experiment
from posenc.tools import cli


def parse_config(argv: list[str] | None = None) -> tuple[ExperimentConfig, str]:
    parser = cli.ArgumentParser(prog="python -m posenc extrapolation", description=__doc__.split("\n\n")[1])
    parser.add_argument("--seeds", type=int, help="number of model seeds (0 … N-1); default 3, 1 with --quick")
    parser.add_argument("--steps", type=int, help="training steps per model")
    parser.add_argument("--out", default="profiles/extrapolation", help="output folder (default %(default)s)")
    parser.add_argument("--workers", type=int, help="worker processes (default: the CPUs available)")
    parser.add_argument("--encodings", nargs="+", choices=ENCODINGS, help="encodings to train (default: all)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="CI-sized run: L = 16, lengths to 4L, one seed")
    size.add_argument("--small", action="store_true",
                      help="half the steps and evaluation sequences, same L, lengths and seeds (same verdicts)")
    args = parser.parse_args(argv)
    overrides = {name: value for name, value in (
        ("seeds", tuple(range(args.seeds)) if args.seeds is not None else None), ("steps", args.steps),
        ("workers", args.workers), ("encodings", tuple(args.encodings) if args.encodings else None),
    ) if value is not None}
    try:
        size = ExperimentConfig.quick if args.quick else ExperimentConfig.small if args.small else ExperimentConfig
        config = size(**overrides)
    except ValueError as error:
        parser.error(str(error))
    return config, args.out


def main(argv: list[str] | None = None) -> None:
    config, out = parse_config(argv)
    results = run_experiment(config, out, progress=sys.stderr)
    print(markdown_report(results))
    print(f"wrote {out}/results.json, results.md, loss_by_position.png, tensorboard/ "
          f"({results['wall_seconds']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
