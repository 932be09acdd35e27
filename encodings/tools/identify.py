"""Identify a RoPE from its outputs: which coordinates pair up, how fast each pair turns, which
frequency family that is, how much of each head turns, and what scales the result.

A rotation can be read off its outputs: feeding the basis vectors ``e_j`` of one head, every token
at position ``p``, gives the map's matrix ``M_p`` column by column. Then

* **pairs and layout**: the coordinates ``M_1`` mixes (``(2i, 2i+1)`` interleaved, ``(i, i + r/2)``
  half-split); an output order that is a fixed permutation at ``p = 0`` is the concatenated layout;
  coordinates ``M_p`` leaves alone are the unrotated part (partial rotary);
* **frequencies**: the rate ``M_2 M_1ᵀ`` turns each pair by ``θ_i`` (a rate, so an origin shift
  does not bias it), matched against the families of :mod:`posenc.encoders.scaling.frequencies`:
  default ``base^(−2i/r)`` (the base fitted), linear interpolation (the factor fitted), YaRN and
  Llama 3 at common settings; anything else is "custom", with the measured θ;
* **scale**: column norms at ``p = 0`` (a constant factor such as YaRN's) and their change with
  ``p`` (xPos), for q and, where the protocol separates them, k.

``python -m posenc identify FILE.py:NAME [--protocol single|pair|cos_sin] [--apply NAME]`` prints
the report and a record to register; :func:`identify` returns it. NAME is a module class or
instance, or a bare function ``f(x, positions)`` (``single``), ``f(q, k, q_positions,
k_positions)`` (``pair``) or ``cos, sin = f(x, position_ids)`` with ``--apply``.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..encoders.scaling import frequencies as schedules

#: Where θ is refined (past most tables, inside a trained length of 128) and where length dependence is probed.
FINE, FAR = 64, 4096
#: Relative agreement a measured θ needs with a family's to be named after it.
FAMILY_RTOL = 1e-4
YARN_GRID = [(s, L) for s in (2.0, 4.0, 8.0, 16.0, 32.0, 40.0, 64.0) for L in (512, 1024, 2048, 4096, 8192, 32768)]
LLAMA3_GRID = [(s, L) for s in (2.0, 4.0, 8.0, 16.0, 32.0) for L in (2048, 4096, 8192, 16384, 32768)]


@dataclass
class Identification:
    head_dim: int
    layout: str
    rotary_dim: int
    theta: list[float]
    family: str
    parameters: dict = field(default_factory=dict)
    magnitude: float = 1.0
    scale_by_position: bool = False
    q_and_k_differ: bool = False
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        shown = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.parameters.items())
        lines = [
            f"layout:          {self.layout} (pairs of the rotated width {self.rotary_dim} of head_dim {self.head_dim})",
            f"partial rotary:  {self.rotary_dim}/{self.head_dim} rotated"
            + ("" if self.rotary_dim == self.head_dim else f" ({self.head_dim - self.rotary_dim} unrotated)"),
            f"frequencies:     {self.family}" + (f" ({shown})" if shown else ""),
            f"  θ_i measured:  {', '.join(f'{t:.6g}' for t in self.theta[:8])}{' …' if len(self.theta) > 8 else ''}",
            f"scale:           {self.magnitude:.6g} at position 0"
            + (", changing with position (xPos-like)" if self.scale_by_position else ", constant in position")
            + ("; q and k scaled differently" if self.q_and_k_differ else ""),
        ]
        lines += [f"note:            {note}" for note in self.notes]
        return "\n".join(lines)

    def geometry_code(self) -> str:
        """The ``RotaryGeometry`` a record should declare, as Python source."""
        fields = [f"layout={self.layout!r}"]
        if self.rotary_dim != self.head_dim:
            fields.append(f"rotary_fraction={self.rotary_dim / self.head_dim:g}")
        p = self.parameters
        if self.family == "linear":
            fields.append(f"scaling_factor={p['factor']:g}, base={p['base']:g}")
        elif self.family == "default":
            fields.append(f"base={p['base']:g}")
        elif self.family in ("yarn", "llama3"):
            args = ", ".join(f"{k}={v:g}" for k, v in p.items() if k != "base")
            fields.append(f"frequencies=partial(schedules.{self.family}, {args}), base={p['base']:g}")
        if abs(self.magnitude - 1) > 1e-6:
            fields.append(f"magnitude={self.magnitude:.6g}")
        fields.append("angle_dtype=torch.float32")
        return f"posenc.RotaryGeometry({', '.join(fields)})"


# ---------------------------------------------------------------- calling the target

def caller(target, protocol: str = "single", apply=None, side: str = "q"):
    """``f(x, positions) -> y`` on ``(1, n, 1, d)`` for any protocol (``side`` picks q or k of a pair)."""
    index = 0 if side == "q" else 1
    if protocol == "single":
        return lambda x, p: target(x, p)
    if protocol == "pair":
        return lambda x, p: target(x, x, p[None], p[None])[index]
    if protocol == "cos_sin":
        if apply is None:
            raise ValueError("the cos_sin protocol needs apply(q, k, cos, sin)")
        return lambda x, p: apply(x, x, *target(x, p[None]))[index]
    raise ValueError(f"protocol must be single, pair or cos_sin, got {protocol!r}")


def probe_matrix(call, head_dim: int, position: int, dtype=torch.float64) -> torch.Tensor:
    """``M_p`` in float64: column ``j`` is the output for the basis vector ``e_j`` at position ``p``."""
    basis = torch.eye(head_dim, dtype=dtype)[None, :, None, :]  # (1, d, 1, d): token j carries e_j
    with torch.no_grad():
        out = call(basis, torch.full((head_dim,), position, dtype=torch.long))
    return out.reshape(head_dim, head_dim).T.to(torch.float64)


def _probe_dtype(call, head_dim: int) -> torch.dtype:
    for dtype in (torch.float64, torch.float32):
        try:
            probe_matrix(call, head_dim, 1, dtype)
            return dtype
        except Exception:  # noqa: BLE001 - a target that refuses float64 is probed in float32
            continue
    raise ValueError("the target accepts neither float64 nor float32 input of shape (1, n, 1, head_dim)")


# ---------------------------------------------------------------- reading the matrices

def _pairs(rate: torch.Tensor) -> dict[int, int]:
    """Coordinate -> partner, from the off-diagonal support of a rotation's matrix."""
    tol = 1e-6 * float(rate.abs().max())
    partners = {}
    for j in range(rate.shape[0]):
        mixed = [i for i in range(rate.shape[0]) if i != j and abs(float(rate[i, j])) > tol]
        if len(mixed) == 1:
            partners[j] = mixed[0]
    return partners


def _layout(partners: dict[int, int], m0: torch.Tensor, rotated: int) -> str:
    firsts = sorted(j for j, i in partners.items() if j < i)
    if firsts == list(range(0, rotated, 2)) and all(partners[j] == j + 1 for j in firsts):
        return "interleaved"
    if firsts == list(range(rotated // 2)) and all(partners[j] == j + rotated // 2 for j in firsts):
        order = torch.cat((torch.arange(0, rotated, 2), torch.arange(1, rotated, 2)))
        permuted = torch.zeros_like(m0[:rotated, :rotated])
        permuted[torch.arange(rotated), order] = 1.0
        scale = float(m0[:rotated, :rotated].abs().max()) or 1.0
        return "concatenated" if torch.allclose(m0[:rotated, :rotated] / scale, permuted, atol=1e-4) else "half_split"
    return "other"


def _fit_family(theta: torch.Tensor, rotary_dim: int, nominal_base: float | None) -> tuple[str, dict, list[str]]:
    pairs = len(theta)
    notes = []
    if pairs < 2:
        return "custom", {}, ["one pair: θ_0 alone cannot tell a family"]
    i = torch.arange(pairs, dtype=torch.float64)

    def close(expected):
        return bool(torch.allclose(theta, torch.as_tensor(expected, dtype=torch.float64), rtol=FAMILY_RTOL, atol=0))

    def roundest(value, fits):
        """The value with the fewest significant digits that still fits (a fitted 500001 is 500000)."""
        return next((c for c in (float(f"{value:.{d}g}") for d in range(1, 9)) if fits(c)), value)

    factor = 1.0 / float(theta[0])
    base = float(theta[1] * factor) ** (-rotary_dim / 2.0)
    if close(base ** (-2 * i / rotary_dim) / factor):
        fitted = base
        factor = roundest(factor, lambda f: close(base ** (-2 * i / rotary_dim) / f))
        base = roundest(base, lambda b: close(b ** (-2 * i / rotary_dim) / factor))
        if abs(factor - 1) < FAMILY_RTOL:
            if nominal_base and abs(base / nominal_base - 1) > FAMILY_RTOL and rotary_dim > 2:
                s = (fitted / nominal_base) ** ((rotary_dim - 2) / rotary_dim)
                notes.append(f"against the nominal base {nominal_base:g}: NTK-aware with factor {s:.6g}")
            return "default", {"base": base}, notes
        return "linear", {"factor": factor, "base": base}, notes
    kept = float(theta[1]) ** (-rotary_dim / 2.0)  # YaRN and Llama 3 keep the fastest pairs
    kept = roundest(kept, lambda b: abs(b ** (-2 / rotary_dim) / float(theta[1]) - 1) < FAMILY_RTOL)
    bases = [b for b in (nominal_base, kept) if b]
    for b in bases:
        for s, original in YARN_GRID:
            if close(schedules.yarn(rotary_dim, b, factor=s, original_max_position=original)):
                return "yarn", {"factor": s, "original_max_position": original, "base": b}, notes
        for s, original in LLAMA3_GRID:
            if close(schedules.llama3(rotary_dim, b, factor=s, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_max_position=original)):
                return "llama3", {"factor": s, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position": original, "base": b}, notes
    return "custom", {}, ["θ matches no known family within the tolerance: see the measured values"]


def identify(target, *, protocol: str = "single", apply=None, head_dim: int = 16,
             base: float | None = None) -> Identification:
    """Read the geometry of ``target`` (see the module docstring)."""
    q_call = caller(target, protocol, apply, "q")
    dtype = _probe_dtype(q_call, head_dim)
    m = {p: probe_matrix(q_call, head_dim, p, dtype) for p in (0, 1, 2, FINE)}
    rate = m[2] @ m[1].T
    partners = _pairs(m[FINE] @ m[0].T)  # the slowest pairs have turned visibly by FINE
    rotated = len(partners)
    unrotated = [j for j in range(head_dim) if j not in partners]
    notes = []
    if rotated % 2 or any(j < rotated for j in unrotated):
        notes.append(f"the rotated coordinates are not the first ones of the head: {sorted(partners)}")
    layout = _layout(partners, m[0], rotated)
    firsts = sorted(j for j, i in partners.items() if j < i)
    coarse = [math.atan2(float(rate[partners[a], a]), float(rate[a, a])) for a in firsts]
    # Refined at FINE: θ = (φ + 2πk) / FINE, k from the coarse rate (one fp32 rounding of FINE·θ, not of θ).
    turned = m[FINE] @ m[0].T
    theta = torch.tensor([(phase + 2 * math.pi * round((FINE * c - phase) / (2 * math.pi))) / FINE
                          for c, phase in ((c, math.atan2(float(turned[partners[a], a]), float(turned[a, a])))
                                           for c, a in zip(coarse, firsts, strict=True))], dtype=torch.float64)
    far = probe_matrix(q_call, head_dim, FAR + 1, dtype) @ probe_matrix(q_call, head_dim, FAR, dtype).T
    far_theta = [math.atan2(float(far[partners[a], a]), float(far[a, a])) for a in firsts]
    if any(abs(f - c) > 1e-3 * max(abs(c), 1e-12) + 1e-6 for f, c in zip(far_theta, coarse, strict=True)):
        notes.append(f"θ at position {FAR} differs from θ near 0: it depends on the position or the call's length "
                     "(dynamic NTK, LongRoPE), declare a length-dependent schedule")
    family, parameters, fit_notes = _fit_family(theta, rotated, base)
    norms = {p: m[p][:, :rotated].norm(dim=0) for p in m}
    magnitude = float(norms[0].mean())
    by_position = not torch.allclose(norms[64], norms[0], rtol=1e-4)
    differ = False
    if protocol != "single":
        k_matrix = probe_matrix(caller(target, protocol, apply, "k"), head_dim, 64, dtype)
        differ = not torch.allclose(k_matrix, m[64], rtol=1e-4, atol=1e-6)
    if dtype != torch.float64:
        notes.append("probed in float32: the target refuses float64 input")
    return Identification(head_dim, layout, rotated, theta.tolist(), family, parameters, magnitude, by_position,
                          differ, notes + fit_notes)


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
