"""Error messages show what the user gave: the value past a limit in full, the shape as passed, the
limit or parameter by name, both devices; and the documented NaN behaviour of causal attention."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posenc
from posenc.encoders import attention, dynamic

ROOT = Path(__file__).resolve().parent.parent


def _message(call, error=ValueError) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("dtype, positions, shown", [
    (torch.float32, torch.tensor([0.0, 16777216.0000001], dtype=torch.float64), "16777216.0000001"),
    (torch.float64, torch.tensor([0, 2**53 + 1]), "9007199254740993"),  # a float64 copy would round it onto 2^53
], ids=["float-just-past-2^24", "int64-one-past-2^53"])
def test_a_position_just_past_the_limit_is_shown_with_its_excess(dtype, positions, shown):
    rope, x = posenc.RotaryEmbedding(8), torch.randn(1, 2, 1, 8, dtype=dtype)
    limit = 2**24 if dtype == torch.float32 else 2**53
    assert _message(lambda: rope(x, positions)) == (
        f"positions must be at most {limit}, the largest position {dtype} angles represent exactly, "
        f"got maximum {shown}")


def test_positions_of_a_wrong_shape_are_shown_as_given():
    rope, x = posenc.RotaryEmbedding(8), torch.randn(2, 5, 1, 8)
    assert _message(lambda: rope(x, torch.arange(6))) == \
        "positions must have shape (seq,)=(5,) or (batch, seq)=(2, 5), got (6,)"


@pytest.mark.parametrize("build, name, meaning", [
    (lambda: posenc.LearnablePositionalEmbedding(16.5, 8), "max_len", "the learnable table's rows"),
    (lambda: posenc.HybridPositionalEncoding(16, 4, 16.5), "max_len", "the learnable table's rows"),
    (lambda: posenc.RotaryEmbeddingComplex(8, 16.5), "max_seq_len", "the phasor cache's first length"),
    (lambda: posenc.DynamicPositionalEncoding(8, 16.5), "max_seq_len", "the phasor cache's first length"),
], ids=["learnable", "hybrid", "complex", "dynamic"])
def test_a_fractional_length_limit_is_refused_by_name(build, name, meaning):
    message = _message(build)
    assert message.startswith(f"{name} must be a positive integer ({meaning}") and message.endswith("got 16.5")


def test_a_negative_max_cache_len_is_refused_not_clamped():
    assert _message(lambda: posenc.RotaryEmbeddingComplex(8, 16, max_cache_len=-5)) == \
        "max_cache_len must be a positive integer (the longest phasor cache), got -5"


@pytest.mark.parametrize("build, shape", [
    (lambda: posenc.RotaryEmbedding(8), (1, 5, 2, 8)),
    (lambda: posenc.RotaryEmbeddingComplex(8), (1, 5, 2, 8)),
    (lambda: posenc.LearnablePositionalEmbedding(8, 16), (1, 5, 16)),
    (lambda: posenc.SinusoidalPositionalEncoding(16), (1, 5, 16)),
    (lambda: posenc.RoPEAttention(16, 2), (1, 5, 16)),
    (lambda: posenc.ALiBiAttention(16, 2), (1, 5, 16)),
    (lambda: posenc.DynamicPositionalEncoding(8), (1, 5, 2, 8)),
], ids=["rotary", "complex", "learnable", "sinusoidal", "attention", "alibi", "dynamic"])
def test_positions_on_another_device_name_both_devices(build, shape):
    module, x = build(), torch.randn(shape)
    assert _message(lambda: module(x, torch.arange(5, device="meta"))) == \
        "positions are on meta but the input is on cpu; give positions on cpu"


def test_alibi_bias_refuses_meta_positions_by_name():
    bias = posenc.ALiBiBias(2)
    assert _message(lambda: bias(torch.arange(5), torch.arange(5, device="meta"))) == \
        "k_positions are on the meta device, which holds no values to check; give them on cpu or cuda"


@pytest.mark.parametrize("value, line", [
    ("bogus", "ERROR: POSENC_EXPERIMENT: 'bogus'; allowed: quick (the CI-sized run), small (half the training, "
              "the same verdicts) or a kept run's FILE.json"),
    ("missing.json", "ERROR: POSENC_EXPERIMENT: no such results file 'missing.json'; give a kept run's results.json"),
], ids=["bogus", "missing-json"])
def test_a_bad_experiment_variable_stops_the_run_at_start_up(tmp_path, value, line):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}, "POSENC_EXPERIMENT": value}
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--matrix-dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    said = " ".join(done.stderr.split())  # wrapped to the terminal
    assert done.returncode == 4 and said == line, (done.returncode, done.stderr[-2000:])
    assert max(map(len, done.stderr.splitlines())) <= 100


def test_causal_attention_spreads_a_later_nan_as_documented():
    """Inherited from SDPA: the causal mask weights a later token 0, and 0 · NaN is NaN (CPU)."""
    assert "ATT-3 holds for finite input only" in " ".join(attention.RoPEAttention.__doc__.split())
    assert "ATT-3 is decided on finite input" in (ROOT / "docs" / "findings" / "documents.md").read_text()
    torch.manual_seed(0)
    rope, alibi = posenc.RoPEAttention(16, 2, causal=True), posenc.ALiBiAttention(16, 2, causal=True)
    q, k, v = (torch.randn(1, 6, 2, 8) for _ in range(3))
    later_nan = torch.zeros(1, 6, 1, 1).index_fill(1, torch.tensor([5]), float("nan"))
    assert torch.isfinite(rope.attend(q, k, v)).all()
    assert rope.attend(q, k, v + later_nan)[:, :5].isnan().all()  # a later value: every earlier output
    assert torch.isfinite(rope.attend(q, k + later_nan, v)[:, :5]).all()  # a later key: none
    assert alibi.attend(q, k + later_nan, v)[:, :5].isnan().all()  # ALiBi: a later key or value, every output
    assert alibi.attend(q, k, v + later_nan)[:, :5].isnan().all()


def test_a_dynamic_scale_trained_below_zero_is_named_not_the_positions():
    module = dynamic.DynamicPositionalEncoding(8)
    with torch.no_grad():
        module.dynamic_scale.fill_(-0.5)
    assert _message(lambda: module(torch.randn(1, 5, 2, 8))) == \
        "dynamic_scale must be finite and non-negative (it scales the positions p to s·p), got -0.5"
