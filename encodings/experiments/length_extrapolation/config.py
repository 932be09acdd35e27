"""What decides a run of the length experiment: the encodings, the configuration, the workers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


ENCODINGS = ("nope", "learnable", "sinusoidal", "rope", "alibi", "hybrid")
ROPE_VARIANTS = ("position_interpolation", "ntk_aware", "dynamic_ntk", "yarn")
FIRST_SCORED_TARGET = 1  # target j predicts token j + 1; token 1 has only one token of context


def default_workers() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that decides a run; ``results.json`` stores it whole."""

    train_length: int = 64  # L: the training length and the learnable table's size
    multipliers: tuple[int, ...] = (1, 2, 4, 8)  # evaluated at k·L for each k; the first is 1
    vocab: int = 16
    successors: int = 3  # next tokens allowed after each context (a, b)
    chain_seed: int = 0  # one chain for every model
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    steps: int = 700
    batch: int = 32
    lr: float = 1e-2  # peak AdamW rate, after warm-up, cosine decay to a tenth
    warmup_steps: int = 50
    weight_decay: float = 0.01
    seeds: tuple[int, ...] = (0, 1, 2)  # model seeds: initialisation and training batches
    encodings: tuple[str, ...] = ENCODINGS
    workers: int = field(default_factory=default_workers)  # processes; speed only, not results
    eval_sequences: int = 32  # at the longest length; shorter lengths get as many tokens
    eval_seed: int = 1_000_003  # the held-out sets, the same for every model
    dynamic_ntk_factor: float = 2.0  # Hugging Face's example factor; base grows as (s·n/L − (s − 1))

    def __post_init__(self):
        unknown = [e for e in self.encodings if e not in ENCODINGS]
        if unknown or not self.encodings:
            raise ValueError(f"encodings must be a non-empty selection of {ENCODINGS}, got {self.encodings}")
        if self.train_length < 3:
            raise ValueError(f"train_length must be at least 3 (two tokens of context, then a target), "
                             f"got {self.train_length}")
        if not self.multipliers or self.multipliers[0] != 1 or list(self.multipliers) != sorted(set(self.multipliers)):
            raise ValueError(f"multipliers must rise from 1 without repeats, got {self.multipliers}")
        if not 1 <= self.workers <= (os.cpu_count() or 1):
            raise ValueError(f"workers must be between 1 and the {os.cpu_count()} CPUs, got {self.workers}")
        if not self.seeds or self.steps < 1 or self.batch < 1 or self.eval_sequences < 1:
            raise ValueError("seeds, steps, batch and eval_sequences must be non-empty and positive")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2 or self.d_model % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size")

    @classmethod
    def quick(cls, **overrides) -> ExperimentConfig:
        """A CI-sized run: L = 16, lengths up to 4L, one seed, a few steps."""
        options = {"train_length": 16, "multipliers": (1, 2, 4), "steps": 20, "warmup_steps": 5, "seeds": (0,),
                   "eval_sequences": 4}
        return cls(**{**options, **overrides})

    @classmethod
    def small(cls, **overrides) -> ExperimentConfig:
        """Half the training and evaluation of the default run, at the same L, lengths and seeds:
        the same verdicts (compared claim by claim when it was chosen), for a busy machine."""
        options = {"steps": 350, "warmup_steps": 25, "eval_sequences": 16}
        return cls(**{**options, **overrides})

    @property
    def lengths(self) -> list[int]:
        return [k * self.train_length for k in self.multipliers]
