"""The long-context frequency schedules keep the properties that define them (float64)."""

import math

import pytest
import torch

import posenc
from posenc.encoders.scaling import frequencies as schedules

D, BASE = 16, 10000.0


def test_default_is_the_formula():
    theta = schedules.default(D, BASE)
    assert torch.equal(theta, torch.tensor([BASE ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float64))


def test_ntk_aware_keeps_the_fastest_pair_and_slows_the_slowest_by_the_factor():
    plain, ntk = schedules.default(D, BASE), schedules.ntk_aware(D, BASE, factor=4.0)
    assert ntk[0] == 1.0
    assert float(ntk[-1]) == pytest.approx(float(plain[-1]) / 4.0, rel=1e-12)
    assert bool((ntk <= plain).all())


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_with_a_ramp_between():
    plain = schedules.default(D, BASE)
    yarn = schedules.yarn(D, BASE, factor=4.0, original_max_position=2048)
    ratio = plain / yarn  # 1 where θ is kept, 4 where it is divided by the factor
    assert torch.allclose(ratio[:3], torch.ones(3, dtype=torch.float64))  # pairs turning > 32 times in 2048
    assert torch.allclose(ratio[6:], torch.full((2,), 4.0, dtype=torch.float64))  # pairs turning < once
    assert bool((ratio[1:] >= ratio[:-1]).all())  # monotone ramp
    assert schedules.yarn_attention_factor(4.0) == pytest.approx(0.1 * math.log(4.0) + 1)
    assert schedules.yarn_attention_factor(1.0) == 1.0


def test_llama3_bands():
    plain = schedules.default(D, BASE)
    llama = schedules.llama3(D, BASE, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position=8192)
    wavelength = 2 * math.pi / plain
    short, long = wavelength < 8192 / 4, wavelength > 8192 / 1
    assert torch.equal(llama[short], plain[short])
    assert torch.allclose(llama[long], plain[long] / 8)
    middle = ~short & ~long
    assert bool(middle.any()) and bool(((llama[middle] < plain[middle]) & (llama[middle] > plain[middle] / 8)).all())


def test_a_schedule_is_used_as_given_and_checked():
    rope = posenc.RotaryEmbedding(D, frequencies=lambda d, b: schedules.ntk_aware(d, b, factor=2.0))
    assert torch.equal(rope.to(torch.float16).inv_freq, schedules.ntk_aware(D, BASE, factor=2.0))
    with pytest.raises(ValueError, match="must give 8 finite positive values"):
        posenc.RotaryEmbedding(D, frequencies=lambda d, b: torch.zeros(d // 2))
    with pytest.raises(ValueError, match="magnitude must be a finite positive number"):
        posenc.RotaryEmbedding(D, magnitude=0.0)


def test_yarn_without_truncation_ramps_between_the_exact_correction_dimensions():
    truncated = schedules.yarn(D, BASE, factor=4.0, original_max_position=2048)
    exact = schedules.yarn(D, BASE, factor=4.0, original_max_position=2048, truncate=False)
    assert torch.equal(truncated[[0, -1]], exact[[0, -1]]) and not torch.equal(truncated, exact)
    low = schedules._correction_dim(32.0, D, BASE, 2048)
    high = schedules._correction_dim(1.0, D, BASE, 2048)
    keep = 1 - ((torch.arange(D // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    plain = schedules.default(D, BASE)
    assert torch.allclose(exact, plain / 4 * (1 - keep) + plain * keep, rtol=1e-15)


def test_llama3_with_equal_factors_has_one_edge_and_no_band_between():
    """Llama 4's setting: low_freq_factor == high_freq_factor; wavelengths past L/factor are scaled."""
    plain = schedules.default(D, BASE)
    llama = schedules.llama3(D, BASE, factor=16.0, low_freq_factor=1.0, high_freq_factor=1.0,
                             original_max_position=256)
    long = 2 * math.pi / plain > 256
    assert bool(long.any()) and bool((~long).any())
    assert torch.equal(llama[~long], plain[~long]) and torch.equal(llama[long], plain[long] / 16)
    with pytest.raises(ValueError, match="low_freq_factor <= high_freq_factor"):
        schedules.llama3(D, BASE, low_freq_factor=4.0, high_freq_factor=1.0)
