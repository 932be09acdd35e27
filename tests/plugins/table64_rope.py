"""A user's RoPE whose sin/cos table holds 64 positions; later positions get the identity
rotation, as a kernel that masks out-of-range table loads would. Not part of the project's
registry: loaded only with ``pytest specs --plugin``."""

import torch

import posenc

TABLE_POSITIONS = 64


class MaskedTableRoPE(torch.nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(TABLE_POSITIONS, dtype=torch.float64)[:, None] * inv_freq
        self.register_buffer("cos_table", angles.cos().float())
        self.register_buffer("sin_table", angles.sin().float())

    def forward(self, x, positions=None, *, offset=0):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        positions = positions if positions.dim() == 2 else positions[None]
        inside = (positions < TABLE_POSITIONS)[..., None, None]
        row = positions.clamp(max=TABLE_POSITIONS - 1)
        cos = torch.where(inside, self.cos_table[row][:, :, None], 1.0)
        sin = torch.where(inside, self.sin_table[row][:, :, None], 0.0)
        a, b = x[..., 0::2].float(), x[..., 1::2].float()
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)


posenc.register(posenc.EncoderRecord(
    name="user_rope_table64",
    build=lambda c: MaskedTableRoPE(c.head_dim, c.base).to(c.device),
    kind="rotary",
    source="a user's kernel with a 64-position table",
    geometry=posenc.RotaryGeometry(layout="interleaved"),
    claims=posenc.rotary_claims(),
))
