"""A user's RoPE that forms its angles p·θ_i in bfloat16, as many published implementations do
when the model runs in bf16. Loaded only with ``pytest specs --plugin``."""

import torch

import posenc


class Bf16AngleRoPE(torch.nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        self.inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)

    def forward(self, x, positions=None, *, offset=0):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        positions = positions if positions.dim() == 2 else positions[None]
        angles = positions.to(torch.bfloat16)[..., None] * self.inv_freq.to(torch.bfloat16)
        cos, sin = angles.float().cos()[:, :, None], angles.float().sin()[:, :, None]
        a, b = x[..., 0::2].float(), x[..., 1::2].float()
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)


posenc.register(posenc.EncoderRecord(
    name="user_rope_bf16_angles",
    build=lambda c: Bf16AngleRoPE(c.head_dim, c.base),
    kind="rotary",
    source="a user's RoPE with bf16 angles",
    geometry=posenc.RotaryGeometry(layout="interleaved"),
    claims=posenc.rotary_claims(),
))
