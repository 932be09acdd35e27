"""RoPEs that compute float64 input in float32, as many libraries do (torchtune casts x to fp32).

Finite differences at float64's step cannot match an output rounded to fp32: the gradient check
must be judged with the precision the record declares (``angle_dtype=torch.float32``).

* ``rope_float64_in_fp32``: correct; its gradient is exact up to fp32 rounding;
* ``rope_float64_in_fp32_wrong_backward``: the same forward, with a backward that rotates the
  upstream gradient by ``R_p`` instead of ``R_pᵀ``: the gradient check must still fail.
"""

import torch

import posenc
from posenc.encoders.rotary import rotate


def _rotated(x, positions, head_dim, base, sign=1.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32)[..., None] * inv_freq
    cos, sin = angles.cos()[:, :, None], (sign * angles.sin())[:, :, None]
    return rotate(x.to(torch.float32), cos, sin, "interleaved").to(x.dtype)


class _WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, head_dim, base):
        ctx.save_for_backward(positions)
        ctx.head_dim, ctx.base = head_dim, base
        return _rotated(x, positions, head_dim, base)

    @staticmethod
    def backward(ctx, grad):
        (positions,) = ctx.saved_tensors
        return _rotated(grad, positions, ctx.head_dim, ctx.base), None, None, None  # R_p, not R_pᵀ


class Float64InFp32(torch.nn.Module):
    def __init__(self, head_dim, base=10000.0, wrong_backward=False):
        super().__init__()
        self.head_dim, self.base, self.wrong_backward = head_dim, base, wrong_backward

    def forward(self, x, positions=None, *, offset=0):
        if positions is None:
            positions = torch.arange(offset, offset + x.shape[1])
        positions = (positions if positions.dim() == 2 else positions[None]).expand(x.shape[0], -1)
        if self.wrong_backward:
            return _WrongBackward.apply(x, positions, self.head_dim, self.base)
        return _rotated(x, positions, self.head_dim, self.base)


_CLAIMS = posenc.rotary_claims({
    posenc.CONTRACT: posenc.refuted("validates no input", specs=(
        "test_rejects_non_float_input", "test_rejects_wrong_rank", "test_rejects_negative_positions")),
})
for name, wrong in (("rope_float64_in_fp32", False), ("rope_float64_in_fp32_wrong_backward", True)):
    posenc.register(posenc.EncoderRecord(
        name=name, build=lambda c, wrong=wrong: Float64InFp32(c.head_dim, c.base, wrong).to(c.device),
        kind="rotary", source="tests/plugins/fp32_compute.py",
        geometry=posenc.RotaryGeometry(layout="interleaved", angle_dtype=torch.float32), claims=_CLAIMS,
    ))
