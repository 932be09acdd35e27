"""The specs' inputs (``posenc.harness.references.tensors.randn``): kept draws come back as new tensors,
equal to a fresh draw, whatever the caller did with the last one."""

import torch

from posenc.harness.references import tensors


def _fresh(shape, seed, dtype):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def test_a_kept_draw_is_a_new_tensor_equal_to_a_fresh_draw():
    first = tensors.randn((2, 5, 3, 16), 7, torch.float16)
    first.mul_(0)  # an encoder that writes into its input
    again = tensors.randn((2, 5, 3, 16), 7, torch.float16)
    assert torch.equal(again, _fresh((2, 5, 3, 16), 7, torch.float16))
    assert again.data_ptr() != first.data_ptr()


def test_the_kept_draws_stay_within_their_bound():
    for seed in range(3 * tensors._KEPT_ELEMENTS // 256):
        tensors.randn((1, 16, 16), seed)
    assert tensors._kept_elements <= tensors._KEPT_ELEMENTS
    assert tensors._kept_elements == sum(t.numel() for t in tensors._kept.values())
    large = (1, tensors._KEPT_ELEMENTS // 8)
    assert torch.equal(tensors.randn(large, 1), _fresh(large, 1, torch.float32))
    assert (large, 1, torch.float32, "cpu") not in tensors._kept
