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

Also the angle precision per input dtype (the phase error at position 3001), dependence on
history (fresh against used copies) and where the target stops answering. :func:`identify`
returns an :class:`Identification`; :func:`identified_record` turns it into the record the specs
run against (``pytest specs --identify FILE.py:NAME``); ``python -m posenc identify`` prints both.

A target that cannot be read is a :class:`NotIdentified` of one line: it is no RoPE (no pair of
coordinates turns, its output is not finite or not of the input's shape), or it raised on a probe
every RoPE answers (its error, type, message and line, is named). With ``timeout`` each call of
the target runs under a timer; one past it raises :class:`ProbeTimeout`.
"""

from __future__ import annotations

import copy
import math
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import torch

from ...encoders.scaling import frequencies as schedules
from ..catalogue.declarations import rotary_claims
from ..catalogue.records import EncoderRecord, RotaryGeometry, not_applicable, refuted
from ..verdicts.width import terminal_width, wrap_all

#: Where θ is refined (past most tables, inside a trained length of 128) and where length dependence is probed.
FINE, FAR = 64, 4096
#: Relative agreement a measured θ needs with a family's to be named after it.
FAMILY_RTOL = 1e-4
#: The relative noise of a θ measured from fp32 outputs: rounding a fitted parameter may cost no more.
MEASUREMENT_RTOL = 2e-7
#: A magnitude further than this from 1 (relative) is a scale the record declares.
SCALE_RTOL = 1e-5
#: Original lengths a YaRN or Llama 3 fit tries: powers of two first (the usual settings), then
#: every multiple of 1024 up to 2^17 (DeepSeek's 4096·40, Qwen's 32768·4 and the rest).
ORIGINAL_LENGTHS = tuple(dict.fromkeys([2**k for k in range(8, 21)] + [1024 * m for m in range(1, 129)]))
#: Factors tried besides the one the slowest pair gives.
FACTORS = (2.0, 4.0, 8.0, 16.0, 32.0, 40.0, 64.0)
#: Llama 3's (low_freq_factor, high_freq_factor) settings: Llama 3.x, Llama 4 (one edge), others.
LLAMA3_BANDS = ((1.0, 4.0), (1.0, 1.0), (1.0, 2.0), (2.0, 4.0))


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
    precision: dict[str, str] = field(default_factory=dict)  # input dtype -> what its phase error says
    state: str = "not checked"
    limit: str = "not checked"
    rounded_to: str | None = None  # the half-precision dtype θ was rounded to (a cast float buffer): a defect
    not_rotation: str | None = None  # why the map is no (scaled) rotation of its pairs: a defect
    ranges: dict = field(default_factory=dict)  # parameter -> (lowest, highest) of the values that fit equally well

    def report(self) -> str:
        shown = ", ".join(f"{k}={self.ranges[k][0]:g} … {self.ranges[k][1]:g}" if k in self.ranges
                          else f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.parameters.items())
        lines = [
            f"layout:          {self.layout} (pairs of the rotated width {self.rotary_dim} of head_dim {self.head_dim})",
            f"partial rotary:  {self.rotary_dim}/{self.head_dim} rotated"
            + ("" if self.rotary_dim == self.head_dim else f" ({self.head_dim - self.rotary_dim} unrotated)"),
            f"frequencies:     {self.family}" + (f" ({shown})" if shown else ""),
            *([f"  ANOMALY:       θ rounded to {self.rounded_to}, a defect: judged against the unrounded schedule"]
              if self.rounded_to else []),
            f"  θ_i measured:  {', '.join(f'{t:.6g}' for t in self.theta[:8])}{' …' if len(self.theta) > 8 else ''}",
            f"scale:           {self.magnitude:.6g} at position 0"
            + (", changing with position" + ("" if self.not_rotation else " geometrically (xPos-like)")
               if self.scale_by_position else ", constant in position")
            + ("; q and k scaled differently" if self.q_and_k_differ else ""),
            *([f"  ANOMALY:       not a rotation: {self.not_rotation}"] if self.not_rotation else []),
        ]
        lines += [f"angles, {dtype}:{' ' * max(1, 8 - len(dtype))}{said}" for dtype, said in self.precision.items()]
        lines += [f"state:           {self.state}", f"limits:          {self.limit}"]
        lines += [f"note:            {note}" for note in self.notes]
        return "\n".join(wrap_all(lines, terminal_width(), " " * 17))

    def geometry_code(self) -> str:
        """The ``RotaryGeometry`` a record should declare, as Python source."""
        shown = [f"{name}={source}" for name, (value, source) in geometry_fields(self).items()
                 if name != "magnitude" or abs(value - 1) > SCALE_RTOL]
        return f"posenc.RotaryGeometry({', '.join(shown)})"


#: How each named family's parameters become geometry fields: ``{field: (value, source)}``.
FAMILY_FIELDS = {
    "default": lambda p: {"base": (p["base"], _source(p["base"]))},  # a rounded θ: the schedule it was meant to be
    "linear": lambda p: {"scaling_factor": (p["factor"], _source(p["factor"])), "base": (p["base"], _source(p["base"]))},
    **{family: (lambda p, family=family: {
        "frequencies": (partial(getattr(schedules, family), **{k: v for k, v in p.items() if k != "base"}),
                        f"partial(schedules.{family}, "
                        + ", ".join(f"{k}={_source(v)}" for k, v in p.items() if k != "base") + ")"),
        "base": (p["base"], _source(p["base"]))}) for family in ("yarn", "llama3", "ntk_aware")},
}


def _source(value) -> str:
    """A parameter as Python source, every digit kept (``4.87605``, ``10000``, ``True``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def geometry_fields(found: Identification) -> dict[str, tuple[object, str]]:
    """The geometry the identification measured, field by field, as values and as source. A custom
    family's θ is the measured one, in float64."""
    layout = found.layout if found.layout != "other" else "interleaved"
    fields: dict[str, tuple[object, str]] = {"layout": (layout, repr(layout))}
    if found.rotary_dim != found.head_dim:
        fraction = found.rotary_dim / found.head_dim
        fields["rotary_fraction"] = (fraction, f"{fraction:g}")
    if found.family in FAMILY_FIELDS and not found.ranges:  # an ambiguous fit: declare what was measured
        fields.update(FAMILY_FIELDS[found.family](found.parameters))
    else:
        measured = torch.tensor(found.theta, dtype=torch.float64)
        fields["frequencies"] = (lambda rotary_dim, base, measured=measured: measured,
                                 f"lambda rotary_dim, base: torch.tensor({found.theta!r}, dtype=torch.float64)")
    fields["magnitude"] = (found.magnitude, f"{found.magnitude:.6g}")  # the measured value, always
    fields["angle_dtype"] = (torch.float32, "torch.float32")
    return fields


# ---------------------------------------------------------------- what the library documents

#: The families ``--expect`` names, each with the base it takes when none is given.
EXPECTABLE = {"default": 10000.0, "linear": 10000.0, "ntk_aware": 10000.0, "yarn": 10000.0, "llama3": 500000.0}
#: Geometry keys ``--expect`` takes besides the family's own parameters.
EXPECT_GEOMETRY = ("base", "rotary_fraction", "layout")


def parse_expected(spec: str) -> tuple[str, dict]:
    """``FAMILY[:key=value,...]`` (``yarn:factor=4,original_max_position=2048,rotary_fraction=0.5``)
    as (family, parameters); numbers, ``True``/``False`` and layout names are read as such."""
    family, _, rest = spec.partition(":")
    if family not in EXPECTABLE:
        raise ValueError(f"--expect: unknown family {family!r}; known: {', '.join(EXPECTABLE)}")
    parameters = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"--expect: give key=value, got {item!r}")
        parameters[key.strip()] = {"True": True, "False": False}.get(value, value) if not _is_number(value) \
            else (int(value) if value.lstrip("-").isdigit() else float(value))
    try:
        expected_theta(family, parameters, 16)
    except TypeError as error:
        raise ValueError(f"--expect {spec}: {error}") from None
    return family, parameters


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def expected_theta(family: str, parameters: dict, rotary_dim: int) -> torch.Tensor:
    """θ of the documented schedule (float64) at ``rotary_dim``."""
    schedule = {k: v for k, v in parameters.items() if k not in EXPECT_GEOMETRY}
    base = float(parameters.get("base", EXPECTABLE[family]))
    if family == "linear":
        factor = schedule.pop("factor")
        if schedule:
            raise TypeError(f"linear takes factor only, got {sorted(schedule)}")
        return schedules.default(rotary_dim, base) / factor
    return getattr(schedules, family)(rotary_dim, base, **schedule)


def expected_identification(found: Identification, family: str, parameters: dict) -> Identification:
    """What the library documents, as an identification: the measured one with the documented
    schedule, rotated width and layout (what ``--identify-expect`` judges the target against)."""
    rotary_dim = 2 * round(found.head_dim * float(parameters.get("rotary_fraction", 1.0)) / 2)
    layout = str(parameters.get("layout", found.layout))
    parameters = {k: v for k, v in parameters.items() if k not in ("rotary_fraction", "layout")}
    parameters.setdefault("base", EXPECTABLE[family])
    theta = expected_theta(family, parameters, rotary_dim).tolist()
    return replace(found, family=family, parameters=parameters, rotary_dim=rotary_dim, theta=theta,
                   layout=layout, rounded_to=None)


def expectation_mismatches(found: Identification, family: str, parameters: dict) -> list[str]:
    """How the measured geometry differs from the documented one (empty when it matches)."""
    expected = expected_identification(found, family, parameters)
    layout = parameters.get("layout")
    said = []
    if layout and layout != found.layout:
        said.append(f"layout: measured {found.layout}, documented {layout}")
    if expected.rotary_dim != found.rotary_dim:
        said.append(f"rotated width: measured {found.rotary_dim} of {found.head_dim}, documented {expected.rotary_dim} "
                    f"(rotary_fraction {parameters.get('rotary_fraction', 1.0)})")
        return said
    measured = torch.tensor(found.theta, dtype=torch.float64)
    wanted = torch.tensor(expected.theta, dtype=torch.float64)
    error = ((measured - wanted) / wanted).abs()
    if float(error.max()) > FAMILY_RTOL:
        pairs = [int(i) for i in torch.nonzero(error > FAMILY_RTOL).flatten()]
        worst = int(error.argmax())
        said.append(f"θ differs at pairs {pairs[:8]}{' …' if len(pairs) > 8 else ''}: pair {worst} turns "
                    f"{float(measured[worst]):.6g} rad per position, the documented schedule {float(wanted[worst]):.6g}")
    return said


# ---------------------------------------------------------------- what stops an identification

class NotIdentified(ValueError):
    """The target is no RoPE, or raised on a probe every RoPE answers: one line saying which."""


class ProbeTimeout(BaseException):
    """A call of the target ran past its time limit. A ``BaseException``, so that no probe's
    ``except Exception`` (a dtype refused, a far position reported) takes it and probes on."""

    def __init__(self, seconds: float, what: str):
        super().__init__(f"no answer within {seconds:g} s from {what}")
        self.seconds, self.what = seconds, what


@contextmanager
def time_limit(seconds: float | None, what: str):
    """Raise :class:`ProbeTimeout` in the block once it has run ``seconds`` (SIGALRM; no limit
    without the signal or off the main thread). A timer already running is resumed after it."""
    if not seconds or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise ProbeTimeout(seconds, what)

    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # an enclosing timer (a test's own) keeps what it had left
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def _described(name: str, args, kwargs) -> str:
    """A call as a line names it: its input's dtype and shape, and its positions."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    said = f"a call of {name}"
    x = next((t for t in tensors if t.is_floating_point()), None)
    if x is not None:
        said += f" on {str(x.dtype).removeprefix('torch.')} input of shape {tuple(x.shape)}"
    positions = next((t for t in tensors if not t.is_floating_point() and t.numel()), None)
    if positions is not None:
        low, high = int(positions.min()), int(positions.max())
        said += f" at position {low}" if low == high else f" at positions {low} … {high}"
    elif "offset" in kwargs:
        said += f" at offset {kwargs['offset']}"
    return said


def _limited(function, seconds: float | None, name: str = "the target"):
    """``function`` with each call under :func:`time_limit` (itself where there is no limit)."""
    if not seconds or function is None:
        return function

    def limited(*args, **kwargs):
        with time_limit(seconds, _described(name, args, kwargs)):
            return function(*args, **kwargs)

    return limited


#: Frames of these directories (the package, torch) are the harness's or torch's, not the line of the
#: target that raised.
_NOT_THE_TARGETS = (str(Path(__file__).resolve().parents[2]), str(Path(torch.__file__).resolve().parent))


def raised_at(error: BaseException) -> str:
    """``FILE:LINE in FUNCTION`` of the innermost frame of the user's code that raised (empty when none)."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_NOT_THE_TARGETS)]
    if not own:
        return ""
    frame = own[-1]
    try:
        shown = Path(frame.filename).resolve().relative_to(Path.cwd())
    except ValueError:
        shown = frame.filename
    return f"{shown}:{frame.lineno} in {frame.name}"


def error_line(error: BaseException) -> str:
    """An error as one line: its type, the first line of its message and where it was raised."""
    message = str(error).strip().partition("\n")[0]
    where = raised_at(error)
    return f"{type(error).__name__}: {message}" + (f" (at {where})" if where else "")


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
    if not isinstance(out, torch.Tensor) or out.numel() != head_dim * head_dim:
        got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        raise NotIdentified(f"not a RoPE: input of shape {tuple(basis.shape)} gives {got}, not a tensor of its shape")
    return out.reshape(head_dim, head_dim).T.to(torch.float64)


def _probe_dtype(call, head_dim: int) -> torch.dtype:
    refused = {}
    for dtype in (torch.float64, torch.float32):
        try:
            probe_matrix(call, head_dim, 1, dtype)
            return dtype
        except NotIdentified:
            raise
        except Exception as error:  # noqa: BLE001 - a target that refuses float64 is probed in float32
            refused[str(dtype).removeprefix("torch.")] = error_line(error)
    said = refused["float32"] + ("" if refused["float64"] == refused["float32"] else
                                 f"; in float64: {refused['float64']}")
    raise NotIdentified(f"the target raised on its first probe (float32 input of shape (1, {head_dim}, 1, {head_dim}) "
                        f"at position 1): {said}")


def _required_probe(call, head_dim: int, position: int, dtype, side: str = "q") -> torch.Tensor:
    """A probe every RoPE answers: what the target raises there stops the identification, named."""
    try:
        return probe_matrix(call, head_dim, position, dtype)
    except NotIdentified:
        raise
    except Exception as error:  # noqa: BLE001 - the target's own error, shown
        of_k = " of k" if side == "k" else ""
        raise NotIdentified(f"the target raised on a probe{of_k} ({str(dtype).removeprefix('torch.')} input of shape "
                            f"(1, {head_dim}, 1, {head_dim}) at position {position}): {error_line(error)}") from error


def _no_rotation(m: dict, head_dim: int) -> str:
    """Why no pair of coordinates turns between positions 0 and FINE: what the probes measured."""
    for p, matrix in m.items():
        bad = int((~torch.isfinite(matrix)).sum())
        if bad:
            return (f"not a RoPE: its output is not finite: {bad} of {matrix.numel()} entries NaN or infinite at "
                    f"position {p} (the {head_dim} basis vectors of a head as input)")
    if float(m[0].abs().max()) == 0:
        return "not a RoPE: the map moves no pair of coordinates by a rotation: its output at position 0 is zero"
    if torch.allclose(m[FINE], m[0], rtol=1e-6, atol=1e-9 * float(m[0].abs().max())):
        same = "the identity" if torch.allclose(m[0], torch.eye(head_dim, dtype=m[0].dtype)) \
            else "the same linear map, no rotation"
        return (f"not a RoPE: the map moves no pair of coordinates by a rotation: at positions 0 and {FINE} it is "
                f"{same} (its output does not depend on the position)")
    turned = m[FINE] @ m[0].T
    tol = 1e-6 * float(turned.abs().max())
    mixed = [int((turned[:, j].abs() > tol).sum()) - int(abs(float(turned[j, j])) > tol) for j in range(head_dim)]
    counts = f"{min(mixed)}" if min(mixed) == max(mixed) else f"{min(mixed)} to {max(mixed)}"
    return (f"not a RoPE: the map moves no pair of coordinates by a rotation: from position 0 to {FINE} each "
            f"coordinate mixes with {counts} others, where a rotation of pairs mixes it with one")


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


def _fit_family(theta: torch.Tensor, rotary_dim: int, nominal_base: float | None):
    """(family, parameters, notes, the half-precision dtype θ was rounded to or None, and
    ``{parameter: (lowest, highest)}`` of the parameters whose values fit equally well)."""
    pairs = len(theta)
    notes = []
    if pairs < 2:
        return "custom", {}, ["one pair: θ_0 alone cannot tell a family"], None, {}
    i = torch.arange(pairs, dtype=torch.float64)

    def residual(expected) -> float:
        return float(((theta - torch.as_tensor(expected, dtype=torch.float64)) / theta).abs().max())

    def close(expected):
        return residual(expected) <= FAMILY_RTOL

    def roundest(value, schedule):
        """The value with the fewest significant digits whose schedule fits as well as the fitted one
        does, up to the measurement's own noise: a fitted 500000.3 is 500000, a factor 4.87605 stays."""
        allowed = max(2 * residual(schedule(value)), MEASUREMENT_RTOL)
        return next((c for c in (float(f"{value:.{d}g}") for d in range(1, 16)) if residual(schedule(c)) <= allowed),
                    value)

    factor = 1.0 / float(theta[0])
    base = float(theta[1] * factor) ** (-rotary_dim / 2.0)
    if close(base ** (-2 * i / rotary_dim) / factor):
        fitted = base
        factor = roundest(factor, lambda f: base ** (-2 * i / rotary_dim) / f)
        base = roundest(base, lambda b: b ** (-2 * i / rotary_dim) / factor)
        if abs(factor - 1) < MEASUREMENT_RTOL:
            if nominal_base and abs(base / nominal_base - 1) > FAMILY_RTOL and rotary_dim > 2:
                s = (fitted / nominal_base) ** ((rotary_dim - 2) / rotary_dim)
                notes.append(f"against the nominal base {nominal_base:g}: NTK-aware with factor {s:.6g}")
            return "default", {"base": base}, notes, None, {}
        return "linear", {"factor": factor, "base": base}, notes, None, {}
    kept = float(theta[1]) ** (-rotary_dim / 2.0)  # YaRN and Llama 3 keep the fastest pairs
    kept = next((c for c in (float(f"{kept:.{d}g}") for d in range(1, 16))
                 if abs(c ** (-2 / rotary_dim) / float(theta[1]) - 1) <= MEASUREMENT_RTOL), kept)
    bases = list(dict.fromkeys(b for b in (nominal_base, kept) if b))
    slowest = [float(schedules.default(rotary_dim, b)[-1] / theta[-1]) for b in bases]
    fits = [(*_fit_scaled(residual, rotary_dim, b, dict.fromkeys((*FACTORS, float(f"{s:.6g}")))), b)
            for b, s in zip(bases, slowest, strict=True)]
    fit, family, parameters, b = min(fits, key=lambda f: f[0])
    if fit <= FAMILY_RTOL:
        ranges = _equal_fits(residual, rotary_dim, b, family, parameters, fit)
        said = [f"{key} cannot be told apart at a rotated width of {rotary_dim}: {low:g} … {high:g} fit the outputs "
                "equally well; the record declares the measured θ" for key, (low, high) in ranges.items()]
        return family, {**parameters, "base": b}, notes + said, None, ranges
    for dtype in (torch.bfloat16, torch.float16):
        intended = nominal_base or 10000.0
        if close((intended ** (-2 * i / rotary_dim)).to(dtype).to(torch.float64)):
            # The intended schedule is the geometry; the rounding is the defect the specs then find.
            return "default", {"base": intended}, [
                f"θ is base^(−2i/d) rounded to {str(dtype).removeprefix('torch.')}: the frequencies are stored or "
                "formed in half precision"], str(dtype).removeprefix("torch."), {}
    return "custom", {}, ["θ matches no known family within the tolerance: see the measured values"], None, {}


def _equal_fits(residual, rotary_dim: int, base: float, family: str, parameters: dict, fit: float) -> dict:
    """``{parameter: (lowest, highest)}`` where more than one usual value of it (a power of two for a
    length, a factor of :data:`FACTORS`), the others kept, gives θ that fits the outputs as well as
    the chosen one: YaRN's original lengths 65536 and 131072 at head_dim 16, whose rounded
    correction band is the same."""
    schedule = getattr(schedules, family)
    candidates = {"original_max_position": [n for n in ORIGINAL_LENGTHS if n & (n - 1) == 0], "factor": FACTORS}
    ranges = {}
    for key, values in candidates.items():
        if key not in parameters:
            continue
        equal = [v for v in values if residual(schedule(rotary_dim, base, **{**parameters, key: v})) <= fit * (1 + 1e-9)
                 + 1e-15]
        if len(equal) > 1:
            ranges[key] = (min(equal), max(equal))
    return ranges


def _fit_scaled(residual, rotary_dim: int, base: float, factors) -> tuple[float, str, dict]:
    """The YaRN or Llama 3 setting at ``base`` whose θ fits best: (residual, family, parameters); the
    first of equal fits (powers of two before other lengths, the usual settings first)."""
    best = (math.inf, "", {})
    for original in ORIGINAL_LENGTHS:
        for factor in factors:
            for truncate in (True, False):
                fit = residual(schedules.yarn(rotary_dim, base, factor=factor, original_max_position=original,
                                              truncate=truncate))
                if fit < best[0]:
                    best = (fit, "yarn", {"factor": factor, "original_max_position": original,
                                          **({} if truncate else {"truncate": False})})
            for low, high in LLAMA3_BANDS:
                fit = residual(schedules.llama3(rotary_dim, base, factor=factor, low_freq_factor=low,
                                                high_freq_factor=high, original_max_position=original))
                if fit < best[0]:
                    best = (fit, "llama3", {"factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                                            "original_max_position": original})
    return best


def identify(target, *, protocol: str = "single", apply=None, head_dim: int = 16,
             base: float | None = None, timeout: float | None = None) -> Identification:
    """Read the geometry of ``target`` (see the module docstring); ``timeout``: seconds each call of
    the target (and of ``apply``) may take before :class:`ProbeTimeout`."""
    try:
        fresh = copy.deepcopy(target)  # before any probe, for the history check
    except Exception:  # noqa: BLE001 - some compiled modules cannot be copied
        fresh = None
    target, apply = _limited(target, timeout), _limited(apply, timeout, "apply")
    q_call = caller(target, protocol, apply, "q")
    dtype = _probe_dtype(q_call, head_dim)
    m = {p: _required_probe(q_call, head_dim, p, dtype) for p in (0, 1, 2, FINE)}
    rate = m[2] @ m[1].T
    partners = _pairs(m[FINE] @ m[0].T)  # the slowest pairs have turned visibly by FINE
    firsts = sorted(j for j, i in partners.items() if j < i)
    if not firsts or not all(bool(torch.isfinite(matrix).all()) for matrix in m.values()):
        raise NotIdentified(_no_rotation(m, head_dim))
    rotated = len(partners)
    unrotated = [j for j in range(head_dim) if j not in partners]
    notes, length_dependent = [], False
    if rotated % 2 or any(j < rotated for j in unrotated):
        notes.append(f"the rotated coordinates are not the first ones of the head: {sorted(partners)}")
    layout = _layout(partners, m[0], rotated)
    coarse = [math.atan2(float(rate[partners[a], a]), float(rate[a, a])) for a in firsts]
    # Refined at FINE: θ = (φ + 2πk) / FINE, k from the coarse rate (one fp32 rounding of FINE·θ, not of θ).
    turned = m[FINE] @ m[0].T
    theta = torch.tensor([(phase + 2 * math.pi * round((FINE * c - phase) / (2 * math.pi))) / FINE
                          for c, phase in ((c, math.atan2(float(turned[partners[a], a]), float(turned[a, a])))
                                           for c, a in zip(coarse, firsts, strict=True))], dtype=torch.float64)
    try:
        far = probe_matrix(q_call, head_dim, FAR + 1, dtype) @ probe_matrix(q_call, head_dim, FAR, dtype).T
    except Exception as error:  # noqa: BLE001 - a target that stops before FAR is reported, not fatal
        far = None
        notes.append(f"position {FAR} could not be probed: {type(error).__name__}: {str(error)[:80]}")
    far_theta = [math.atan2(float(far[partners[a], a]), float(far[a, a])) for a in firsts] if far is not None \
        else coarse
    if far is not None and abs(far_theta[0]) < 1e-3 * abs(coarse[0]):
        notes.append(f"positions {FAR} and {FAR + 1} give one rotation: positions are rounded before the angles are "
                     "formed (bf16 holds integers exactly only to 256, fp16 to 2048)")
    elif any(abs(f - c) > 1e-3 * max(abs(c), 1e-12) + 1e-6 for f, c in zip(far_theta, coarse, strict=True)):
        length_dependent = True
        notes.append(f"θ at position {FAR} differs from θ near 0: it depends on the position or the call's length "
                     "(dynamic NTK, LongRoPE), declare a length-dependent schedule")
    family, parameters, fit_notes, rounded_to, ranges = _fit_family(theta, rotated, base)
    norms = {p: m[p][:, :rotated].norm(dim=0) for p in m}
    magnitude = float(norms[0].mean())
    by_position = not torch.allclose(norms[FINE], norms[0], rtol=1e-4)
    not_rotation = _not_a_rotation(m, partners, firsts)
    differ = False
    if protocol != "single":
        k_matrix = _required_probe(caller(target, protocol, apply, "k"), head_dim, FINE, dtype, "k")
        differ = not torch.allclose(k_matrix, m[FINE], rtol=1e-4, atol=1e-6)
    if dtype != torch.float64:
        notes.append("probed in float32: the target refuses float64 input")
    found = Identification(head_dim, layout, rotated, theta.tolist(), family, parameters, magnitude, by_position,
                           differ, notes + fit_notes, rounded_to=rounded_to, not_rotation=not_rotation,
                           ranges=ranges)
    if not length_dependent:
        found.precision = _angle_precision(q_call, head_dim, partners, firsts, theta)
        if protocol == "single":
            found.notes += _offset_path(target, head_dim)
    found.state = _state(fresh, protocol, apply, head_dim, timeout)
    found.limit = _limit(q_call, head_dim)
    return found


def _not_a_rotation(m: dict, partners: dict, firsts: list) -> str | None:
    """Why the map of each pair is not ``c_p · R(p θ)``, or None: at each probed position a pair's 2×2
    block must be a scaled rotation, and its scale ``c_p`` constant or geometric in ``p`` (xPos)."""
    for p in (1, 2, FINE):
        turned = m[p] @ m[0].T  # a fixed output permutation (concatenated) cancels
        for a in firsts:
            b = partners[a]
            block = turned[[a, b]][:, [a, b]]
            size = float(block.abs().max()) or 1.0
            skew = max(abs(float(block[0, 0] - block[1, 1])), abs(float(block[0, 1] + block[1, 0]))) / size
            if skew > 1e-4:
                return (f"pair ({a}, {b}) at position {p} maps by [[{float(block[0, 0]):.4g}, {float(block[0, 1]):.4g}], "
                        f"[{float(block[1, 0]):.4g}, {float(block[1, 1]):.4g}]]: no scaled rotation (cos and sin "
                        "differ between the pair's coordinates, or the pair is mixed unequally)")
    for a in firsts:
        scale = {p: float(m[p][:, a].norm()) for p in (0, 1, FINE)}
        if min(scale.values()) <= 0:
            return f"coordinate {a} is mapped to zero"
        step, fine = math.log(scale[1] / scale[0]), math.log(scale[FINE] / scale[0])
        if abs(fine - FINE * step) > 1e-3 * abs(fine) + 1e-6 * FINE:
            return (f"pair ({a}, {partners[a]}) is scaled by {scale[0]:.6g}, {scale[1]:.6g} and {scale[FINE]:.6g} at "
                    f"positions 0, 1 and {FINE}: no constant or geometric scale (cos² + sin² changes with the angle)")
    return None


#: A position past fp16's (2048) and bf16's (256) exact integers, where angles formed in them go wrong.
PRECISION_POSITION = 3001
#: A phase error this many times the dtype's rounding means the angles, not the outputs, were rounded.
ANGLE_ROUNDING = 50


def _angle_precision(call, head_dim, partners, firsts, theta) -> dict[str, str]:
    said = {}
    expected = PRECISION_POSITION * theta
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        name = str(dtype).removeprefix("torch.")
        try:  # turned from position 0, so that a fixed output permutation (concatenated) cancels
            matrix = probe_matrix(call, head_dim, PRECISION_POSITION, dtype) @ probe_matrix(call, head_dim, 0, dtype).T
        except Exception as error:  # noqa: BLE001 - report what the dtype does
            said[name] = f"refused: {type(error).__name__}: {str(error)[:80]}"
            continue
        phases = torch.tensor([math.atan2(float(matrix[partners[a], a]), float(matrix[a, a])) for a in firsts],
                              dtype=torch.float64)
        error = float(torch.remainder(phases - expected + math.pi, 2 * math.pi).sub(math.pi).abs().max())
        # fp32 angles carry ~2^-21·p rad (θ from an fp32 pow, p·θ rounded); outputs carry the dtype's rounding.
        allowed = max(ANGLE_ROUNDING * torch.finfo(dtype).eps, PRECISION_POSITION * 2.0**-21)
        where = "in the input's dtype (rounded positions or angles)" if error > allowed else "in fp32 or wider"
        said[name] = f"phase error {error:.2e} rad at position {PRECISION_POSITION}: angles formed {where}"
    return said


#: Histories a used copy goes through before the probe: (length, dtype) of one call each.
HISTORIES = ((300, torch.bfloat16), (129, torch.float32), (4097, torch.float32))


def _state(fresh, protocol, apply, head_dim, timeout=None) -> str:
    """Fresh against used: the same fp32 probe (positions 0 … 259) after each history, on its own copy."""
    if fresh is None:
        return "not checked (the target cannot be copied)"
    x = torch.randn(1, 260, 1, head_dim, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(260)
    with torch.no_grad():
        try:
            before = caller(_limited(copy.deepcopy(fresh), timeout), protocol, apply, "q")(x, positions).double()
        except Exception as error:  # noqa: BLE001 - a target that stops before 260 positions
            return f"not checked: a call of 260 positions raised {type(error).__name__}: {str(error)[:80]}"
        for length, dtype in HISTORIES:
            used = caller(_limited(copy.deepcopy(fresh), timeout), protocol, apply, "q")
            what = f"a {str(dtype).removeprefix('torch.')} call of {length} positions"
            try:
                used(torch.zeros(1, length, 1, head_dim, dtype=dtype), torch.arange(length))
                after = used(x, positions).double()
            except Exception as error:  # noqa: BLE001 - a history the target refuses is reported
                return f"after {what}: {type(error).__name__}: {str(error)[:80]}"
            change = float((after - before).abs().max())
            if change > 1e-5 * float(before.abs().max()):
                return (f"output depends on history: positions 0 … 259 change by {change:.3g} after {what} "
                        "(a cache keyed by neither dtype nor length, or a schedule kept from a longer call)")
    return "no dependence on history seen (" + ", ".join(f"{n} in {str(d).removeprefix('torch.')}"
                                                        for n, d in HISTORIES) + ")"


def _offset_path(target, head_dim) -> list[str]:
    """A single-tensor target that takes ``offset=`` too: does the offset path give the explicit result?"""
    notes = []
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(1, 4, 1, head_dim, generator=torch.Generator().manual_seed(2)).to(dtype)
        try:
            with torch.no_grad():
                by_offset = target(x, None, offset=PRECISION_POSITION).double()
                explicit = target(x, torch.arange(PRECISION_POSITION, PRECISION_POSITION + 4)).double()
        except Exception:  # noqa: BLE001 - no offset path to compare
            return notes
        change = float((by_offset - explicit).abs().max())
        if change > 8 * torch.finfo(dtype).eps * float(explicit.abs().max()):
            notes.append(f"the offset path differs from explicit positions in {str(dtype).removeprefix('torch.')} "
                         f"by {change:.3g} at offset {PRECISION_POSITION}: positions formed in the input's dtype there")
    return notes


def _limit(call, head_dim) -> str:
    x = torch.randn(1, 1, 1, head_dim, generator=torch.Generator().manual_seed(1))
    for exponent in range(8, 25):
        position = 2**exponent + 1
        try:
            with torch.no_grad():
                y = call(x, torch.tensor([position]))
        except Exception as error:  # noqa: BLE001 - where it stops is the finding
            return f"raises at position {position}: {type(error).__name__}: {str(error)[:100]}"
        if not bool(torch.isfinite(y).all()):
            return f"non-finite output at position {position}, without an error"
    return f"answers up to position {2**24 + 1} (2^24 + 1)"


# ---------------------------------------------------------------- the record of an identified RoPE

def identified_geometry(found: Identification) -> RotaryGeometry:
    """The geometry the identification measured (:func:`geometry_fields`)."""
    return RotaryGeometry(**{name: value for name, (value, _) in geometry_fields(found).items()})


def identified_record(found: Identification, name: str, build, *, protocol: str = "single", apply=None,
                      source: str = "identified from its outputs") -> EncoderRecord:
    """A record whose geometry and declarations come from the identification: every rotary claim
    holds, except what the measurements say the design changes (the formula's θ, its layout, a
    scale). The target's size and base are fixed, so ROPE-2's check at other bases is n/a and
    only its own head_dim is run."""
    overrides = {"ROPE-2": not_applicable("an identified target has a fixed base and head_dim; identify reports "
                                          "its θ")}
    if found.layout != "interleaved":
        overrides["ROPE-13"] = refuted(f"identified layout {found.layout}: a permutation of the formula's "
                                       "coordinates", specs=("test_output_equals_formula_elementwise",))
    if (abs(found.magnitude - 1) > SCALE_RTOL or found.scale_by_position) and not found.not_rotation:
        overrides["ROPE-3"] = refuted("identified scale: the rotated features are scaled")
    overrides["PATH-1"] = not_applicable("the identified target takes explicit positions; an offset is translated")
    return EncoderRecord(
        name=name, build=build, kind="rotary", protocol=protocol, apply=apply, source=source,
        geometry=identified_geometry(found), claims=rotary_claims(overrides),
        description=f"identified: {found.layout}, {found.family}", min_head_dim=found.head_dim,
        max_head_dim=found.head_dim)


class PositionsOnly(torch.nn.Module):
    """A single-tensor target ``f(x, positions)`` as the specs call it: an offset becomes positions."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, x, positions=None, offset=0):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        return self.target(x, positions)


def build_identified(target, protocol: str):
    """A build for the record of ``target``: a class is built at each head_dim, an instance copied,
    a function wrapped; single-tensor targets take explicit positions."""
    def build(config):
        made = target(config.head_dim) if isinstance(target, type) else copy.deepcopy(target)
        return PositionsOnly(made).to(config.device) if protocol == "single" else _Module(made).to(config.device)

    return build


class _Module(torch.nn.Module):
    """A pair or cos/sin target that may be a bare function."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, *args):
        return self.target(*args)
