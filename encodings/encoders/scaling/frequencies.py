"""RoPE frequency schedules for long context, each a function ``(rotary_dim, base) -> θ`` in float64.

* :func:`default` - θ_i = base^(−2i/d) (RoFormer; 000 §3.2, 004 §3.1);
* :func:`ntk_aware` - the same formula with base b·s^(d/(d−2)): θ_0 stays 1, the slowest pair
  turns s times slower (bloc97's "NTK-aware" scaling);
* :func:`yarn` - NTK-by-parts (Peng et al. 2023, YaRN §3.2): pairs that turn more than
  ``beta_fast`` times over the original context keep θ_i, pairs that turn fewer than ``beta_slow``
  times get θ_i / s, with a linear ramp between (its ends rounded out to whole pairs unless
  ``truncate=False``, and clamped to the head either way, as transformers does);
  :func:`yarn_attention_factor` is the magnitude 0.1·ln s + 1 YaRN multiplies cos and sin by;
* :func:`llama3` - Llama 3's bands: wavelengths 2π/θ_i shorter than L/high_freq_factor keep θ_i,
  longer than L/low_freq_factor get θ_i / s, and the band between is interpolated smoothly in
  L/wavelength (no band between when the two factors are equal, Llama 4's setting);
* :func:`dynamic_ntk` - NTK-aware with a factor that grows with the call's own length ``n`` past
  the trained ``L``: base b·(s·n/L − (s − 1))^(d/(d−2)), the plain schedule up to ``L`` (a
  function of the call, with no state kept between calls);
* :func:`longrope` - LongRoPE's per-pair rescale factors λ_i (Ding et al. 2024): θ_i / λ_i, with
  :func:`longrope_attention_factor` √(1 + ln s / ln L) as the magnitude.

Bind the parameters with :func:`functools.partial` and pass the result as
``RotaryEmbedding(frequencies=...)``; the harness's geometry takes the same function.
"""

from __future__ import annotations

import math

import torch

from ..validation import require_base, require_positive


def default(rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    require_base(base)
    return base ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def ntk_aware(rotary_dim: int, base: float = 10000.0, *, factor: float) -> torch.Tensor:
    require_positive(factor, "factor")
    if rotary_dim < 4:
        return default(rotary_dim, base)  # one pair: θ_0 = 1 whatever the base
    return default(rotary_dim, base * factor ** (rotary_dim / (rotary_dim - 2)))


def _correction_dim(rotations: float, rotary_dim: int, base: float, original_max_position: int) -> float:
    """The pair index ``i`` (as a real number) that turns ``rotations`` times over the original context."""
    return rotary_dim * math.log(original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn(rotary_dim: int, base: float = 10000.0, *, factor: float, original_max_position: int,
         beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True) -> torch.Tensor:
    require_positive(factor, "factor")
    theta = default(rotary_dim, base)
    low = _correction_dim(beta_fast, rotary_dim, base, original_max_position)
    high = _correction_dim(beta_slow, rotary_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    high = high + 0.001 if high == low else high
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (keep θ_i), 0: interpolate (θ_i / s)
    return theta / factor * (1 - keep) + theta * keep


def yarn_attention_factor(factor: float) -> float:
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def llama3(rotary_dim: int, base: float = 500000.0, *, factor: float = 8.0, low_freq_factor: float = 1.0,
           high_freq_factor: float = 4.0, original_max_position: int = 8192) -> torch.Tensor:
    require_positive(factor, "factor")
    if not 0 < low_freq_factor <= high_freq_factor:
        raise ValueError(f"need 0 < low_freq_factor <= high_freq_factor, got {low_freq_factor}, {high_freq_factor}")
    theta = default(rotary_dim, base)
    wavelength = 2 * math.pi / theta
    long_wave, short_wave = original_max_position / low_freq_factor, original_max_position / high_freq_factor
    if low_freq_factor == high_freq_factor:  # one edge: wavelengths past it are scaled, the rest kept
        return torch.where(wavelength > long_wave, theta / factor, theta)
    smooth = (original_max_position / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    between = (1 - smooth) * theta / factor + smooth * theta
    scaled = torch.where(wavelength > long_wave, theta / factor, theta)
    return torch.where((wavelength >= short_wave) & (wavelength <= long_wave), between, scaled)


def dynamic_ntk(rotary_dim: int, base: float = 10000.0, *, factor: float, max_position: int, length: int) -> torch.Tensor:
    require_positive(factor, "factor")
    if length <= max_position or rotary_dim < 4:
        return default(rotary_dim, base)
    grown = factor * length / max_position - (factor - 1)
    return default(rotary_dim, base * grown ** (rotary_dim / (rotary_dim - 2)))


def longrope(rotary_dim: int, base: float = 10000.0, *, factors) -> torch.Tensor:
    """θ_i / λ_i with one factor per pair. ``factors`` is a sequence, or a function of the pair
    count giving one (so the schedule is defined at every head size)."""
    lam = torch.as_tensor(factors(rotary_dim // 2) if callable(factors) else factors, dtype=torch.float64)
    if lam.shape != (rotary_dim // 2,) or not bool((lam >= 1).all()):
        raise ValueError(f"longrope needs {rotary_dim // 2} factors, each at least 1, got {lam.tolist()}")
    return default(rotary_dim, base) / lam


def longrope_attention_factor(factor: float, original_max_position: int) -> float:
    return math.sqrt(1 + math.log(factor) / math.log(original_max_position)) if factor > 1 else 1.0
