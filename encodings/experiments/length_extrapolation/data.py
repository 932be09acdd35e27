"""The data: an order-2 Markov language whose loss floor is known exactly."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last dimension (0·log 0 = 0)."""
    return -(p * p.clamp_min(1e-300).log()).sum(-1)


@dataclass(frozen=True)
class MarkovChain:
    """An order-2 chain: ``transition[a, b, c] = P(X_t = c | X_t-2 = a, X_t-1 = b)``, float64,
    with ``stationary[a, b]`` the stationary distribution of the pair ``(X_t-1, X_t)``."""

    transition: torch.Tensor
    stationary: torch.Tensor

    @classmethod
    def generate(cls, vocab: int, successors: int, seed: int) -> MarkovChain:
        if not 1 <= successors <= vocab:
            raise ValueError(f"successors must be between 1 and vocab={vocab}, got {successors}")
        generator = torch.Generator().manual_seed(seed)
        allowed = torch.rand(vocab, vocab, vocab, generator=generator).argsort(-1)[..., :successors]
        weights = -torch.rand(vocab, vocab, successors, generator=generator, dtype=torch.float64).log()
        transition = torch.zeros(vocab, vocab, vocab, dtype=torch.float64)
        transition.scatter_(-1, allowed, weights / weights.sum(-1, keepdim=True))  # Dirichlet(1) weights
        return cls(transition, stationary_pairs(transition))

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    def entropy_floor(self) -> float:
        """``H(X_t | X_t-2, X_t-1)`` under π: the lowest loss any model can reach (nats/token)."""
        return float((self.stationary * _entropy(self.transition)).sum())

    def baselines(self) -> dict[str, float]:
        """Losses of predictors that ignore context: order 0 ``H(X_t)`` and order 1 ``H(X_t | X_t-1)``."""
        single = self.stationary.sum(0)
        pair = float(_entropy(self.stationary.flatten()))
        return {"order0_entropy": float(_entropy(single)), "order1_entropy": pair - float(_entropy(single))}

    def sample(self, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``count`` sequences of ``length ≥ 2`` tokens (int64), started from π."""
        tokens = torch.empty(count, length, dtype=torch.long)
        first = torch.multinomial(self.stationary.flatten(), count, replacement=True, generator=generator)
        tokens[:, 0], tokens[:, 1] = first // self.vocab, first % self.vocab
        for t in range(2, length):
            probabilities = self.transition[tokens[:, t - 2], tokens[:, t - 1]]
            tokens[:, t] = torch.multinomial(probabilities, 1, generator=generator)[:, 0]
        return tokens


def stationary_pairs(transition: torch.Tensor, *, tolerance: float = 1e-14,
                     max_iterations: int = 100_000) -> torch.Tensor:
    """π(b, c) = Σ_a π(a, b) P(c | a, b), by power iteration from the uniform distribution.

    Raises ``ValueError`` when it does not converge (a periodic pair chain)."""
    vocab = transition.shape[0]
    pi = torch.full((vocab, vocab), 1.0 / vocab**2, dtype=torch.float64)
    for _ in range(max_iterations):
        following = torch.einsum("ab,abc->bc", pi, transition)
        if float((following - pi).abs().sum()) < tolerance:
            return following
        pi = following
    raise ValueError(f"the pair chain's power iteration did not converge in {max_iterations} steps")
