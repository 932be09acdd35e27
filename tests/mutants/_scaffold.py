"""What every mutant family shares: the correct RoPE split into steps, and the ``mutant`` declaration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

import posenc
from posenc import BuildConfig, RotaryEmbedding, angle_dtype
from posenc.encoders.positions import resolve_positions, rotation_angles
from posenc.encoders.rotary import rotate
from posenc.encoders.validation import require_float, require_last_dim, require_rank


class SteppedRotary(RotaryEmbedding):
    """The correct ``RotaryEmbedding``, its forward pass split into steps; each mutant breaks one."""

    def check_input(self, x):
        require_float(x)
        require_rank(x, 4, "(batch, seq, heads, head_dim)")
        require_last_dim(x, self.head_dim, "head_dim")

    def positions(self, x, positions, offset):
        return resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)

    def angles(self, positions, x):
        return rotation_angles(positions, self.inv_freq, angle_dtype(x.dtype), self.scaling_factor)

    def trig(self, angles):
        return angles.cos(), angles.sin()

    def rotate_pairs(self, x, cos, sin):
        return rotate(x, cos, sin, self.layout)

    def finish(self, rotated, x):
        return rotated.to(x.dtype)

    def forward(self, x, positions=None, *, offset=0):
        self.check_input(x)
        pos = self.positions(x, positions, offset)
        compute = angle_dtype(x.dtype)
        cos, sin = (t.to(compute).unsqueeze(-2) for t in self.trig(self.angles(pos, x)))
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        out = self.finish(self.rotate_pairs(rot.to(compute), cos, sin), x)
        return torch.cat((out, rest.to(out.dtype)), dim=-1) if rest.shape[-1] else out


class QAndK(nn.Module):
    """q and k through different code paths, called together (the pair protocol)."""

    def __init__(self, q_encoder: nn.Module, k_encoder: nn.Module):
        super().__init__()
        self.q_encoder, self.k_encoder = q_encoder, k_encoder
        self.head_dim = q_encoder.head_dim

    def forward(self, q, k, q_positions, k_positions):
        return self.q_encoder(q, q_positions), self.k_encoder(k, k_positions)


def placed(module: nn.Module, c: BuildConfig) -> nn.Module:
    return module.to(device=c.device, dtype=c.dtype)


def rope(cls, c: BuildConfig, **options) -> nn.Module:
    return placed(cls(c.head_dim, base=c.base, **options), c)


@dataclass(frozen=True)
class Mutant:
    """One mutant: its record, the claims it fails (exactly), why where it fails several, or why
    no spec can kill it yet."""

    record: posenc.EncoderRecord
    fails: frozenset[str]
    why: str = ""
    survives: str = ""


MUTANTS: list[Mutant] = []


def mutant(imitates: str, *, fails: set[str] = frozenset(), why: str = "", survives: str = "", **changes):
    """Declare ``build`` a mutant of the built-in ``imitates``, named after the function, with the
    claims it must fail (``fails``) and, for more than one, why the mathematics forces each."""

    def decorate(build):
        record = dataclasses.replace(posenc.get(imitates), name=build.__name__, build=build,
                                     description=(build.__doc__ or "").strip(), **changes)
        MUTANTS.append(Mutant(record, frozenset(fails), why, survives))
        return build

    return decorate


VALUE_WRONG = "the rotation's value is wrong, so every claim about it fails: the formula (ROPE-1, ROPE-8)"
#: A wrong θ: the formula fails, and the complex form holds at the angles the encoder turns by.
THETA_WRONG = "the rotation's value is wrong (ROPE-1); the complex form holds at the θ it uses (ROPE-8)"
RELATIVE = ("logits depend on absolute positions: ROPE-4 and its consequences far out (ROPE-10a) and in "
            "attention (ATT-4)")
