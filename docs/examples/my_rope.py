# my_rope.py
import torch
import posenc


class MyRoPE(torch.nn.Module):
    """Half-split RoPE on (batch, seq, heads, head_dim); angles in fp32, as in production code."""

    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        self.inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, x, positions=None, *, offset=0):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        positions = positions if positions.dim() == 2 else positions[None]
        angles = positions.float()[..., None] * self.inv_freq.to(x.device)
        cos, sin = angles.cos()[:, :, None].to(x.dtype), angles.sin()[:, :, None].to(x.dtype)
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


posenc.register(posenc.EncoderRecord(
    name="my_rope",
    build=lambda c: MyRoPE(c.head_dim, c.base).to(c.device),   # c: posenc.BuildConfig
    kind="rotary",                         # additive | rotary | attention
    source="my_model.py",
    geometry=posenc.RotaryGeometry(layout="half_split", angle_dtype=torch.float32),
    claims=posenc.rotary_claims({          # a correct RoPE: every rotary claim holds, except that
        "ROPE-13": posenc.refuted(         # not the formula's pairs (drop if interleaved)
            "pairs (i, i + d/2)", specs=("test_output_equals_formula_elementwise",)),
        posenc.CONTRACT: posenc.refuted(   # and it checks no input
            "validates no input", specs=("test_rejects_non_float_input", "test_rejects_wrong_rank",
                                         "test_rejects_negative_positions")),
    }),
))
