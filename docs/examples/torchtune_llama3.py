"""A torchtune model as it is, for ``--model``: no wrapper, no cache set-up of the user's.

    pytest specs --model docs/examples/torchtune_llama3.py:tiny_llama3 --encoders 'model_*'
"""

import torch
from torchtune.models.llama3 import llama3


def tiny_llama3():
    """torchtune's llama3 at a tiny width, weights drawn with std 0.2 so that attention depends on
    position visibly (nothing is trained or downloaded)."""
    torch.manual_seed(0)
    model = llama3(vocab_size=128, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=4096,
                   intermediate_dim=128)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model
