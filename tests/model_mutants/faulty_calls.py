# faulty_calls.py
# Causal LMs that break the call contract of `--model FILE.py:NAME` (tests/test_model_contract.py):
# logits of the wrong vocabulary, logits one token short, logits with no cache. `Control` keeps the
# contract: `forward(input_ids, position_ids=None, attention_mask=None, cache=None)` answers
# `(logits, cache)`, logits of shape (batch, tokens, vocab_size), the cache a list of each layer's
# rotated keys and values that a next call continues.
#     pytest specs --model tests/model_mutants/faulty_calls.py:WrongVocab --encoders 'model_*'
# A user's file, loaded by path: not part of the tests.model_mutants plug-in.
import torch
from torch import nn

MODEL_TRAITS = {"max_position": 64}


def rotate(x, positions, base=10000.0):
    """Half-split RoPE on (batch, heads, seq, head_dim), positions (batch, seq), angles in float32."""
    half = x.shape[-1] // 2
    theta = base ** -(torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = positions.to(torch.float32)[:, None, :, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Control(nn.Module):
    """One attention layer and a head; positions from the cache's length and the mask when not given."""

    def __init__(self, vocab_size=64, width=32, heads=2):
        super().__init__()
        self.vocab_size, self.heads = vocab_size, heads
        self.embed, self.qkv = nn.Embedding(vocab_size, width), nn.Linear(width, 3 * width)
        self.out, self.head = nn.Linear(width, width), nn.Linear(width, vocab_size)
        for parameter in self.parameters():  # large enough that attention depends on position
            nn.init.normal_(parameter, std=0.3)

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
        b, n = input_ids.shape
        held = 0 if cache is None else cache[0].shape[2]
        if attention_mask is None:
            attention_mask = torch.ones(b, held + n, dtype=torch.long, device=input_ids.device)
        if position_ids is None:  # the model's own: count the tokens the mask keeps
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -n:]
        x = self.embed(input_ids)
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, position_ids), rotate(k, position_ids)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
        causal = torch.ones(n, held + n, dtype=torch.bool, device=x.device).tril(held)
        allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]
        allowed = allowed | ~allowed.any(-1, keepdim=True)  # a pad's query attends anywhere: no NaN
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.out(attended.transpose(1, 2).reshape(b, n, -1))
        return self.head(x), (k, v)


class WrongVocab(Control):
    """Says a vocabulary of 64 and answers logits over 50."""

    def forward(self, *args, **kwargs):
        logits, cache = super().forward(*args, **kwargs)
        return logits[..., :50], cache


class OneTokenShort(Control):
    """Drops the last token's logits."""

    def forward(self, *args, **kwargs):
        logits, cache = super().forward(*args, **kwargs)
        return logits[:, :-1], cache


class LogitsOnly(Control):
    """Answers the logits alone, no cache (a training forward)."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)[0]


class NotFinite(Control):
    """Answers NaN logits: nothing can be judged on them."""

    def forward(self, *args, **kwargs):
        logits, cache = super().forward(*args, **kwargs)
        return logits * float("nan"), cache


class DrawsAtRandom(Control):
    """Adds noise of its own to every call (a diffusion LM's random canvas): no call repeats."""

    def forward(self, *args, **kwargs):
        logits, cache = super().forward(*args, **kwargs)
        return logits + torch.randn_like(logits), cache
