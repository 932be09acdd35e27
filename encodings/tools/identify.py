"""``python -m posenc identify FILE.py:NAME``: what a RoPE computes, read off its outputs.

Prints :func:`posenc.harness.identification.identify`'s report and the record to register.
NAME is a module class (built with ``--head-dim``) or instance, or a bare function
``f(x, positions)`` (``--protocol single``), ``f(q, k, q_positions, k_positions)`` (``pair``) or
``cos, sin = f(x, position_ids)`` with ``--apply NAME`` (``cos_sin``).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from pathlib import Path

from ..harness.identification import identify

# ---------------------------------------------------------------- command line

def _load(spec: str):
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit(f"error: give FILE.py:NAME, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(f"identified_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, getattr(module, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc identify", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="FILE.py:NAME, a module class or instance or a function")
    parser.add_argument("--protocol", default="single", choices=("single", "pair", "cos_sin"))
    parser.add_argument("--apply", help="NAME in the same file: apply(q, k, cos, sin) for the cos_sin protocol")
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--base", type=float, help="the nominal base, to name an NTK-aware factor")
    args = parser.parse_args(argv)
    module, target = _load(args.target)
    if inspect.isclass(target):
        target = target(args.head_dim)
    apply = getattr(module, args.apply) if args.apply else None
    found = identify(target, protocol=args.protocol, apply=apply, head_dim=args.head_dim, base=args.base)
    print(found.report())
    print("\ndeclare it as:\n    geometry=" + found.geometry_code())
    print(f"\nor run every spec against the identified geometry:\n    pytest specs --identify {args.target}"
          + (f" --identify-protocol {args.protocol}" if args.protocol != "single" else "")
          + (f" --identify-apply {args.apply}" if args.apply else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
