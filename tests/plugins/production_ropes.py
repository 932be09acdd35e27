"""Correct RoPEs written the way production code writes them, independently of posenc's encoders.

Each forms its frequencies and angles in fp32 (also for float64 input), as transformers, vLLM and
the GPT-NeoX family do, and declares that once: ``angle_dtype=torch.float32``. The records use
posenc's vocabulary to *declare* the geometry (layout, schedule, scale); the arithmetic below uses
torch alone. Covered: default, linear interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3, xPos,
partial rotary, each layout (interleaved, half-split, concatenated), and each protocol (single
tensor, pair, cos/sin). ``pytest specs --plugin tests/plugins/production_ropes.py`` finds no FAIL
and no CRASH on any of them, in any dtype.
"""

from __future__ import annotations

import math
from functools import partial

import torch

import posenc
from posenc.encoders.scaling import frequencies as schedules

ANGLES = torch.float32


# ---------------------------------------------------------------- frequencies, fp32 as in production

def default_inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def ntk_inv_freq(dim: int, base: float, factor: float) -> torch.Tensor:
    return default_inv_freq(dim, base * factor ** (dim / (dim - 2))) if dim >= 4 else default_inv_freq(dim, base)


def yarn_inv_freq(dim: int, base: float, factor: float, original: int, beta_fast=32.0, beta_slow=1.0):
    def correction(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(correction(beta_fast)), 0), min(math.ceil(correction(beta_slow)), dim - 1)
    high = high + 0.001 if low == high else high
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    theta = default_inv_freq(dim, base)
    return theta / factor * ramp + theta * (1 - ramp)


def llama3_inv_freq(dim: int, base: float, factor=8.0, low=1.0, high=4.0, original=8192):
    theta = default_inv_freq(dim, base)
    wavelen = 2 * math.pi / theta
    scaled = torch.where(wavelen > original / low, theta / factor, theta)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < original / high) & ~(wavelen > original / low)
    return torch.where(medium, smoothed, scaled)


# ---------------------------------------------------------------- the single-tensor protocol

class ProductionRoPE(torch.nn.Module):
    """``module(x, positions=None, offset=0)`` on (batch, seq, heads, head_dim), with input checks."""

    def __init__(self, head_dim, base=10000.0, *, layout="interleaved", rotary_dim=None, inv_freq=None,
                 position_divisor=1.0, magnitude=1.0, dynamic=None):
        super().__init__()
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rotary_dim = rotary_dim or head_dim
        self.inv_freq_fn = inv_freq or (lambda d, b: default_inv_freq(d, b))
        self.position_divisor, self.magnitude, self.dynamic = position_divisor, magnitude, dynamic

    def _positions(self, x, positions, offset):
        if not x.is_floating_point():
            raise TypeError(f"x must be a float tensor, got {x.dtype}")
        if x.dim() != 4:
            raise ValueError(f"x must have rank 4 (batch, seq, heads, head_dim), got rank {x.dim()}")
        if positions is None:
            if offset < 0:
                raise ValueError(f"offset must be non-negative, got {offset}")
            return torch.arange(offset, offset + x.shape[1], device=x.device)[None]
        positions = positions if positions.dim() == 2 else positions[None]
        if positions.shape[-1] != x.shape[1]:
            raise ValueError(f"positions shape {tuple(positions.shape)} does not match seq {x.shape[1]}")
        if bool((positions < 0).any()):
            raise ValueError("positions must be non-negative")
        return positions.to(x.device)

    def forward(self, x, positions=None, offset=0):
        p = self._positions(x, positions, offset)
        if self.dynamic is not None:  # dynamic NTK: the base follows this call's length
            length, trained, factor = int(p.max()) + 1, *self.dynamic
            base = self.base
            if length > trained:
                base = self.base * (factor * length / trained - (factor - 1)) ** (self.rotary_dim / (self.rotary_dim - 2))
            inv_freq = default_inv_freq(self.rotary_dim, base)
        else:
            inv_freq = self.inv_freq_fn(self.rotary_dim, self.base)
        angles = (p.to(ANGLES) / self.position_divisor)[..., None] * inv_freq.to(x.device)  # (B, S, r/2)
        cos, sin = (angles.cos() * self.magnitude)[:, :, None], (angles.sin() * self.magnitude)[:, :, None]
        r = self.rotary_dim
        rot, rest = x[..., :r].to(ANGLES if x.dtype != torch.float64 else torch.float64), x[..., r:]
        cos, sin = cos.to(rot.dtype), sin.to(rot.dtype)
        if self.layout == "half_split":
            a, b = rot[..., : r // 2], rot[..., r // 2 :]
        else:
            a, b = rot[..., 0::2], rot[..., 1::2]
        ya, yb = a * cos - b * sin, a * sin + b * cos
        out = torch.stack((ya, yb), -1).flatten(-2) if self.layout == "interleaved" else torch.cat((ya, yb), -1)
        return torch.cat((out.to(x.dtype), rest), -1)


# ---------------------------------------------------------------- the pair protocol

class PairRoPE(torch.nn.Module):
    """``module(q, k, q_positions, k_positions) -> (q', k')``; xPos scales q by ζ^(p/512) and k by ζ^(−p/512)."""

    def __init__(self, head_dim, base=10000.0, *, xpos=False, scale_base=512.0, gamma=0.4):
        super().__init__()
        self.head_dim, self.base, self.xpos, self.scale_base, self.gamma = head_dim, base, xpos, scale_base, gamma

    def _rotate(self, x, positions, sign):
        if not x.is_floating_point() or x.dim() != 4:
            raise ValueError(f"expected a float tensor of rank 4, got {x.dtype} of rank {x.dim()}")
        if positions.shape[-1] != x.shape[1]:
            raise ValueError(f"positions shape {tuple(positions.shape)} does not match seq {x.shape[1]}")
        if bool((positions < 0).any()):
            raise ValueError("positions must be non-negative")
        p = positions.to(device=x.device, dtype=ANGLES)
        angles = p[..., None] * default_inv_freq(self.head_dim, self.base).to(x.device)
        cos, sin = angles.cos()[:, :, None], angles.sin()[:, :, None]
        if self.xpos:
            zeta = (torch.arange(0, self.head_dim, 2, dtype=ANGLES) / self.head_dim + self.gamma) / (1 + self.gamma)
            scale = zeta.to(x.device) ** (sign * p[..., None] / self.scale_base)
            cos, sin = cos * scale[:, :, None], sin * scale[:, :, None]
        work = torch.float64 if x.dtype == torch.float64 else ANGLES
        a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
        cos, sin = cos.to(work), sin.to(work)
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2).to(x.dtype)

    def forward(self, q, k, q_positions, k_positions):
        return self._rotate(q, q_positions, 1.0), self._rotate(k, k_positions, -1.0)


# ---------------------------------------------------------------- the cos/sin protocol (transformers style)

class CosSinRoPE(torch.nn.Module):
    """``cos, sin = module(x, position_ids)``, half-split tables in x's dtype, as transformers returns them."""

    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def forward(self, x, position_ids):
        inv_freq = default_inv_freq(self.head_dim, self.base).to(x.device)
        freqs = position_ids.to(device=x.device, dtype=ANGLES)[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """q, k (batch, seq, heads, head_dim); cos, sin (batch, seq, head_dim). No input checks, like transformers'."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


# ---------------------------------------------------------------- records

def _single(**options):
    return lambda c: ProductionRoPE(c.head_dim, c.base, **options)


def _geometry(**fields):
    return posenc.RotaryGeometry(angle_dtype=torch.float32, **fields)


_FORMULA = ("test_output_equals_formula_elementwise",)
_SCHEDULE = posenc.refuted("θ_i is changed on purpose for long context", specs=("test_frequencies_follow_the_formula",))
_HALF = posenc.refuted("pairs (i, i + d/2) permute the formula's coordinates", specs=_FORMULA)
_SOURCE = "production-style RoPE (tests/plugins/production_ropes.py)"
YARN = partial(schedules.yarn, factor=4.0, original_max_position=2048)
YARN_FACTOR = 0.1 * math.log(4.0) + 1
LLAMA3 = partial(schedules.llama3, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)
NTK = partial(schedules.ntk_aware, factor=4.0)
DYNAMIC = partial(schedules.dynamic_ntk, factor=2.0, max_position=128)
PARTIAL = _geometry(layout="half_split", rotary_fraction=0.25)  # a quarter of each head rotated (NeoX's rotary_pct)
_DYNAMIC = "θ follows each call's length past 128 on purpose"
_XPOS_RANGE = "ζ^(±p/512) leaves the float range far out"
_XPOS_FP16 = "in float16, k's factor ζ^(−p/512) overflows past p ≈ 4500"

RECORDS = [
    ("prod_default", _single(), _geometry(), {}),
    ("prod_half_split", _single(layout="half_split"), _geometry(layout="half_split"), {"ROPE-13": _HALF}),
    ("prod_concatenated", _single(layout="concatenated"), _geometry(layout="concatenated"),
     {"ROPE-13": posenc.refuted("[evens, odds] output order is a permutation of the formula's", specs=_FORMULA)}),
    ("prod_partial", lambda c: ProductionRoPE(c.head_dim, c.base, layout="half_split",
                                              rotary_dim=PARTIAL.rotary_dim(c.head_dim)), PARTIAL, {"ROPE-13": _HALF}),
    ("prod_linear", _single(position_divisor=4.0), _geometry(scaling_factor=4.0), {"ROPE-14": posenc.HOLDS}),
    ("prod_ntk", _single(inv_freq=lambda d, b: ntk_inv_freq(d, b, 4.0)), _geometry(frequencies=NTK),
     {"ROPE-2": _SCHEDULE}),
    ("prod_yarn", _single(inv_freq=lambda d, b: yarn_inv_freq(d, b, 4.0, 2048), magnitude=YARN_FACTOR),
     _geometry(frequencies=YARN, magnitude=YARN_FACTOR),
     {"ROPE-2": _SCHEDULE, "ROPE-3": posenc.refuted("YaRN's attention factor scales the rotated features")}),
    ("prod_llama3", _single(inv_freq=lambda d, b: llama3_inv_freq(d, b)), _geometry(frequencies=LLAMA3),
     {"ROPE-2": _SCHEDULE}),
    ("prod_dynamic_ntk", _single(dynamic=(128, 2.0)), _geometry(frequencies=DYNAMIC, length_dependent=True), {
        "ROPE-1": posenc.refuted(_DYNAMIC, specs=("test_rotations_compose",)),
        "ROPE-4": posenc.refuted(_DYNAMIC), "ROPE-10a": posenc.refuted(_DYNAMIC),  # ROPE-11: the same in every dtype
        "ATT-4": posenc.refuted(_DYNAMIC), "PATH-2": posenc.refuted(_DYNAMIC + ": cached keys keep their old base"),
    }),
]

for name, build, geometry, overrides in RECORDS:
    posenc.register(posenc.EncoderRecord(
        name=name, build=build, kind="rotary", source=_SOURCE, geometry=geometry,
        claims=posenc.rotary_claims(overrides),
        min_head_dim=4 if name == "prod_dynamic_ntk" else 2,  # its base formula divides by d − 2
    ))

posenc.register(posenc.EncoderRecord(
    name="prod_pair", build=lambda c: PairRoPE(c.head_dim, c.base), kind="rotary", protocol="pair",
    source=_SOURCE, geometry=_geometry(),
    claims=posenc.rotary_claims({"PATH-1": posenc.not_applicable("explicit positions only")}),
))
posenc.register(posenc.EncoderRecord(
    name="prod_xpos", build=lambda c: PairRoPE(c.head_dim, c.base, xpos=True), kind="rotary", protocol="pair",
    source=_SOURCE, geometry=_geometry(position_scale=posenc.xpos_scale()),
    claims=posenc.rotary_claims({
        "ROPE-3": posenc.refuted("xPos scales q and k by ζ^(±p/512) on purpose"),
        "ROPE-4": posenc.refuted(_XPOS_FP16, dtypes=(torch.float16,)),
        "ROPE-10a": posenc.refuted(_XPOS_RANGE),
        "ROPE-11": posenc.refuted(_XPOS_RANGE + " (float16's range; bfloat16 has float32's)",
                                  dtypes=(torch.float16,)),
        "ROPE-13": posenc.refuted(_XPOS_FP16, specs=("test_shared_layout_scores_match_the_formula",),
                                  dtypes=(torch.float16,)),
        "PATH-1": posenc.not_applicable("explicit positions only"),
    }),
))
posenc.register(posenc.EncoderRecord(
    name="prod_cos_sin", build=lambda c: CosSinRoPE(c.head_dim, c.base), apply=apply_rotary_pos_emb,
    kind="rotary", protocol="cos_sin", source=_SOURCE, geometry=_geometry(layout="half_split"),
    claims=posenc.rotary_claims({
        "ROPE-13": _HALF,
        "PATH-1": posenc.not_applicable("explicit positions only"),
        posenc.CONTRACT: posenc.refuted(
            "like transformers' apply_rotary_pos_emb, it validates no input: integer input is promoted, an extra "
            "dimension broadcasts, a negative position is rotated by −p (positions of the wrong length still "
            "fail, in broadcasting, with an error that names the sizes)",
            specs=("test_rejects_non_float_input", "test_rejects_wrong_rank", "test_rejects_negative_positions")),
    }),
))
