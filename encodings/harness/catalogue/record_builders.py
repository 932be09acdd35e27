"""Constructors for records of a family, so that each fact about an encoder is stated once.

* :func:`rotary_record`: a RoPE whose geometry (layout, frequency schedule, scaling, magnitude,
  rotated width) is stated once; the module, unless given, is this project's
  :class:`~posenc.encoders.rotary.RotaryEmbedding` built from that geometry.
* :func:`additive_record`: an absolute encoding added to ``(batch, seq, d_model)``, naming the
  claims of its design that hold (every other claim is ``n/a`` for it).
* :func:`attention_record`: an attention module on ``(batch, seq, d_model)`` with RoPE inside.
* :func:`placed`: a module moved to the config's device and dtype (every ``build`` ends so).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from ...encoders.rotary import RotaryEmbedding
from .declarations import ADDITIVE_DEFAULTS, ATTENTION_DEFAULTS, rotary_claims
from .records import HOLDS, BuildConfig, Declared, EncoderRecord, RotaryGeometry, with_defaults


def placed(module: nn.Module, config: BuildConfig) -> nn.Module:
    return module.to(device=config.device, dtype=config.dtype)


def rope_from_geometry(geometry: RotaryGeometry) -> Callable[[BuildConfig], nn.Module]:
    """``build`` for :class:`RotaryEmbedding` turning exactly as ``geometry`` says."""
    if geometry.position_scale is not None or geometry.angle_dtype is not None:
        raise ValueError("RotaryEmbedding has no per-position scale and forms angles as the input's dtype "
                         "requires: give build= for this geometry")

    def build(c: BuildConfig) -> nn.Module:
        return placed(RotaryEmbedding(
            c.head_dim, base=c.base, layout=geometry.layout, rotary_dim=geometry.rotary_dim(c.head_dim),
            scaling_factor=geometry.scaling_factor, frequencies=geometry.frequencies, magnitude=geometry.magnitude,
            length_dependent=geometry.length_dependent), c)

    return build


def rotary_record(name: str, geometry: RotaryGeometry, *, source: str, description: str,
                  claims: dict[str, Declared] | None = None, build=None, **fields) -> EncoderRecord:
    """A rotary record: ``claims`` are the overrides of a correct RoPE's (:func:`rotary_claims`),
    ``build`` defaults to :func:`rope_from_geometry`, other record fields pass through."""
    return EncoderRecord(name=name, build=build or rope_from_geometry(geometry), kind="rotary", source=source,
                         description=description, geometry=geometry, claims=rotary_claims(claims), **fields)


def additive_record(name: str, design: str, build, *, source: str, description: str, holds: tuple[str, ...],
                    claims: dict[str, Declared] | None = None, **fields) -> EncoderRecord:
    """An additive record of ``design``: ``holds`` are its claims that hold, ``claims`` any others
    it declares (refutations, the contract)."""
    declared = with_defaults(ADDITIVE_DEFAULTS, {**{claim: HOLDS for claim in holds}, **(claims or {})})
    return EncoderRecord(name=name, build=build, kind="additive", source=source, description=description,
                         designs=(design,), input_layout="bsd", claims=declared, **fields)


def attention_record(name: str, build, *, source: str, description: str, claims: dict[str, Declared] | None = None,
                     **fields) -> EncoderRecord:
    """An attention record: ``claims`` are the overrides of a correct softmax attention's."""
    return EncoderRecord(name=name, build=build, kind="attention", source=source, description=description,
                         input_layout="bsd", claims=with_defaults(ATTENTION_DEFAULTS, claims), **fields)
