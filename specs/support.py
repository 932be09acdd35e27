"""Helpers shared by every spec: inputs, calling conventions, float64 references, verdicts."""

from __future__ import annotations

import math

import torch

from posenc import BuildConfig, ClaimViolation, EncoderRecord

#: The configuration every spec builds encoders with unless it says otherwise.
SPEC_CONFIG = BuildConfig(d_model=64, n_heads=4, max_len=128)
#: Positions far past any table (ROPE-10a, ROPE-11): 10^2 … 10^6.
FAR_POSITIONS = (10**2, 10**3, 10**4, 10**5, 10**6)


def randn(shape, seed: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Standard normal values drawn in float64 from ``seed``, then cast (same values for every dtype)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)


def build(record: EncoderRecord, dtype=torch.float32, device="cpu", **overrides) -> torch.nn.Module:
    config = {**SPEC_CONFIG.__dict__, **overrides}
    config.pop("dtype"), config.pop("device")
    return record.make(dtype=dtype, device=device, **config)


def config(**overrides) -> BuildConfig:
    return BuildConfig(**{**SPEC_CONFIG.__dict__, **overrides})


def input_shape(record: EncoderRecord, batch: int, seq: int, cfg: BuildConfig = SPEC_CONFIG) -> tuple:
    if record.kind == "attention" or record.input_layout == "bsd":
        return (batch, seq, cfg.d_model)
    return (batch, seq, cfg.n_heads, cfg.head_dim)


def as_heads(t: torch.Tensor, cfg: BuildConfig = SPEC_CONFIG) -> torch.Tensor:
    """View ``(batch, seq, d_model)`` as ``(batch, seq, heads, head_dim)``; rank-4 input is returned as is."""
    return t if t.dim() == 4 else t.reshape(*t.shape[:2], cfg.n_heads, t.shape[-1] // cfg.n_heads)


def from_heads(t: torch.Tensor, record: EncoderRecord) -> torch.Tensor:
    """Back to the record's input layout."""
    return t.flatten(-2) if record.input_layout == "bsd" else t


def position_cap(record: EncoderRecord, wanted: int, cfg: BuildConfig = SPEC_CONFIG) -> int:
    """The largest position a spec may use: a learned table stops at ``max_len - 1``."""
    return min(wanted, cfg.max_len - 1) if record.table_limited else wanted


def encode(module, x, positions=None):
    with torch.no_grad():
        return module(x, positions)


# ---------------------------------------------------------------- float64 references

def reference_frequencies(dim: int, base: float) -> torch.Tensor:
    """θ_i = base^(-2i/dim), from the formula, in float64."""
    return torch.tensor([base ** (-2.0 * i / dim) for i in range(dim // 2)], dtype=torch.float64)


def roformer_bound(theta: torch.Tensor, distances) -> torch.Tensor:
    """RoFormer §3.4.3: ``B(r) = (1/(d/2))·Σ_j |S_j|`` with ``S_j = Σ_{k<j} e^{i r θ_k}``, in float64."""
    r = torch.as_tensor(distances, dtype=torch.float64)
    theta = theta.to(torch.float64)
    phases = torch.polar(torch.ones(len(r), len(theta), dtype=torch.float64), r[:, None] * theta[None])
    return phases.cumsum(dim=-1).abs().mean(dim=-1)


def reference_rotation(x: torch.Tensor, positions: torch.Tensor, geometry, head_dim: int) -> torch.Tensor:
    """Float64 RoPE of per-head ``x`` (…, seq, heads, head_dim) at ``positions`` (…, seq), in the geometry's layout."""
    x = x.to(torch.float64)
    r = geometry.rotary_dim(head_dim)
    theta = reference_frequencies(r, geometry.base).to(x.device)
    p = positions.to(device=x.device, dtype=torch.float64) / geometry.scaling_factor
    angle = (p.unsqueeze(-1) * theta).unsqueeze(-2)  # (…, seq, 1, r/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    if geometry.layout == "half_split":
        a, b = x[..., : r // 2], x[..., r // 2 : r]
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
    ya, yb = a * cos - b * sin, a * sin + b * cos
    out = x.clone()
    if geometry.layout == "interleaved":
        out[..., 0:r:2], out[..., 1:r:2] = ya, yb
    else:
        out[..., :r] = torch.cat((ya, yb), dim=-1)
    return out


def reference_attention(q, k, v, *, causal=False) -> torch.Tensor:
    """``softmax(q kᵀ / √d) v`` in float64, per head; inputs (batch, seq, heads, d)."""
    q, k, v = (t.to(torch.float64).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(dim=-1) @ v).transpose(1, 2)


def max_angle(positions, geometry=None) -> float:
    """The largest angle p·θ_0 / s formed for ``positions`` (θ_0 = 1)."""
    p = float(torch.as_tensor(positions).max()) if torch.as_tensor(positions).numel() else 0.0
    return p / (geometry.scaling_factor if geometry else 1.0)


# ---------------------------------------------------------------- verdicts

def reproducer(spec: str, record: EncoderRecord, **values) -> str:
    """A command that reruns ``spec`` on this encoder (with its plug-in), and the drawn values."""
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    plugin = f" --plugin {record.origin}" if record.origin != "built-in" else ""
    return f"pytest specs{plugin} --encoders {record.name} -k '{spec}'  # {shown}"


def violated(record: EncoderRecord, claim: str, summary: str, **details):
    raise ClaimViolation(record.name, claim, summary, **details)


def require_within(record, claim, *, error: float, bound: float, what: str, repro: str, **details):
    """Raise :class:`ClaimViolation` unless ``error <= bound`` (NaN fails)."""
    if not error <= bound:
        violated(record, claim, f"{what}: error {error:.3e} exceeds tolerance {bound:.3e}",
                 **details, reproducer=repro)


def max_error(observed: torch.Tensor, expected: torch.Tensor) -> float:
    return float((observed.detach().to(torch.float64) - expected.detach().to(torch.float64)).abs().max())


def _within_rotary_part(order: torch.Tensor, dim: int) -> torch.Tensor:
    """Extend a permutation of the rotated features by the identity on the rest."""
    return torch.cat((order, torch.arange(len(order), dim)))


def output_pair_order(geometry, dim: int) -> torch.Tensor:
    """Index map from the formula's interleaved output to a layout's output coordinates.

    ``y_layout = y_formula[..., order]`` for interleaved and concatenated layouts; for
    half_split the input must be permuted the same way as well (pairs ``(i, i + r/2)``).
    Only the rotated part ``r = geometry.rotary_dim(dim)`` is permuted.
    """
    r = geometry.rotary_dim(dim)
    if geometry.layout == "interleaved":
        return torch.arange(dim)
    return _within_rotary_part(torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2))), dim)


def input_pair_order(geometry, dim: int) -> torch.Tensor:
    """``x_formula = x[..., order]`` puts a layout's pairs at ``(2i, 2i+1)``."""
    r = geometry.rotary_dim(dim)
    if geometry.layout == "half_split":
        half = torch.arange(r // 2)
        return _within_rotary_part(torch.stack((half, half + r // 2), dim=-1).flatten(), dim)
    return torch.arange(dim)


def heads_config(record: EncoderRecord, head_dim: int, n_heads: int = 2, **overrides) -> dict:
    """Build overrides giving ``head_dim`` per head."""
    return dict(d_model=head_dim * n_heads, n_heads=n_heads, **overrides)


def needs_float64(record: EncoderRecord) -> None:
    """Skip a spec whose arithmetic (finite differences, least squares, matrix algebra) needs float64
    when the encoder does not declare float64 support."""
    import pytest

    if torch.float64 not in record.dtypes:
        pytest.skip(f"{record.name} does not declare float64 (dtypes {[str(d) for d in record.dtypes]}); "
                    "this spec needs float64 precision")
