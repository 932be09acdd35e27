"""Which position axis turns which pairs of a multi-axis RoPE (M-RoPE, 2D RoPE), read off its outputs.

The target is called as ``f(x, P)`` with ``x`` of shape ``(1, head_dim, 1, head_dim)`` (token ``j``
the basis vector ``e_j``) and ``P`` of shape ``(axes, 1, head_dim)``, every token at one position
vector: the outputs are the columns of the map ``M_P``. At ``P = e_a`` (position 1 on axis ``a``,
0 elsewhere) the coordinates ``M_P`` moves are the pairs axis ``a`` owns, and each pair's angle is
its frequency. The pairs are named in the layout the map shows (``(i, i + r/2)`` half-split or
``(2i, 2i+1)`` interleaved); the sections are the pair counts per axis, their order contiguous
(Qwen2-VL), interleaved (Qwen3-VL's rule), spatial_interleaved (Ernie 4.5 VL) or neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ...encoders.multiaxis import ORDERS, pair_axes
from ..verdicts.width import terminal_width, wrap_all

AXIS_NAMES = {2: ("height", "width"), 3: ("time", "height", "width")}


@dataclass
class AxesIdentification:
    head_dim: int
    axes: int
    layout: str  # half_split | interleaved | other
    owner: list[int | None]  # per pair: the axis that turns it (None: no axis, or more than one)
    theta: list[float]  # per pair: its angle per unit of its axis
    rotary_dim: int = 0  # the rotated width: the first coordinates any axis moves
    order: str = "contiguous"  # contiguous | interleaved | other
    schedule: str = "shared"  # shared (θ over the head, M-RoPE) | per_axis (each axis restarts at θ = 1: axial)
    notes: list[str] = field(default_factory=list)

    @property
    def sections(self) -> tuple[int, ...]:
        return tuple(sum(1 for o in self.owner if o == axis) for axis in range(self.axes))

    @property
    def parts(self) -> tuple[int, ...]:
        """The sections as shares (Qwen2-VL's 16:24:24 is 2:3:3): the form a record declares."""
        divisor = math.gcd(*self.sections) or 1
        return tuple(n // divisor for n in self.sections)

    def report(self) -> str:
        names = AXIS_NAMES.get(self.axes, tuple(f"axis {a}" for a in range(self.axes)))
        lines = [f"axes:            {self.axes} ({', '.join(names)}), {self.layout} pairs of the rotated "
                 f"{self.rotary_dim} of head_dim {self.head_dim}",
                 f"sections:        {self.sections} pairs, {self.order}"
                 + (f" (shares {':'.join(map(str, self.parts))}), {self.schedule} schedule"
                    if self.order != "other" else "")]
        for axis, name in enumerate(names):
            pairs = [i for i, o in enumerate(self.owner) if o == axis]
            lines.append(f"  {name + ':':<14} pairs {pairs}, θ {', '.join(f'{self.theta[i]:.6g}' for i in pairs)}")
        unowned = [i for i, o in enumerate(self.owner) if o is None]
        if unowned:
            lines.append(f"  no single axis: pairs {unowned} (unrotated, or turned by several axes)")
        lines += [f"note:            {note}" for note in self.notes]
        return "\n".join(wrap_all(lines, terminal_width(), " " * 17))

    def geometry_code(self) -> str:
        """The ``RotaryGeometry`` a record declares for what was read; None where no sections were read."""
        if self.order == "other":
            return None
        fraction = "" if self.rotary_dim == self.head_dim else f", rotary_fraction={self.rotary_dim / self.head_dim:g}"
        return (f"posenc.RotaryGeometry(layout={self.layout!r}, axis_sections={self.parts}, "
                f"axis_order={self.order!r}, axis_schedule={self.schedule!r}{fraction})")


def _map(target, head_dim: int, position: torch.Tensor) -> torch.Tensor:
    """``M_P`` (head_dim × head_dim, float64) at the position vector ``position`` (axes,)."""
    x = torch.eye(head_dim, dtype=torch.float64).reshape(1, head_dim, 1, head_dim)
    P = position.reshape(-1, 1, 1).expand(-1, 1, head_dim).contiguous()
    with torch.no_grad():
        y = target(x, P)
    return y.reshape(head_dim, head_dim).T.to(torch.float64)  # column j = M e_j


def _pairs(m: torch.Tensor, moved: list[int], head_dim: int, rotary_dim: int) -> tuple[str, list[int]]:
    """The layout the map's partners show ((i, i + r/2) or (2i, 2i+1) over the rotated width ``r``),
    and the pair index of each moved coordinate."""
    half, tol = rotary_dim // 2, 1e-6 * float(m.abs().max())
    partners = {j: [i for i in range(head_dim) if i != j and abs(float(m[i, j])) > tol] for j in moved}
    if all(partners[j] == [(j + half) % rotary_dim] for j in moved):
        return "half_split", sorted({j % half for j in moved})
    if all(partners[j] == [j ^ 1] for j in moved):
        return "interleaved", sorted({j // 2 for j in moved})
    return "other", sorted({j // 2 for j in moved})


def _not_rotations(m: torch.Tensor, pairs: list[int], layout: str, rotary_dim: int) -> list[int]:
    """The pairs whose 2 × 2 block of ``m`` is not a rotation ``[[c, −s], [s, c]]`` with ``c² + s² = 1``."""
    bad = []
    for pair in pairs:
        a, b = (pair, pair + rotary_dim // 2) if layout == "half_split" else (2 * pair, 2 * pair + 1)
        c, s, s2, c2 = float(m[a, a]), float(m[b, a]), -float(m[a, b]), float(m[b, b])
        if abs(c - c2) > 1e-5 or abs(s - s2) > 1e-5 or abs(c * c + s * s - 1) > 1e-5:
            bad.append(pair)
    return bad


def identify_axes(target, head_dim: int = 16, axes: int = 3) -> AxesIdentification:
    """Read which axis turns which pair of ``target`` (a multi-axis RoPE taking ``(axes, batch, seq)``).

    Position 0 on every axis is probed first: where the map there is not the identity (ids offset,
    such as time ids one ahead), each axis's map is read relative to it (``M_e · M_0ᵀ``), and a note
    says so."""
    identity = torch.eye(head_dim, dtype=torch.float64)
    origin = _map(target, head_dim, torch.zeros(axes, dtype=torch.long))
    notes = []
    if float((origin - identity).abs().max()) > 1e-6:
        notes.append("at position 0 on every axis the map is not the identity: the encoder turns pairs where no "
                     "axis has moved (ids offset, e.g. time ids one ahead); each axis is read relative to it")
    maps, moved_of = {}, {}
    for axis in range(axes):
        e = torch.zeros(axes, dtype=torch.long)
        e[axis] = 1
        maps[axis] = m = _map(target, head_dim, e) @ origin.T if notes else _map(target, head_dim, e)
        moved_of[axis] = [j for j in range(head_dim) if float((m[:, j] - identity[:, j]).abs().max()) > 1e-6]
    rotary_dim = max((j + 1 for moved in moved_of.values() for j in moved), default=head_dim)
    rotary_dim += rotary_dim % 2
    pairs_of: dict[int, list[int]] = {}
    layout, angles = None, {}
    for axis in range(axes):
        m, moved = maps[axis], moved_of[axis]
        axis_layout, pairs = _pairs(m, moved, head_dim, rotary_dim) if moved else (layout, [])
        layout = layout or axis_layout
        pairs_of[axis] = pairs
        for pair in pairs:
            a, b = (pair, pair + rotary_dim // 2) if layout == "half_split" else (2 * pair, 2 * pair + 1)
            angles.setdefault(pair, {})[axis] = abs(math.atan2(float(m[b, a]), float(m[a, a])))
    not_rotated = {axis: _not_rotations(maps[axis], pairs_of[axis], layout, rotary_dim) for axis in range(axes)}
    for axis, bad in not_rotated.items():
        if bad:
            notes.append(f"not a rotation: pairs {bad} move with axis {axis} by a map that is not a 2 × 2 rotation "
                         "(no angle to read; no section is declared)")
            for pair in bad:
                angles.get(pair, {}).pop(axis, None)
    owner: list[int | None] = []
    theta: list[float] = []
    for pair in range(rotary_dim // 2):
        turned = angles.get(pair, {})
        owner.append(next(iter(turned)) if len(turned) == 1 else None)
        theta.append(next(iter(turned.values())) if len(turned) == 1 else float("nan"))
    found = AxesIdentification(head_dim, axes, layout or "other", owner, theta, rotary_dim=rotary_dim, notes=notes)
    found.order = _order(owner, found.sections, axes)
    firsts = [theta[next(i for i, o in enumerate(owner) if o == axis)] for axis in range(axes) if axis in owner]
    # θ = 1 at the first pair of every axis: a schedule per axis (fp32 angles: 1 − 4·10^-8)
    found.schedule = "per_axis" if len(firsts) > 1 and all(abs(f - 1) < 1e-5 for f in firsts) else "shared"
    if any(len(t) > 1 for t in angles.values()):
        found.notes.append("some pairs turn with more than one axis: mixed frequencies (RoPE-Mixed), no sections")
        found.order = "other"
    if any(not_rotated.values()):
        found.order = "other"
    if found.order == "other" and not any(n.startswith(("some pairs", "not a rotation")) for n in found.notes):
        found.notes.append(_unnamed_order(owner, found.sections, axes))
    return found


def _unnamed_order(owner: list[int | None], sections: tuple[int, ...], axes: int) -> str:
    """Why no declared order names ``owner``, with what it is where that can be said."""
    runs = [axis for k, axis in enumerate(owner) if axis is not None and (k == 0 or owner[k - 1] != axis)]
    if len(runs) == axes and len(set(runs)) == axes and runs != sorted(runs):
        names = AXIS_NAMES.get(axes, tuple(f"axis {a}" for a in range(axes)))
        return (f"contiguous sections in the axis order {', '.join(names[a] for a in runs)}: no declared order gives "
                "it; declare contiguous sections and pass the positions in that order")
    return f"the pairing by axis {owner} matches no declared order ({', '.join(ORDERS)})"


def _order(owner: list[int | None], sections: tuple[int, ...], axes: int = 3) -> str:
    """The declared order whose pairing (:func:`~posenc.encoders.multiaxis.pair_axes`) is ``owner``:
    Qwen2-VL's contiguous sections, Qwen3-VL's interleaved ones, Ernie 4.5 VL's spatial turns (a time
    axis and spatial ones: three axes); else ``other`` (an axis that owns no pair, or a pairing no
    order gives)."""
    for order in ORDERS:
        if order == "spatial_interleaved" and axes < 3:  # on two axes it is a width-first split, not Ernie's
            continue
        try:
            if owner == pair_axes(sections, order).tolist():
                return order
        except ValueError:  # sections this order cannot lay out
            continue
    return "other"
