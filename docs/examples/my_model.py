# my_model.py
# A hand-written causal LM that does not follow transformers' call convention: it keeps its own KV
# cache and takes `input_pos`, in the gpt-fast style. Checked with
#     pytest specs --model my_model.py:TinyDecoder --encoders 'model_*'
import torch
from torch import nn

MODEL_TRAITS = {"max_position": 256}  # what the model cannot say of itself (ModelTraits fields)


def rotate(x, positions, base=10000.0):
    """Interleaved RoPE on (batch, heads, seq, head_dim), angles in float32."""
    d = x.shape[-1]
    theta = base ** -(torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    angles = positions.to(torch.float32)[:, None] * theta  # (seq, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.norm1, self.norm2 = heads, nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.keys = self.values = None  # the KV cache this model keeps itself

    def forward(self, x, input_pos):
        b, n, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, input_pos), rotate(k, input_pos)
        if self.keys is not None:  # a continuation: attend to the cached keys too
            k, v = torch.cat((self.keys, k), dim=2), torch.cat((self.values, v), dim=2)
        self.keys, self.values = k, v
        past = k.shape[2] - n
        causal = torch.ones(n, k.shape[2], dtype=torch.bool, device=x.device).tril(past)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        x = x + self.out(attended.transpose(1, 2).reshape(b, n, width))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab_size=128, width=64, heads=4, layers=2):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed, self.head = nn.Embedding(vocab_size, width), nn.Linear(width, vocab_size)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        for name, parameter in self.named_parameters():  # large enough that attention depends on position
            if "norm" not in name:
                nn.init.normal_(parameter, std=0.2)

    def reset_cache(self):
        for block in self.blocks:
            block.keys = block.values = None

    def forward(self, tokens, input_pos):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, input_pos)
        return self.head(x)
