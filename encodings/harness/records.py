"""Encoder records: one typed record per encoder drives every spec.

A record says how to build the encoder, how to call it, what it is (kind,
source), the float64 geometry its rotation must reproduce, its tolerances per
dtype, and, for **every** claim in :data:`posenc.claims.CLAIMS`, a declared
verdict: it holds, it is refuted (a strict expected failure, optionally aimed
at named specs), or it does not apply. Leaving a claim undeclared is an error.

The records themselves are data (:mod:`.builtin_records`, users' plug-in files); the
registry that holds them is :mod:`.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

import torch
from torch import nn

from .claims import CLAIMS, CONTRACT

Kind = Literal["additive", "rotary", "attention"]
Layout = Literal["bsd", "bshd"]
Status = Literal["holds", "refuted", "n/a"]


@dataclass(frozen=True)
class Declared:
    """A declared verdict. ``specs`` narrows a refutation to the named spec functions."""

    status: Status
    reason: str = ""
    specs: tuple[str, ...] = ()

    def __post_init__(self):
        if self.status not in ("holds", "refuted", "n/a"):
            raise ValueError(f"status must be holds, refuted or n/a, got {self.status!r}")
        if self.status != "holds" and not self.reason:
            raise ValueError(f"a {self.status} declaration needs a reason")
        if self.specs and self.status != "refuted":
            raise ValueError("only a refutation can be aimed at named specs")

    def expects_failure(self, spec_name: str) -> bool:
        return self.status == "refuted" and (not self.specs or spec_name in self.specs)


HOLDS = Declared("holds")


def refuted(reason: str, *, specs: tuple[str, ...] | list[str] = ()) -> Declared:
    return Declared("refuted", reason, tuple(specs))


def not_applicable(reason: str) -> Declared:
    return Declared("n/a", reason)


@dataclass(frozen=True)
class Tolerance:
    """Error bound ``atol + magnitude · (rtol + angle_rtol · max_angle)``.

    ``angle_rtol`` is the relative error of an angle ``p·θ`` as formed, so the
    bound grows with the largest angle, as it must for a correct implementation.
    """

    rtol: float
    atol: float
    angle_rtol: float = 0.0

    def bound(self, magnitude: float = 1.0, max_angle: float = 0.0) -> float:
        return self.atol + magnitude * (self.rtol + self.angle_rtol * max_angle)


_FP32_ANGLE = 2.0**-22  # two fp32 roundings (θ and p·θ), with margin

# rtol: twice the worst case of rounding each output to the dtype (2 · 2u for a normalised dot product).
DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rtol=1e-10, atol=1e-12, angle_rtol=2.0**-50),
    torch.float32: Tolerance(rtol=2e-5, atol=1e-6, angle_rtol=_FP32_ANGLE),
    torch.float16: Tolerance(rtol=2.0**-9, atol=1e-4, angle_rtol=_FP32_ANGLE),
    torch.bfloat16: Tolerance(rtol=2.0**-6, atol=1e-3, angle_rtol=_FP32_ANGLE),
}


@dataclass(frozen=True)
class FiniteDifference:
    """Central finite differences in float64: step, and the agreement expected with autograd."""

    step: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7


FINITE_DIFFERENCE = FiniteDifference()


@dataclass(frozen=True)
class RotaryGeometry:
    """What a float64 reference needs to reproduce an encoder's rotation."""

    base: float = 10000.0
    layout: str = "interleaved"  # interleaved | half_split | concatenated
    rotary_fraction: float = 1.0  # partial rotary: the first fraction of each head is rotated
    scaling_factor: float = 1.0  # linear position interpolation: angles at p / s
    frequencies: Callable[[int, float], torch.Tensor] | None = None  # θ(rotary_dim, base); None: base^(-2i/d)
    magnitude: float = 1.0  # factor on the rotated features (YaRN's attention factor)

    def inverse_frequencies(self, rotary_dim: int, base: float | None = None) -> torch.Tensor:
        """θ_i of the rotated pairs in float64: the geometry's schedule, or ``base^(-2i/d)``."""
        base = self.base if base is None else base
        if self.frequencies is not None:
            return torch.as_tensor(self.frequencies(rotary_dim, base), dtype=torch.float64)
        return base ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)

    def rotary_dim(self, head_dim: int) -> int:
        """Rotated features of a head: ``rotary_fraction · head_dim``, rounded down to even, at least 2."""
        return max(2, int(head_dim * self.rotary_fraction) // 2 * 2)


@dataclass(frozen=True)
class BuildConfig:
    d_model: int = 64
    n_heads: int = 4
    max_len: int = 128
    base: float = 10000.0
    device: str = "cpu"
    dtype: torch.dtype = torch.float32

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


#: The configuration every spec builds encoders with unless it says otherwise.
SPEC_CONFIG = BuildConfig(d_model=64, n_heads=4, max_len=128)


@dataclass(frozen=True, repr=False)
class EncoderRecord:
    """One encoder under test.

    ``build(config)`` returns a module on ``config.device`` in ``config.dtype``.
    Call protocol by ``kind``:

    * ``additive``: ``module(x, positions=None, offset=0)`` on ``(batch, seq, d_model)``;
    * ``rotary``: the same call on ``(batch, seq, heads, head_dim)`` (``input_layout="bshd"``)
      or ``(batch, seq, d_model)`` (``"bsd"``); applied to q and k;
    * ``attention``: also ``module.attend(q, k, v, positions=None, offset=0)`` on per-head tensors.
    """

    name: str
    build: Callable[[BuildConfig], nn.Module]
    kind: Kind
    source: str
    claims: Mapping[str, Declared]
    input_layout: Layout = "bshd"
    geometry: RotaryGeometry | None = None
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    table_limited: bool = False  # positions must stay below config.max_len (a learned table)
    description: str = ""
    origin: str = "built-in"

    def __post_init__(self):
        if self.kind not in ("additive", "rotary", "attention"):
            raise ValueError(f"{self.name}: kind must be additive, rotary or attention, got {self.kind!r}")
        if self.input_layout not in ("bsd", "bshd"):
            raise ValueError(f"{self.name}: input_layout must be bsd or bshd, got {self.input_layout!r}")
        missing = sorted(set(CLAIMS) - set(self.claims), key=list(CLAIMS).index)
        if missing:
            raise ValueError(f"encoder {self.name!r} leaves claims undeclared: {', '.join(missing)}")
        unknown = sorted(set(self.claims) - set(CLAIMS))
        if unknown:
            raise ValueError(f"encoder {self.name!r} declares unknown claims: {', '.join(unknown)}")
        for dtype in self.dtypes:
            if dtype not in self.tolerances:
                raise ValueError(f"encoder {self.name!r} has no tolerance declared for {dtype}")

    def __repr__(self) -> str:
        return f"EncoderRecord({self.name!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        """Hypothesis and IPython print the name alone, not every declaration."""
        printer.text(repr(self))

    def declared(self, claim: str) -> Declared:
        return HOLDS if claim == CONTRACT else self.claims[claim]

    def applies(self, claim: str) -> bool:
        return self.declared(claim).status != "n/a"

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return self.tolerances[dtype]

    def input_shape(self, batch: int, seq: int, config: BuildConfig) -> tuple[int, ...]:
        """The shape this encoder takes: ``(batch, seq, d_model)`` or ``(batch, seq, heads, head_dim)``."""
        if self.kind == "attention" or self.input_layout == "bsd":
            return (batch, seq, config.d_model)
        return (batch, seq, config.n_heads, config.head_dim)

    def make(self, dtype: torch.dtype = torch.float32, device: str = "cpu", **config) -> nn.Module:
        return self.build(BuildConfig(dtype=dtype, device=device, **config))


def with_defaults(defaults: Mapping[str, Declared], overrides: Mapping[str, Declared] | None = None):
    """A complete declaration: ``defaults`` for every claim, with ``overrides`` on top."""
    unknown = set(overrides or {}) - set(CLAIMS)
    if unknown:
        raise ValueError(f"unknown claims: {', '.join(sorted(unknown))}")
    return {**defaults, **(overrides or {})}
