"""Phase precision of RoPE against a float64 reference (ROPE-10a, ROPE-11).

``relative_offset_error(angle_dtype, input_dtype, position)`` is the largest error of
``⟨f(q, P), f(k, P − δ)⟩`` against the float64 ``⟨q, R_δ k⟩``, relative to ``|q||k|``, for a
RoPE whose angles ``p·θ_i`` are formed in ``angle_dtype`` (the built-ins use float32; many
published implementations use the input dtype). ``python -m posenc.tools.precision`` prints the
table that README quotes; ``tests/test_tools.py`` checks its shape and ordering.
"""

from __future__ import annotations

import sys

import torch

from posenc.encoders import RotaryEmbedding
from posenc.harness.references.reference import DELTAS, FAR_POSITIONS, reference_frequencies
from posenc.tools import cli

HEAD_DIM = 64


def rotate_with_angles_in(x, positions, angle_dtype):
    """RoPE (interleaved) with angles formed and rotated in ``angle_dtype``; output in x's dtype."""
    theta = reference_frequencies(HEAD_DIM, 10000.0).to(angle_dtype)
    angles = positions.to(angle_dtype)[:, None] * theta
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2].to(angle_dtype), x[..., 1::2].to(angle_dtype)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)


def relative_offset_error(angle_dtype, input_dtype, position: int, seed: int = 0) -> float:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(len(DELTAS), HEAD_DIM, generator=generator, dtype=torch.float64).to(input_dtype)
    k = torch.randn(len(DELTAS), HEAD_DIM, generator=generator, dtype=torch.float64).to(input_dtype)
    deltas = torch.tensor(DELTAS)
    m = torch.full((len(DELTAS),), position)
    if angle_dtype is None:  # the built-in encoder
        rope = RotaryEmbedding(HEAD_DIM)
        fq = rope(q[None, :, None], m)[0, :, 0]
        fk = rope(k[None, :, None], m - deltas)[0, :, 0]
    else:
        fq, fk = rotate_with_angles_in(q, m, angle_dtype), rotate_with_angles_in(k, m - deltas, angle_dtype)
    q64, k64 = q.double(), k.double()
    expected = (rotate_with_angles_in(q64, deltas, torch.float64) * k64).sum(-1)
    observed = (fq.double() * fk.double()).sum(-1)
    return float(((observed - expected).abs() / (q64.norm(dim=-1) * k64.norm(dim=-1))).max())


ROWS = (
    ("built-in (fp32 angles), fp32 input", None, torch.float32),
    ("built-in (fp32 angles), bf16 input", None, torch.bfloat16),
    ("built-in (fp32 angles), fp16 input", None, torch.float16),
    ("angles in bf16", torch.bfloat16, torch.bfloat16),
    ("angles in fp16", torch.float16, torch.float16),
)


def precision_table() -> list[tuple[str, list[float]]]:
    return [(label, [relative_offset_error(a, i, p) for p in FAR_POSITIONS]) for label, a, i in ROWS]


def precision_markdown() -> str:
    lines = ["| implementation | " + " | ".join(f"p = 10^{len(str(p)) - 1}" for p in FAR_POSITIONS) + " |",
             "|---|" + "---|" * len(FAR_POSITIONS)]
    lines += [f"| {label} | " + " | ".join(f"{e:.1e}" for e in errors) + " |" for label, errors in precision_table()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    cli.ArgumentParser(prog="python -m posenc precision", description=__doc__.splitlines()[0]).parse_args(argv)
    print(precision_markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
