"""ROPE-10b (000 §4.2, 004 §1.1): "stays stable far beyond the training length", empirically.

A one-layer causal attention model (token embedding → encoder under test → linear read-out) is
trained at length ``L`` on a task that needs only relative position: predict the token
``LAG`` places back. It "keeps its loss" at ``kL`` when ``loss(kL) ≤ KEEP_FACTOR · loss(L) +
KEEP_MARGIN`` for k = 2, 4, 8. Slow (trains a model): ``pytest specs -m slow``.
"""

import pytest
import torch
import torch.nn.functional as F

from specs import support as s

L, LAG, VOCAB, STEPS, BATCH = 32, 3, 16, 600, 32
KEEP_FACTOR, KEEP_MARGIN = 1.5, 0.05  # "keeps": at most 50 % worse, plus a small absolute slack
SMALL = dict(d_model=32, n_heads=2)


class LagModel(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, SMALL["d_model"])
        self.encoder = encoder
        self.readout = torch.nn.Linear(SMALL["d_model"], VOCAB)

    def forward(self, tokens):
        return self.readout(self.encoder(self.embed(tokens)))


def lag_loss(model, length, generator):
    tokens = torch.randint(0, VOCAB, (BATCH, length), generator=generator)
    logits = model(tokens)[:, LAG:]
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, :-LAG].reshape(-1))


def train_and_evaluate(record, seed=0):
    torch.manual_seed(seed)
    model = LagModel(s.build(record, torch.float32, **SMALL))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        optimizer.zero_grad()
        lag_loss(model, L, generator).backward()
        optimizer.step()
    with torch.no_grad():
        evaluation = torch.Generator().manual_seed(seed + 1)
        return {k * L: float(torch.stack([lag_loss(model, k * L, evaluation) for _ in range(4)]).mean())
                for k in (1, 2, 4, 8)}


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.claim("ROPE-10b", kinds=("attention",), requires=lambda r: r.applies("ATT-3"))
def test_trained_model_keeps_its_loss_past_the_training_length(record):
    losses = train_and_evaluate(record)
    trained = losses[L]
    for length, loss in losses.items():
        if loss > KEEP_FACTOR * trained + KEEP_MARGIN:
            s.violated(f"loss at {length} tokens is {loss:.3f}, trained at {L}: {trained:.3f}",
                       losses=losses, rule=f"loss(kL) ≤ {KEEP_FACTOR}·loss(L) + {KEEP_MARGIN}")
