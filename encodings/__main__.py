"""``python -m posenc COMMAND``: the project's command-line tools (``python -m posenc --help``)."""

import runpy
import sys

#: command -> (module, what it does in one line)
COMMANDS = {
    "compare": ("posenc.tools.compare", "saved benchmark runs side by side; --fail GATE exits 1 on a regression"),
    "report": ("posenc.tools.report", "--recover: the report of a run that died, from its journal (status crashed)"),
    "docs": ("posenc.tools.docs", "check the generated sections of README and docs/; --write rewrites them"),
    "precision": ("posenc.tools.precision", "RoPE's phase error against float64 by angle dtype and position"),
    "identify": ("posenc.tools.identify", "a RoPE's layout, frequencies and scale, read off its outputs"),
    "extrapolation": ("posenc.tools.extrapolation", "small models trained at length L, scored at L … 8L"),
    "suite-benchmark": ("posenc.tools.suite_benchmark", "wall time of the default pytest specs, by spec family and encoder"),
    "model-benchmark": ("posenc.tools.model_benchmark", "what the model relations of every architecture add to a run"),
    "perf-benchmark": ("posenc.tools.perf_figures", "wall time of pytest specs -m perf, short against full length"),
}
USAGE = "usage: python -m posenc COMMAND [options]   (python -m posenc COMMAND --help for its options)"


def help_text() -> str:
    width = max(map(len, COMMANDS))
    return "\n".join([USAGE, "", "commands:", *(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(help_text(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)} (python -m posenc --help)",
              file=sys.stderr)
        return 2
    command = argv[0]
    sys.argv = [f"python -m posenc {command}", *argv[1:]]
    runpy.run_module(COMMANDS[command][0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
