"""RoPEs with the defects production libraries have shipped, each declared as the correct design it
imitates. ``pytest specs --plugin tests/plugins/defective_ropes.py`` must report each as FAIL on
exactly the claims in :data:`EXPECTED_FAILURES`, with a reproducer, and nothing else red.

* ``bug_dtype_polluted_cache`` - a call of more than 256 positions writes its cos/sin cache in that
  call's dtype; a later fp32 call reads the bf16 values;
* ``bug_history_at_max_len`` - dynamic NTK keeping the last grown base in the module: a call of
  exactly ``max_len`` positions (or any length below the largest seen, above ``max_len``) after a
  longer call uses the longer call's base;
* ``bug_decode_origin`` - when decoding (fewer queries than keys), the cached keys are rotated
  from position 1 instead of 0;
* ``bug_offset_in_input_dtype`` - the offset path forms ``arange(offset, offset + n)`` in the
  input's dtype (bf16 rounds past 256, fp16 past 2048); explicit positions are right;
* ``bug_table_index_error`` - a cos/sin table of ``max_len`` rows indexed directly: past its end
  an ``IndexError`` that names no limit, and a negative position wraps to the table's end.
"""

from __future__ import annotations

import torch

import posenc
from posenc.encoders.scaling import frequencies as schedules
from functools import partial

ANGLES = torch.float32


def inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rotate(x, cos, sin):
    """Interleaved pairs of (batch, seq, heads, d) rotated by cos/sin of (batch, seq, d/2)."""
    work = torch.float64 if x.dtype == torch.float64 else ANGLES
    cos, sin = cos.to(work)[:, :, None], sin.to(work)[:, :, None]
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2).to(x.dtype)


def checked(x, positions, offset):
    if not x.is_floating_point():
        raise TypeError(f"x must be a float tensor, got {x.dtype}")
    if x.dim() != 4:
        raise ValueError(f"x must have rank 4, got rank {x.dim()}")
    if positions is None:
        if offset < 0:
            raise ValueError(f"offset must be non-negative, got {offset}")
        return None
    positions = positions if positions.dim() == 2 else positions[None]
    if positions.shape[-1] != x.shape[1]:
        raise ValueError(f"positions shape {tuple(positions.shape)} does not match seq {x.shape[1]}")
    if bool((positions < 0).any()):
        raise ValueError("positions must be non-negative")
    return positions.to(x.device)


class PollutedCache(torch.nn.Module):
    def __init__(self, head_dim, base):
        super().__init__()
        self.head_dim, self.base, self.cache = head_dim, base, None

    def forward(self, x, positions=None, offset=0):
        p = checked(x, positions, offset)
        p = torch.arange(offset, offset + x.shape[1], device=x.device)[None] if p is None else p
        needed = int(p.max()) + 1
        if self.cache is not None and self.cache[0].shape[0] >= needed:
            cos, sin = (t[p] for t in self.cache)  # whatever dtype wrote the cache
        else:
            angles = p.to(ANGLES)[..., None] * inv_freq(self.head_dim, self.base).to(x.device)
            cos, sin = angles.cos(), angles.sin()
            if needed > 256:  # "long" calls are cached, in the caller's dtype
                table = torch.arange(needed, device=x.device).to(ANGLES)[:, None] * inv_freq(self.head_dim, self.base)
                self.cache = (table.cos().to(x.dtype), table.sin().to(x.dtype))
        return rotate(x, cos, sin)


class StatefulDynamicNTK(torch.nn.Module):
    def __init__(self, head_dim, base, trained=128, factor=2.0):
        super().__init__()
        self.head_dim, self.base, self.trained, self.factor = head_dim, base, trained, factor
        self.original = inv_freq(head_dim, base)
        self.current, self.cached_len = self.original, trained

    def forward(self, x, positions=None, offset=0):
        p = checked(x, positions, offset)
        p = torch.arange(offset, offset + x.shape[1], device=x.device)[None] if p is None else p
        length = int(p.max()) + 1
        if length > self.cached_len:  # grow
            d = self.head_dim
            base = self.base * (self.factor * length / self.trained - (self.factor - 1)) ** (d / (d - 2))
            self.current, self.cached_len = inv_freq(d, base), length
        if length < self.trained and self.cached_len > self.trained:  # reset only below the trained length
            self.current, self.cached_len = self.original, self.trained
        angles = p.to(ANGLES)[..., None] * self.current.to(x.device)
        return rotate(x, angles.cos(), angles.sin())


class DecodeOrigin(torch.nn.Module):
    """The pair protocol; decoding rotates the cached keys from position 1."""

    def __init__(self, head_dim, base):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def _rotate(self, x, positions):
        p = checked(x, positions, 0)
        angles = p.to(ANGLES)[..., None] * inv_freq(self.head_dim, self.base).to(x.device)
        return rotate(x, angles.cos(), angles.sin())

    def forward(self, q, k, q_positions, k_positions):
        if q.shape[1] != k.shape[1]:  # decoding against cached keys
            k_positions = k_positions + 1
        return self._rotate(q, q_positions), self._rotate(k, k_positions)


class OffsetInInputDtype(torch.nn.Module):
    def __init__(self, head_dim, base):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def forward(self, x, positions=None, offset=0):
        p = checked(x, positions, offset)
        if p is None:
            p = torch.arange(offset, offset + x.shape[1], device=x.device, dtype=x.dtype)[None]
        angles = p.to(ANGLES)[..., None] * inv_freq(self.head_dim, self.base).to(x.device)
        return rotate(x, angles.cos(), angles.sin())


class TableIndexError(torch.nn.Module):
    def __init__(self, head_dim, base, max_len):
        super().__init__()
        angles = torch.arange(max_len).to(ANGLES)[:, None] * inv_freq(head_dim, base)
        self.register_buffer("cos_table", angles.cos(), persistent=False)
        self.register_buffer("sin_table", angles.sin(), persistent=False)

    def forward(self, x, positions=None, offset=0):
        if not x.is_floating_point() or x.dim() != 4:
            raise ValueError(f"x must be a float tensor of rank 4, got {x.dtype} of rank {x.dim()}")
        if positions is None:
            if offset < 0:
                raise ValueError(f"offset must be non-negative, got {offset}")
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        positions = positions if positions.dim() == 2 else positions[None]
        if positions.shape[-1] != x.shape[1]:
            raise ValueError(f"positions shape {tuple(positions.shape)} does not match seq {x.shape[1]}")
        return rotate(x, self.cos_table.float()[positions], self.sin_table.float()[positions])  # no bounds check


GEOMETRY = posenc.RotaryGeometry(angle_dtype=torch.float32)
DYNAMIC = partial(schedules.dynamic_ntk, factor=2.0, max_position=128)
_DYNAMIC = "θ follows each call's length past 128 on purpose"
_TABLE = "a table of max_len positions: positions past it are refused"

#: The claims each defect breaks; the mathematics forces no more (see the notes).
EXPECTED_FAILURES = {
    "bug_dtype_polluted_cache": {"ROPE-9"},
    "bug_history_at_max_len": {"ROPE-9"},
    "bug_decode_origin": {"PATH-2"},
    # Decoding calls the offset path, so decoding in bf16 and fp16 is broken too.
    "bug_offset_in_input_dtype": {"PATH-1", "PATH-2"},
    # The error past the table names no limit, and a negative position wraps to the table's end.
    "bug_table_index_error": {"contract"},
}


def _register(name, build, geometry=GEOMETRY, overrides=None, **fields):
    posenc.register(posenc.EncoderRecord(
        name=name, build=build, kind="rotary", source="a defective RoPE (tests/plugins/defective_ropes.py)",
        geometry=geometry, claims=posenc.rotary_claims(overrides), description=__doc__.split(f"``{name}`` - ")[1]
        .split("\n* ")[0].replace("\n", " ").strip(), **fields))


_register("bug_dtype_polluted_cache", lambda c: PollutedCache(c.head_dim, c.base))
_register("bug_history_at_max_len", lambda c: StatefulDynamicNTK(c.head_dim, c.base, trained=128),
          posenc.RotaryGeometry(angle_dtype=torch.float32, frequencies=DYNAMIC, length_dependent=True), {
              "ROPE-1": posenc.refuted(_DYNAMIC, specs=("test_rotations_compose",)),
              "ROPE-4": posenc.refuted(_DYNAMIC), "ROPE-10a": posenc.refuted(_DYNAMIC),
              "ATT-4": posenc.refuted(_DYNAMIC),  # ROPE-11 holds: as wrong in every dtype
              "PATH-2": posenc.refuted(_DYNAMIC + ": cached keys keep their old base"),
          }, min_head_dim=4)
_register("bug_decode_origin", lambda c: DecodeOrigin(c.head_dim, c.base), protocol="pair",
          overrides={"PATH-1": posenc.not_applicable("explicit positions only")})
_register("bug_offset_in_input_dtype", lambda c: OffsetInInputDtype(c.head_dim, c.base))
_register("bug_table_index_error", lambda c: TableIndexError(c.head_dim, c.base, c.max_len), table_limited=True,
          overrides={"ROPE-10a": posenc.not_applicable(_TABLE), "ROPE-11": posenc.not_applicable(_TABLE)})
