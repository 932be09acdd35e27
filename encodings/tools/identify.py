"""``python -m posenc identify FILE.py:NAME``: what a RoPE computes, read off its outputs.

Prints :func:`posenc.harness.identify.identification.identify`'s report and the record to register.
NAME is a module class (built with ``--head-dim``) or instance, or a bare function
``f(x, positions)`` (``--protocol single``), ``f(q, k, q_positions, k_positions)`` (``pair``) or
``cos, sin = f(x, position_ids)`` with ``--apply NAME`` (``cos_sin``).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

from ..harness.identify.axes_identification import identify_axes
from ..harness.catalogue.declarations import rotary_claims
from ..harness.identify.identification import (NotIdentified, ProbeTimeout, expectation_mismatches, expected_identification,
                                      identified_record, identify, parse_expected)
from ..harness.catalogue.records import not_applicable, refuted
from ..harness.verdicts.width import terminal_width, wrap_all
from ..harness.catalogue.states import State
from . import cli

# ---------------------------------------------------------------- command line

def _load(spec: str):
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit(f"error: give FILE.py:NAME, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(f"identified_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, getattr(module, name)


def record_code(found, args, apply=None) -> str:
    """A plug-in file that registers the identified RoPE: save it and pass it to ``--plugin``
    (``apply``: the cos/sin protocol's function, which the record needs)."""
    path, _, name = args.target.rpartition(":")
    path = str(Path(path).resolve())  # the plug-in file runs from any directory
    record = identified_record(found, name, build=None, protocol=args.protocol, apply=apply)
    overrides = {claim: declared for claim, declared in record.claims.items()
                 if declared != rotary_claims()[claim]}
    declare = {State.REFUTED: refuted.__name__, State.NA: not_applicable.__name__}
    shown = ",\n".join(f"        {claim!r}: posenc.{declare[d.status]}"
                        f"({d.reason!r}" + (f", specs={d.specs!r}" if d.specs else "") + ")"
                        for claim, d in overrides.items())
    wrap = "lambda c: PositionsOnly(target)" if args.protocol == "single" else "lambda c: target"
    return (f"# save as a plug-in file and run: pytest specs --plugin FILE --encoders {name}\n"
            "import torch\nfrom functools import partial\n\nimport posenc\n"
            "from posenc.encoders.scaling import frequencies as schedules\n"
            "from posenc.harness.identify.identification import PositionsOnly\n\n"
            f"target = __import__('runpy').run_path({path!r})[{name!r}]"
            + (f"({found.head_dim})" if args.class_target else "") + "\n"
            + (f"apply = __import__('runpy').run_path({path!r})[{args.apply!r}]\n" if args.apply else "")
            + f"\nposenc.register(posenc.EncoderRecord(\n    name={name!r}, build={wrap}, kind='rotary',"
            f" protocol={args.protocol!r},\n"
            + ("    apply=apply,\n" if args.apply else "")
            + f"    source={args.target!r},\n    geometry={found.geometry_code()},\n"
            f"    claims=posenc.rotary_claims({{\n{shown}\n    }}),\n    min_head_dim={found.head_dim}, "
            f"max_head_dim={found.head_dim},\n))")


def _q_side(target, protocol: str, apply):
    """``f(x, P)``: the target called by its protocol, q's side."""
    if protocol == "pair":
        return lambda x, P: target(x, x, P, P)[0]
    if protocol == "cos_sin":
        def call(x, P):
            cos, sin = target(x, P)
            return apply(x, x, cos, sin)[0]
        return call
    return target


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m posenc identify", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="FILE.py:NAME, a module class or instance or a function")
    parser.add_argument("--protocol", default="single", choices=("single", "pair", "cos_sin"))
    parser.add_argument("--apply", help="NAME in the same file: apply(q, k, cos, sin) for the cos_sin protocol")
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--base", type=float, help="the nominal base, to name an NTK-aware factor")
    parser.add_argument("--expect", metavar="FAMILY[:key=value,...]",
                        help="the geometry the library documents, e.g. yarn:factor=4,original_max_position=2048 "
                             "(also base=, rotary_fraction=, layout=): compared with the measured one, and the "
                             "plug-in judges against it; exit status 1 when they differ")
    parser.add_argument("--axes", type=int, default=1,
                        help="position axes of a multi-axis RoPE (3: M-RoPE's time, height, width; 2: 2D RoPE), "
                             "called with positions (axes, batch, seq): prints which axis turns which pairs")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds each probing call may take (default 60; 0: no limit)")
    args = parser.parse_args(argv)
    try:
        expected = parse_expected(args.expect) if args.expect else None
    except ValueError as error:
        parser.error(str(error))
    module, target = _load(args.target)
    args.class_target = inspect.isclass(target)
    if args.class_target:
        target = target(args.head_dim)
    apply = getattr(module, args.apply) if args.apply else None
    if args.axes > 1:
        if args.protocol == "cos_sin" and apply is None:
            parser.error("--protocol cos_sin needs --apply NAME")
        try:
            axes = identify_axes(_q_side(target, args.protocol, apply), head_dim=args.head_dim, axes=args.axes)
        except Exception as error:  # noqa: BLE001 - the target's own failure, named
            print(f"error: {args.target} called by the {args.protocol} protocol with positions (axes, batch, seq): "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
            return 1
        print(axes.report())
        code = axes.geometry_code()
        print(f"\ngeometry to declare: {code}" if code else "\nno sections to declare: see the note above")
        return 0
    try:
        found = identify(target, protocol=args.protocol, apply=apply, head_dim=args.head_dim, base=args.base,
                         timeout=args.timeout or None)
    except (NotIdentified, ProbeTimeout) as error:
        print(f"error: {args.target}: {error}", file=sys.stderr)
        return 1
    print(found.report())
    mismatches = expectation_mismatches(found, *expected) if expected else []
    if expected:
        lines = [f"expected:        {args.expect}: " + ("MISMATCH, a defect" if mismatches else "matches"),
                 *(f"  MISMATCH:      {said}" for said in mismatches)]
        print("\n".join(wrap_all(lines, terminal_width(), " " * 17)))
        found = expected_identification(found, *expected)
    print("\n" + record_code(found, args, apply))
    print(f"\nor run every spec against the identified geometry:\n    pytest specs --identify {args.target}"
          + (f" --identify-protocol {args.protocol}" if args.protocol != "single" else "")
          + (f" --identify-apply {args.apply}" if args.apply else "")
          + (f" --identify-expect {args.expect}" if args.expect else ""))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
