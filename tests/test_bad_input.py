"""Every encoder class rejects bad input with an error that names the broken limit."""

import pytest
import torch

import posenc

D, H, MAX_LEN = 16, 4, 8

# (class name, constructor, a valid input)
ENCODERS = {
    "LearnablePositionalEmbedding": (lambda: posenc.LearnablePositionalEmbedding(MAX_LEN, D), (2, 5, D)),
    "SinusoidalPositionalEncoding": (lambda: posenc.SinusoidalPositionalEncoding(D), (2, 5, D)),
    "RotaryEmbedding": (lambda: posenc.RotaryEmbedding(D // H), (2, 5, H, D // H)),
    "RotaryEmbeddingComplex": (lambda: posenc.RotaryEmbeddingComplex(D // H, MAX_LEN), (2, 5, H, D // H)),
    "MultiHeadRotaryEmbedding": (lambda: posenc.MultiHeadRotaryEmbedding(D, H), (2, 5, D)),
    "RoPEAttention": (lambda: posenc.RoPEAttention(D, H), (2, 5, D)),
    "LinearAttentionRoPE": (lambda: posenc.LinearAttentionRoPE(D, H), (2, 5, D)),
    "HybridPositionalEncoding": (lambda: posenc.HybridPositionalEncoding(D, H, MAX_LEN), (2, 5, D)),
    "DynamicPositionalEncoding": (lambda: posenc.DynamicPositionalEncoding(D // H, MAX_LEN), (2, 5, H, D // H)),
}
NAMES = list(ENCODERS)


def make(name):
    build, shape = ENCODERS[name]
    return build(), torch.randn(shape)


@pytest.mark.parametrize("name", NAMES)
def test_valid_input_works(name):
    module, x = make(name)
    assert module(x).shape == x.shape


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_an_input_at_an_odd_storage_offset_answers_as_its_copy(name, grad):
    """A contiguous view that starts one float into its buffer (a slice of a flat activation)
    cannot be seen as complex pairs in place: the complex form copies it rather than raise."""
    module, x = make(name)
    shifted = torch.randn(1 + x.numel())[1:].view(x.shape).requires_grad_(grad)
    assert shifted.storage_offset() == 1
    torch.testing.assert_close(module(shifted), module(shifted.detach().clone()))  # float32 rounding: alignment


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_float_dtype(name, dtype):
    module, x = make(name)
    with pytest.raises(TypeError, match=r"floating-point dtype .* got torch\.(int|bool|complex)"):
        module(x.to(dtype))


@pytest.mark.parametrize("name", NAMES)
def test_wrong_rank(name):
    module, x = make(name)
    with pytest.raises(ValueError, match=rf"must have rank {x.dim()} .* got rank {x.dim() + 1}"):
        module(x.unsqueeze(0))
    with pytest.raises(ValueError, match=rf"must have rank {x.dim()} .* got rank {x.dim() - 1}"):
        module(x[0])


@pytest.mark.parametrize("name", NAMES)
def test_wrong_last_dimension(name):
    module, x = make(name)
    with pytest.raises(ValueError, match=r"last dimension must equal (d_model|head_dim)="):
        module(torch.randn(*x.shape[:-1], x.shape[-1] + 2))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 5, 1), (1, 4)])
def test_positions_of_wrong_shape(name, shape):
    module, x = make(name)
    with pytest.raises(ValueError, match=r"positions must have shape \(seq,\)=\(5,\) or \(batch, seq\)=\(2, 5\)"):
        module(x, torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize("name", NAMES)
def test_negative_positions_and_offset(name):
    module, x = make(name)
    with pytest.raises(ValueError, match="positions must be non-negative, got minimum -3"):
        module(x, torch.tensor([0, 1, -3, 2, 4]))
    with pytest.raises(ValueError, match="offset must be non-negative, got -1"):
        module(x, offset=-1)
    with pytest.raises(TypeError, match="positions must be integer or real floating point"):
        module(x, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions must be finite"):
        module(x, torch.tensor([0.0, 1.0, float("nan"), 3.0, 4.0]))


@pytest.mark.parametrize(
    "build",
    [
        lambda: posenc.RotaryEmbedding(15),
        lambda: posenc.RotaryEmbeddingComplex(15),
        lambda: posenc.RotaryEmbedding(16, rotary_dim=7),
        lambda: posenc.SinusoidalPositionalEncoding(15),
        lambda: posenc.DynamicPositionalEncoding(9),
        lambda: posenc.MultiHeadRotaryEmbedding(12, 4),  # head_dim 3
    ],
    ids=["real", "complex", "partial", "sinusoidal", "dynamic", "multihead"],
)
def test_odd_rotary_dim(build):
    with pytest.raises(ValueError, match=r"(head_dim|rotary_dim|d_model) must be a positive even number"):
        build()


def test_rotary_dim_larger_than_head_dim():
    with pytest.raises(ValueError, match="rotary_dim=32 must not exceed head_dim=16"):
        posenc.RotaryEmbedding(16, rotary_dim=32)


@pytest.mark.parametrize(
    "build",
    [
        lambda: posenc.MultiHeadRotaryEmbedding(10, 4),
        lambda: posenc.RoPEAttention(10, 4),
        lambda: posenc.LinearAttentionRoPE(10, 4),
        lambda: posenc.HybridPositionalEncoding(10, 4, MAX_LEN),
    ],
    ids=["multihead", "attention", "linear_attention", "hybrid"],
)
def test_d_model_not_divisible_by_heads(build):
    with pytest.raises(ValueError, match=r"d_model=10 is not divisible by n_heads=4"):
        build()


@pytest.mark.parametrize("name", ["LearnablePositionalEmbedding", "HybridPositionalEncoding"])
def test_sequence_past_the_learnable_table(name):
    module, x = make(name)
    module(x, offset=MAX_LEN - 5)  # ends on the last row
    with pytest.raises(ValueError, match=rf"position {MAX_LEN} is past the learnable table of max_len={MAX_LEN}"):
        module(x, offset=MAX_LEN - 4)
    long = torch.randn(1, MAX_LEN + 1, D)
    with pytest.raises(ValueError, match=rf"max_len={MAX_LEN}"):
        module(long)


def test_fractional_positions_for_a_table():
    module, x = make("LearnablePositionalEmbedding")
    with pytest.raises(ValueError, match="needs integer positions"):
        module(x, torch.tensor([0.0, 1.5, 2.0, 3.0, 4.0]))


@pytest.mark.parametrize("name", ["RoPEAttention", "LinearAttentionRoPE"])
def test_attend_rejects_mismatched_qkv(name):
    module, _ = make(name)
    q = torch.randn(2, 5, H, D // H)
    with pytest.raises(ValueError, match="q, k, v shapes disagree"):
        module.attend(q, torch.randn(2, 6, H, D // H), q)
    with pytest.raises(ValueError, match=f"k must have n_heads={H} heads, got 2"):
        module.attend(q, torch.randn(2, 5, 2, D // H), q)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="layout must be one of"):
        posenc.RotaryEmbedding(16, layout="zigzag")
    with pytest.raises(ValueError, match="scaling_factor must be a finite positive number"):
        posenc.RotaryEmbedding(16, scaling_factor=0)
    with pytest.raises(ValueError, match="base must be a finite number greater than 1"):
        posenc.RotaryEmbedding(16, base=-1)
    with pytest.raises(ValueError, match="order must be one of"):
        posenc.LinearAttentionRoPE(16, 4, order="sideways")


def test_the_complex_form_passes_a_gradient_to_float_positions_when_the_input_takes_none():
    """Its in-place complex view has no autograd formula: learned positions must not lose their gradient."""
    module = posenc.RotaryEmbeddingComplex(D // H, MAX_LEN)
    x = torch.randn(2, 5, H, D // H)
    scale = torch.tensor(1.5, requires_grad=True)
    (grad,) = torch.autograd.grad(module(x, torch.arange(5.0) * scale).square().sum(), scale)
    assert torch.isfinite(grad) and grad != 0


def test_the_complex_forms_remembered_phasors_are_those_of_each_call():
    """A call without positions reuses the phasors of an earlier call of its shape and offset (a
    view of the table): another offset, length or dtype gets its own, and a growing table, a
    `.to()` or bad input after a remembered call are handled as on the first call."""
    module = posenc.RotaryEmbeddingComplex(D // H, 4)
    x = torch.randn(2, 5, H, D // H, dtype=torch.float64)
    for offset in (0, 3, 0, 7, 3):
        assert torch.allclose(module(x.float(), offset=offset).double(),
                              module(x, torch.arange(offset, offset + 5)), atol=1e-5)
    assert (2, 5, 3, torch.float32, x.device) in module._slices
    assert torch.allclose(module(x[:, :4].float(), offset=9).double(), module(x[:, :4], torch.arange(9, 13)), atol=1e-5)
    module.to(torch.float64)
    assert not module._slices
    with pytest.raises(ValueError):
        module(x.float(), offset=-1)
