"""``python -m posenc COMMAND``: the project's command-line tools.

* ``compare [BEFORE] [AFTER]`` - benchmark histories side by side (:mod:`posenc.tools.compare`);
* ``readme [--write]`` - the generated README sections (:mod:`posenc.tools.readme`);
* ``precision`` - RoPE's phase-precision table (:mod:`posenc.tools.precision`);
* ``identify FILE.py:NAME`` - a RoPE's layout, frequencies and scale, read off its outputs (:mod:`posenc.tools.identify`);
* ``extrapolation [--quick]`` - small models trained at length L, scored at L … 8L (:mod:`posenc.tools.extrapolation`).
"""

import runpy
import sys

COMMANDS = {"compare": "posenc.tools.compare", "readme": "posenc.tools.readme", "precision": "posenc.tools.precision",
            "identify": "posenc.tools.identify", "extrapolation": "posenc.tools.extrapolation"}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m posenc {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        sys.exit(2)
    command = sys.argv.pop(1)
    sys.argv[0] = f"python -m posenc {command}"
    runpy.run_module(COMMANDS[command], run_name="__main__")
