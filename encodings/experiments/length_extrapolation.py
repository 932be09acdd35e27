"""Length extrapolation decided by experiment: small causal LMs trained at length L, scored at L … 8L.

The documents claim RoPE "stays stable far beyond the training length" (000 §4.2, 004 §1.1:
ROPE-10b), rank extrapolation learnable "poorly" < sinusoidal "medium" < RoPE (000 §2.2 table:
EXT-1, EXT-3), say a learnable table "cannot run past L" (EXT-2) and that the hybrid
"captures local patterns and long-range dependencies" (000 §5.1: HYB-1). This module trains one
model per (encoding, seed) and decides them with rules fixed before any number was seen.

* **Data** - an order-2 Markov chain over ``vocab`` tokens (:class:`MarkovChain`): every context
  ``(a, b)`` allows ``successors`` next tokens with Dirichlet(1) weights, drawn once from
  ``chain_seed``. Tokens 0 and 1 of a sequence come from the stationary pair distribution π, so
  every later position has the same loss floor ``H(X_t | X_t-2, X_t-1) = Σ π(a,b) H(P(·|a,b))``
  (π by power iteration on the pair chain). Losses count the predictions of tokens 2 … n−1 only.
* **Model** - 2 pre-LN transformer layers, d_model 64, 4 heads, MLP 4×, untied readout
  (:class:`TinyLM`), with one of :data:`ENCODINGS`: ``nope`` (causal mask only), ``learnable``
  (table of length L added), ``sinusoidal`` (added), ``rope`` (q, k rotated per head, interleaved,
  base 10000), ``alibi`` (Press et al. 2022 bias on the logits), ``hybrid`` (learnable table added
  and RoPE on q, k: :class:`~posenc.encoders.hybrid.HybridPositionalEncoding`'s design, the table
  applied once at the input and the rotation in every layer).
* **Training** - length L, AdamW, linear warm-up then cosine decay, data drawn on the fly from a
  generator seeded by the model seed (so every encoding of one seed sees the same batches).
* **Evaluation** - a fixed held-out set per length kL: loss (nats/token), next-token accuracy,
  ``R(k) = loss(kL) / loss(L)``, loss per position bucket of width L; a *windowed control*
  (keys more than L − 1 back masked, so no query sees more keys than in training); the trained
  RoPE model re-scored with position interpolation, NTK-aware, dynamic NTK and YaRN frequencies.
  A model that cannot run at a length (the learnable table past L) is recorded as ``raises`` with
  its error message.
* **Verdicts** - :func:`verdicts`, each rule stated in its function's docstring.

:func:`run_experiment` returns the JSON-ready results; :func:`write_outputs` writes
``results.json``, ``results.md``, TensorBoard scalars and images, and ``loss_by_position.png``.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import platform
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from queue import Empty

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.absolute import LearnablePositionalEmbedding, SinusoidalPositionalEncoding
from ..encoders.alibi import ALiBiBias
from ..encoders.rotary import RotaryEmbedding
from ..encoders.scaling.frequencies import dynamic_ntk, ntk_aware, yarn, yarn_attention_factor
from ..harness.machine import machine_info
from ..harness.plots import PALETTE
from ..harness.reports import atomic_write

ENCODINGS = ("nope", "learnable", "sinusoidal", "rope", "alibi", "hybrid")
ROPE_VARIANTS = ("position_interpolation", "ntk_aware", "dynamic_ntk", "yarn")
#: ROPE-10b's bar: "keeps its loss" means R(k) = loss(kL)/loss(L) ≤ 1.10 (the harness's choice).
RATIO_BAR = 1.10
OUTCOMES = ("holds", "refuted", "undecided", "not decidable")
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

    @property
    def lengths(self) -> list[int]:
        return [k * self.train_length for k in self.multipliers]


# ---------------------------------------------------------------- data


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


# ---------------------------------------------------------------- model


class Block(nn.Module):
    """Pre-LN transformer layer: ``x + attn(LN x)``, then ``x + MLP(LN x)``, MLP 4× with ReLU
    (the original Transformer's; GELU costs a fifth of a training step on CPU)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.attention_norm, self.mlp_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, rotary: nn.Module | None, mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).view(batch, seq, 3, self.n_heads, self.head_dim).unbind(2)
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  attn_mask=mask, is_causal=mask is None)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, d_model))
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    """The experiment's causal LM; ``encoding`` is one of :data:`ENCODINGS`.

    ``rotary`` is one module shared by every layer, so an evaluation can swap its frequencies
    (:func:`rope_variant`) without retraining."""

    def __init__(self, encoding: str, config: ExperimentConfig):
        super().__init__()
        self.encoding = encoding
        d_model, n_heads = config.d_model, config.n_heads
        self.embed = nn.Embedding(config.vocab, d_model)
        self.absolute = None  # added to the token embeddings
        if encoding in ("learnable", "hybrid"):
            self.absolute = LearnablePositionalEmbedding(config.train_length, d_model)
        elif encoding == "sinusoidal":
            self.absolute = SinusoidalPositionalEncoding(d_model)
        self.rotary = RotaryEmbedding(d_model // n_heads) if encoding in ("rope", "hybrid") else None
        self.alibi = ALiBiBias(n_heads) if encoding == "alibi" else None
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, config.vocab)

    def attention_mask(self, seq: int, window: int | None) -> torch.Tensor | None:
        """Additive mask ``(heads or 1, seq, seq)``: causal, ALiBi's bias, keys ≥ ``window`` back
        masked; ``None`` for a plain causal mask (SDPA's own)."""
        if self.alibi is None and window is None:
            return None
        positions = torch.arange(seq)
        distance = positions[:, None] - positions[None, :]
        mask = self.alibi(positions) if self.alibi is not None else torch.zeros(1, seq, seq)
        masked = distance < 0 if window is None else (distance < 0) | (distance >= window)
        return mask.masked_fill(masked, float("-inf"))

    def forward(self, tokens: torch.Tensor, window: int | None = None) -> torch.Tensor:
        x = self.embed(tokens)
        if self.absolute is not None:
            x = self.absolute(x)
        mask = self.attention_mask(tokens.shape[1], window)
        if mask is not None:  # SDPA on CPU is faster with a full (batch, heads, q, k) mask than a broadcast one
            mask = mask.expand(tokens.shape[0], self.blocks[0].n_heads, -1, -1).contiguous()
        for block in self.blocks:
            x = block(x, self.rotary, mask)
        return self.readout(self.norm(x))


def rope_variant(name: str, head_dim: int, multiplier: int, train_length: int,
                 dynamic_factor: float) -> RotaryEmbedding:
    """Rotary frequencies for scoring a RoPE model trained at ``train_length`` on ``multiplier`` × that length.

    * ``position_interpolation`` - positions divided by k (Chen et al. 2023);
    * ``ntk_aware`` - base grown for factor k;
    * ``dynamic_ntk`` - the factor follows the call's length (factor ``dynamic_factor``, max position L);
    * ``yarn`` - NTK-by-parts with factor k, original length L, and its attention factor on q and k.
    """
    if name == "position_interpolation":
        return RotaryEmbedding(head_dim, scaling_factor=multiplier)
    if name == "ntk_aware":
        return RotaryEmbedding(head_dim, frequencies=partial(ntk_aware, factor=multiplier))
    if name == "dynamic_ntk":
        schedule = partial(dynamic_ntk, factor=dynamic_factor, max_position=train_length)
        return RotaryEmbedding(head_dim, frequencies=schedule, length_dependent=True)
    if name == "yarn":
        schedule = partial(yarn, factor=multiplier, original_max_position=train_length)
        return RotaryEmbedding(head_dim, frequencies=schedule, magnitude=yarn_attention_factor(multiplier))
    raise ValueError(f"unknown RoPE variant {name!r}; choose from {ROPE_VARIANTS}")


# ---------------------------------------------------------------- training and scoring


def token_losses(model: TinyLM, tokens: torch.Tensor, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-target cross-entropy and correctness ``(count, n)`` for inputs ``tokens[:, :-1]``; column
    ``j`` predicts token ``j + 1``."""
    logits = model(tokens[:, :-1], window)
    targets = tokens[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses, logits.argmax(-1) == targets


def learning_rate_factor(step: int, config: ExperimentConfig) -> float:
    """Linear warm-up to 1 over ``warmup_steps``, then cosine decay to 0.1 at the last step."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train(encoding: str, seed: int, config: ExperimentConfig, chain: MarkovChain, report) -> tuple[TinyLM, dict]:
    """Train one model from scratch; ``report(line)`` gets a progress line every ~10% of the steps."""
    torch.manual_seed(seed)
    model = TinyLM(encoding, config)
    data = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(step, config))
    interval = max(1, config.steps // 10)
    curve, running, start = [], 0.0, time.perf_counter()
    for step in range(1, config.steps + 1):
        tokens = chain.sample(config.batch, config.train_length + 1, data)
        loss = token_losses(model, tokens)[0][:, FIRST_SCORED_TARGET:].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        running += loss.item()
        if step % interval == 0 or step == config.steps:
            count = interval if step % interval == 0 else step % interval
            curve.append([step, running / count])
            elapsed = time.perf_counter() - start
            report(f"{encoding:>10} seed {seed}: step {step:>5}/{config.steps} loss {running / count:.3f} "
                   f"~{elapsed / step * (config.steps - step):.0f}s left")
            running = 0.0
    return model, {"final_loss": curve[-1][1], "curve": curve, "seconds": time.perf_counter() - start}


@torch.no_grad()
def score(model: TinyLM, tokens: torch.Tensor, train_length: int, window: int | None = None,
          chunk_tokens: int = 8192) -> dict:
    """Loss, accuracy and loss per bucket of ``train_length`` target positions on ``tokens``."""
    chunk = max(1, chunk_tokens // tokens.shape[1])
    parts = [token_losses(model, tokens[i : i + chunk], window) for i in range(0, tokens.shape[0], chunk)]
    losses = torch.cat([p[0] for p in parts])[:, FIRST_SCORED_TARGET:].double()
    correct = torch.cat([p[1] for p in parts])[:, FIRST_SCORED_TARGET:].double()
    per_position = losses.mean(0)
    edges = range(0, per_position.shape[0] + FIRST_SCORED_TARGET, train_length)
    buckets = [float(per_position[max(0, e - FIRST_SCORED_TARGET) : e + train_length - FIRST_SCORED_TARGET].mean())
               for e in edges]
    return {"loss": float(losses.mean()), "accuracy": float(correct.mean()), "buckets": buckets}


def score_or_raise(model: TinyLM, tokens: torch.Tensor, train_length: int, window: int | None = None) -> dict:
    """:func:`score`, or ``{"raises": message}`` where the model refuses the length (a ``ValueError``)."""
    try:
        return score(model, tokens, train_length, window)
    except ValueError as error:
        return {"raises": f"{type(error).__name__}: {error}"}


def evaluate(model: TinyLM, config: ExperimentConfig, eval_sets: dict[str, torch.Tensor]) -> dict:
    """Plain scores at every length, the windowed control and (RoPE) the frequency variants past L."""
    model.eval()
    L = config.train_length
    plain = {n: score_or_raise(model, tokens, L) for n, tokens in eval_sets.items()}
    base = plain[str(L)].get("loss")
    longer = {n: t for n, t in eval_sets.items() if int(n) > L}

    def with_ratio(entry: dict) -> dict:
        return {**entry, "ratio": entry["loss"] / base} if "loss" in entry and base else entry

    result = {"lengths": {n: with_ratio(e) for n, e in plain.items()},
              "windowed": {n: with_ratio(score_or_raise(model, t, L, window=L)) for n, t in longer.items()}}
    if model.encoding == "rope":
        trained, variants = model.rotary, {}
        for name in ROPE_VARIANTS:
            variants[name] = {}
            for n, tokens in longer.items():
                model.rotary = rope_variant(name, trained.head_dim, int(n) // L, L, config.dynamic_ntk_factor)
                variants[name][n] = with_ratio(score_or_raise(model, tokens, L))
        model.rotary = trained
        result["rope_variants"] = variants
    return result


def evaluation_sets(config: ExperimentConfig, chain: MarkovChain) -> dict[str, torch.Tensor]:
    """The fixed held-out sequences, one set per length (``length + 1`` tokens: inputs and targets):
    ``eval_sequences`` at the longest length and as many tokens at each shorter one, so the loss at L,
    the denominator of every R(k), is as precise as the others."""
    generator = torch.Generator().manual_seed(config.eval_seed)
    longest = config.lengths[-1]
    return {str(n): chain.sample(config.eval_sequences * longest // n, n + 1, generator) for n in config.lengths}


def run_job(encoding: str, seed: int, config: ExperimentConfig, chain: MarkovChain,
            eval_sets: dict[str, torch.Tensor], report) -> dict:
    """Train and evaluate one (encoding, seed); deterministic given its arguments."""
    model, training = train(encoding, seed, config, chain, report)
    return {"train": training, **evaluate(model, config, eval_sets)}


_progress_queue = None


def _init_worker(queue) -> None:
    global _progress_queue
    _progress_queue = queue
    torch.set_num_threads(1)


def _worker_job(encoding, seed, config, chain, eval_sets) -> dict:
    return run_job(encoding, seed, config, chain, eval_sets, _progress_queue.put)


def _run_all(config: ExperimentConfig, chain: MarkovChain, eval_sets, progress) -> dict:
    """Every (encoding, seed) job, in ``config.workers`` processes of one thread each."""
    jobs = [(e, s) for s in config.seeds for e in config.encodings]
    runs = {e: {} for e in config.encodings}
    if config.workers == 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for e, s in jobs:
                runs[e][str(s)] = run_job(e, s, config, chain, eval_sets, lambda line: print(line, file=progress))
        finally:
            torch.set_num_threads(threads)
        return runs
    context = multiprocessing.get_context("spawn")  # no fork of a process whose torch threads already run
    queue = context.Queue()
    with ProcessPoolExecutor(config.workers, mp_context=context, initializer=_init_worker, initargs=(queue,)) as pool:
        futures = {pool.submit(_worker_job, e, s, config, chain, eval_sets): (e, s) for e, s in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(queue, progress)
            for future in done:
                e, s = futures[future]
                runs[e][str(s)] = future.result()
    _drain(queue, progress)
    return runs


def _drain(queue, progress) -> None:
    while True:
        try:
            print(queue.get_nowait(), file=progress)
        except Empty:
            return


def run_experiment(config: ExperimentConfig, out_dir: str | Path | None = None, progress=sys.stderr) -> dict:
    """Train, evaluate and judge; returns the JSON-ready results (and writes them to ``out_dir`` if given)."""
    start = time.perf_counter()
    chain = MarkovChain.generate(config.vocab, config.successors, config.chain_seed)
    eval_sets = evaluation_sets(config, chain)
    print(f"extrapolation: {len(config.encodings)} encodings x {len(config.seeds)} seeds, {config.steps} steps at "
          f"L = {config.train_length}, {config.workers} workers", file=progress)
    results = {
        "config": asdict(config),
        "chain": {"vocab": config.vocab, "successors": config.successors, "seed": config.chain_seed,
                  "entropy_floor": chain.entropy_floor(), **chain.baselines()},
        "runs": _run_all(config, chain, eval_sets, progress),
    }
    results["verdicts"] = {claim: v.as_dict() for claim, v in verdicts(results).items()}
    results["wall_seconds"] = time.perf_counter() - start
    results["machine"] = {**machine_info(), "platform": platform.platform(), "python": platform.python_version(),
                          "workers": config.workers}
    if out_dir is not None:
        write_outputs(results, out_dir)
    return results


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """One claim's outcome (one of :data:`OUTCOMES`), the rule that decided it and the numbers it used."""

    outcome: str
    rule: str
    evidence: dict

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def _seed_entries(results: dict, encoding: str, length: int, section: str = "lengths") -> list[dict]:
    return [run[section][str(length)] for _, run in sorted(results["runs"][encoding].items())]


def _losses(results: dict, encoding: str, length: int) -> list[float] | None:
    """Losses over seeds at ``length``; ``None`` if any seed raised or gave a non-finite loss."""
    entries = _seed_entries(results, encoding, length)
    if any("loss" not in e or not math.isfinite(e["loss"]) for e in entries):
        return None
    return [e["loss"] for e in entries]


def _longer_lengths(results: dict) -> list[int]:
    config = results["config"]
    return [k * config["train_length"] for k in config["multipliers"] if k > 1]


def spread_order(better: list[float], worse: list[float]) -> str:
    """"holds" if every loss of ``better`` is below every loss of ``worse`` (max < min over seeds),
    "refuted" if the ranges are reversed (min ``better`` > max ``worse``), else "undecided"."""
    if max(better) < min(worse):
        return "holds"
    if min(better) > max(worse):
        return "refuted"
    return "undecided"


def _combine(outcomes: list[str]) -> str:
    """"holds" if every part holds, "refuted" if any part is refuted, else "undecided"."""
    if outcomes and all(o == "holds" for o in outcomes):
        return "holds"
    return "refuted" if "refuted" in outcomes else "undecided"


def _missing(results: dict, *encodings: str) -> Verdict | None:
    absent = [e for e in encodings if e not in results["runs"]]
    if absent:
        return Verdict("not decidable", "needs the encodings " + ", ".join(encodings), {"not run": absent})
    return None


def rope_keeps_its_loss(results: dict) -> Verdict:
    """ROPE-10b: RoPE keeps its loss far beyond the training length.

    Per seed, "keeps" means R(k) = loss(kL)/loss(L) ≤ 1.10 for every k > 1 (k = 2, 4, 8 by default;
    the 10% bar is the harness's choice). Holds iff every seed keeps; refuted iff no seed keeps;
    undecided if the seeds disagree."""
    rule = f"per seed: R(k) <= {RATIO_BAR} for every k > 1; holds iff all seeds, refuted iff none, else undecided"
    if (missing := _missing(results, "rope")) is not None:
        return missing
    ratios = {seed: {str(n): run["lengths"][str(n)].get("ratio") for n in _longer_lengths(results)}
              for seed, run in sorted(results["runs"]["rope"].items())}  # None: it raised
    keeps = [all(r is not None and r <= RATIO_BAR for r in per_length.values()) for per_length in ratios.values()]
    outcome = "holds" if all(keeps) else "refuted" if not any(keeps) else "undecided"
    return Verdict(outcome, rule, {"ratios_by_seed": ratios, "bar": RATIO_BAR})


def _better_at(results: dict, better: str, worse: str, length: int) -> tuple[str, dict]:
    """``better`` extrapolates better than ``worse`` at one length.

    Both run (finite loss at every seed): :func:`spread_order`. Only ``better`` runs: holds (a model
    that gives no prediction at a length ranks below any that does). Only ``worse`` runs: refuted.
    Neither: undecided."""
    ours, theirs = _losses(results, better, length), _losses(results, worse, length)
    evidence = {better: ours if ours is not None else "raises", worse: theirs if theirs is not None else "raises"}
    if ours is not None and theirs is not None:
        return spread_order(ours, theirs), evidence
    if ours is not None:
        return "holds", evidence
    return ("refuted" if theirs is not None else "undecided"), evidence


def _ranked(results: dict, better: str, worse: str) -> tuple[str, dict]:
    parts = {str(n): _better_at(results, better, worse, n) for n in _longer_lengths(results)}
    return _combine([o for o, _ in parts.values()]), {n: {"outcome": o, "losses": e} for n, (o, e) in parts.items()}


def extrapolation_ranking(results: dict) -> Verdict:
    """EXT-1: RoPE extrapolates better than sinusoidal, which does better than learnable.

    "A better than B at length kL" (k > 1): if both give finite losses at every seed, A's worst
    seed beats B's best (max A < min B) - holds; reversed ranges (min A > max B) - refuted;
    overlapping ranges - undecided. If only A runs at that length, A is better (the table ranks
    extrapolation; a model that cannot predict at all there ranks last); if only B runs, refuted.
    Each pair holds iff it holds at every k > 1 and is refuted iff refuted at some k; the claim
    holds iff both pairs hold and is refuted iff either pair is refuted."""
    rule = ("per k > 1: max over seeds of A's loss < min of B's (holds), min A > max B (refuted), else undecided; "
            "a model that raises at kL ranks below one that runs; pair holds iff at every k, refuted iff at some k; "
            "claim = both pairs (rope < sinusoidal, sinusoidal < learnable)")
    if (missing := _missing(results, "rope", "sinusoidal", "learnable")) is not None:
        return missing
    rope_vs_sin, rope_evidence = _ranked(results, "rope", "sinusoidal")
    sin_vs_learnable, sin_evidence = _ranked(results, "sinusoidal", "learnable")
    return Verdict(_combine([rope_vs_sin, sin_vs_learnable]), rule,
                   {"rope_better_than_sinusoidal": {"outcome": rope_vs_sin, "by_length": rope_evidence},
                    "sinusoidal_better_than_learnable": {"outcome": sin_vs_learnable, "by_length": sin_evidence}})


def _refusals(results: dict, encoding: str) -> tuple[bool, dict]:
    """Whether ``encoding`` refused every length > L at every seed with a clear error (a ``ValueError``
    naming ``max_len``), and per length: how many seeds raised and the distinct outcomes."""
    evidence, clear = {}, True
    for n in _longer_lengths(results):
        outcomes = [e.get("raises", f"ran: loss {e.get('loss')}") for e in _seed_entries(results, encoding, n)]
        clear = clear and all(m.startswith("ValueError") and "max_len" in m for m in outcomes)
        evidence[str(n)] = {"raised": sum("raises" in e for e in _seed_entries(results, encoding, n)),
                            "seeds": len(outcomes), "outcomes": sorted(set(outcomes))}
    return clear and bool(evidence), evidence


def _stops_at_its_table(results: dict, encoding: str) -> Verdict:
    """Holds iff ``encoding`` raises a ``ValueError`` naming ``max_len`` at every length > L and seed."""
    rule = f"holds iff {encoding} raises ValueError naming max_len at every length > L and seed; else refuted"
    if (missing := _missing(results, encoding)) is not None:
        return missing
    clear, evidence = _refusals(results, encoding)
    return Verdict("holds" if clear else "refuted", rule, {"by_length": evidence})


def learnable_cannot_run_past_table(results: dict) -> Verdict:
    """EXT-2: a learnable table cannot run past L at all.

    Holds iff the learnable model raises at every length > L for every seed, with the encoder's own
    clear error (a ``ValueError`` naming ``max_len``); refuted otherwise (it returned a loss, or
    failed with an unclear error)."""
    return _stops_at_its_table(results, "learnable")


def sinusoidal_is_medium(results: dict) -> Verdict:
    """EXT-3 (ABS-4 in the empirical sense): sinusoidal is defined for any length, with "medium" extrapolation.

    Defined: a finite loss at every length for every seed. Medium: between RoPE and learnable at
    every k > 1, each comparison by :func:`extrapolation_ranking`'s per-length rule (RoPE better
    than sinusoidal, sinusoidal better than learnable). Holds iff defined and both comparisons hold
    at every k; refuted iff undefined somewhere or either comparison is refuted at some k; else
    undecided."""
    rule = ("defined = finite loss at every length and seed; medium = rope better than sinusoidal and sinusoidal "
            "better than learnable at every k > 1 (spread rule); holds iff both, refuted iff either fails")
    if (missing := _missing(results, "rope", "sinusoidal", "learnable")) is not None:
        return missing
    lengths = [k * results["config"]["train_length"] for k in results["config"]["multipliers"]]
    losses = {str(n): _losses(results, "sinusoidal", n) for n in lengths}
    defined = all(v is not None for v in losses.values())
    below_rope, rope_evidence = _ranked(results, "rope", "sinusoidal")
    above_learnable, _ = _ranked(results, "sinusoidal", "learnable")
    outcome = _combine([below_rope, above_learnable]) if defined else "refuted"
    return Verdict(outcome, rule, {"defined": defined, "sinusoidal_losses": losses,
                                   "rope_better": below_rope, "better_than_learnable": above_learnable,
                                   "rope_vs_sinusoidal_by_length": rope_evidence})


def hybrid_local_benefit(results: dict) -> Verdict:
    """HYB-1a: at the training length the hybrid fits the local patterns better than its parts.

    At L, the hybrid beats RoPE and learnable by the spread rule (max over seeds of the hybrid's
    loss < min over seeds of each other's): holds; worse than either by the reversed rule: refuted;
    otherwise undecided (overlapping ranges, e.g. all at the entropy floor)."""
    rule = "at L: max hybrid < min rope and max hybrid < min learnable (holds); min hybrid > max of either (refuted)"
    if (missing := _missing(results, "hybrid", "rope", "learnable")) is not None:
        return missing
    L = results["config"]["train_length"]
    hybrid = _losses(results, "hybrid", L)
    others = {e: _losses(results, e, L) for e in ("rope", "learnable")}
    parts = {e: spread_order(hybrid, losses) for e, losses in others.items()}
    return Verdict(_combine(list(parts.values())), rule,
                   {"hybrid": hybrid, **others, "by_comparison": parts,
                    "entropy_floor": results["chain"]["entropy_floor"]})


def hybrid_inherits_table_limit(results: dict) -> Verdict:
    """HYB-1b: past L the hybrid inherits the learnable table's limit (ABS-2).

    Holds iff the hybrid raises a ``ValueError`` naming ``max_len`` at every length > L for every
    seed; refuted otherwise."""
    return _stops_at_its_table(results, "hybrid")


def hybrid_long_range(results: dict) -> Verdict:
    """HYB-1c: the hybrid captures long-range dependencies - not decidable here.

    The data is an order-2 chain: no token depends on anything more than two back, so no model
    can show a long-range benefit on it; and past L the hybrid cannot run at all (HYB-1b)."""
    return Verdict("not decidable", "needs data with dependencies longer than the chain's order (2)",
                   {"chain_order": 2, "train_length": results["config"]["train_length"]})


VERDICT_RULES = {
    "ROPE-10b": rope_keeps_its_loss,
    "EXT-1": extrapolation_ranking,
    "EXT-2": learnable_cannot_run_past_table,
    "EXT-3": sinusoidal_is_medium,
    "HYB-1a": hybrid_local_benefit,
    "HYB-1b": hybrid_inherits_table_limit,
    "HYB-1c": hybrid_long_range,
}


def verdicts(results: dict) -> dict[str, Verdict]:
    """Every claim's :class:`Verdict` from a results table (as :func:`run_experiment` returns it)."""
    return {claim: rule(results) for claim, rule in VERDICT_RULES.items()}


# ---------------------------------------------------------------- outputs


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(entries: list[dict], key: str, digits: int = 3) -> str:
    """``mean [min, max]`` of ``key`` over seeds, or the reason it has none."""
    if any("raises" in e for e in entries):
        return "raises"
    values = [e[key] for e in entries]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{_mean(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _table(results: dict, rows: list[tuple[str, list[list[dict]]]], lengths: list[int], key: str) -> list[str]:
    L = results["config"]["train_length"]
    header = "| | " + " | ".join(f"{n // L}L = {n}" for n in lengths) + " |"
    lines = [header, "|---|" + "---|" * len(lengths)]
    lines += [f"| {name} | " + " | ".join(_cell(entries, key) for entries in cells) + " |" for name, cells in rows]
    return lines


def markdown_report(results: dict) -> str:
    """``results.md``: loss, R(k) and accuracy per encoding and length (mean [min, max] over seeds),
    the windowed control, RoPE's frequency variants, then the verdicts and their rules."""
    config, chain = results["config"], results["chain"]
    L, runs = config["train_length"], results["runs"]
    lengths = [k * L for k in config["multipliers"]]
    longer = lengths[1:]
    plain = [(e, [_seed_entries(results, e, n) for n in lengths]) for e in runs]
    windowed = [(e, [_seed_entries(results, e, n, "windowed") for n in longer]) for e in runs]
    lines = [
        "# Length extrapolation",
        "",
        (f"Order-2 Markov chain, vocab {chain['vocab']}, {chain['successors']} successors per context (chain seed "
         f"{chain['seed']}). Entropy floor H(X_t | X_t-2, X_t-1) = **{chain['entropy_floor']:.4f}** nats/token "
         f"(order-1 predictor {chain['order1_entropy']:.4f}, order-0 {chain['order0_entropy']:.4f})."),
        "",
        (f"Models: {config['n_layers']} pre-LN layers, d_model {config['d_model']}, {config['n_heads']} heads, "
         f"trained {config['steps']} steps at L = {L}, batch {config['batch']}, seeds {list(config['seeds'])}. "
         f"Held-out: {config['eval_sequences']} sequences at the longest length, as many tokens at each length. "
         "Cells: mean [min, max] over seeds."),
        "",
        (f"Wall time {results['wall_seconds']:.0f} s on {results['machine']['cpu']} "
         f"({results['machine']['workers']} workers, torch {results['machine']['torch']})."),
        "", "## Loss (nats/token)", "", *_table(results, plain, lengths, "loss"),
        "", "## R(k) = loss(kL) / loss(L)", "", *_table(results, [(e, c[1:]) for e, c in plain], longer, "ratio"),
        "", "## Next-token accuracy", "", *_table(results, plain, lengths, "accuracy"),
        "", f"## Windowed control (keys more than L - 1 = {L - 1} back masked): loss, then R(k)", "",
        "Loss:", "", *_table(results, windowed, longer, "loss"),
        "", "R(k):", "", *_table(results, windowed, longer, "ratio"),
    ]
    if "rope" in runs:
        variants = [(name, [[run["rope_variants"][name][str(n)] for _, run in sorted(runs["rope"].items())]
                            for n in longer]) for name in ROPE_VARIANTS]
        lines += ["", "## RoPE re-scored without retraining (frequencies for k = n / L): loss, then R(k)", "",
                  "Loss:", "", *_table(results, variants, longer, "loss"), "",
                  "R(k) against plain RoPE at L:", "", *_table(results, variants, longer, "ratio")]
    lines += ["", "## Verdicts", ""]
    for claim, verdict in results["verdicts"].items():
        lines += [f"- **{claim}: {verdict['outcome']}** - rule: {verdict['rule']}.",
                  f"  Evidence: `{json.dumps(_rounded(verdict['evidence']), ensure_ascii=False)}`"]
    return "\n".join(lines) + "\n"


def _rounded(value, digits: int = 4):
    """``value`` with every float rounded, for reading."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return value


def mean_buckets(results: dict) -> dict[str, tuple[int, list[float]]]:
    """Per encoding: the longest length every seed ran and the mean bucket losses there."""
    curves = {}
    for encoding, seeds in results["runs"].items():
        for length in sorted((int(n) for n in next(iter(seeds.values()))["lengths"]), reverse=True):
            entries = _seed_entries(results, encoding, length)
            if all("buckets" in e for e in entries):
                curves[encoding] = (length, [_mean(list(b)) for b in zip(*(e["buckets"] for e in entries))])
                break
    return curves


def loss_by_position_plot(results: dict, size: tuple[int, int] = (900, 560)):
    """Mean loss per position bucket (width L) for each encoding, with the entropy floor and L
    marked; linear axes. Returns a ``PIL.Image``."""
    from PIL import Image, ImageDraw, ImageFont

    L, floor = results["config"]["train_length"], results["chain"]["entropy_floor"]
    curves = mean_buckets(results)
    image = Image.new("RGB", size, "white")
    draw, font = ImageDraw.Draw(image), ImageFont.load_default()
    left, right, top, bottom = 70, size[0] - 230, 40, size[1] - 60
    x_max = max(n for n, _ in curves.values())
    values = [v for _, line in curves.values() for v in line] + [floor]
    y_low, y_high = 0.0, max(values) * 1.05

    def at(x, y):
        return left + x / x_max * (right - left), bottom - (y - y_low) / (y_high - y_low) * (bottom - top)

    for i in range(9):
        x, y = x_max * i / 8, y_low + (y_high - y_low) * i / 8
        draw.text((at(x, 0)[0] - 10, bottom + 6), f"{x:.0f}", fill="black", font=font)
        draw.line([left, at(0, y)[1], right, at(0, y)[1]], fill="#e0e0e0")
        draw.text((10, at(0, y)[1] - 6), f"{y:.2f}", fill="black", font=font)
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.line([at(L, y_low), at(L, y_high)], fill="#999999", width=1)
    draw.text((at(L, 0)[0] + 4, top + 4), "L (trained)", fill="#555555", font=font)
    dash = x_max / 64
    for i in range(0, 64, 2):
        draw.line([at(i * dash, floor), at((i + 1) * dash, floor)], fill="black")
    draw.text((right - 120, at(0, floor)[1] - 14), "entropy floor", fill="black", font=font)
    draw.text((left, 12), f"loss per position bucket (width L = {L}), mean over seeds", fill="black", font=font)
    draw.text(((left + right) // 2 - 30, bottom + 28), "position", fill="black", font=font)
    for i, (name, (length, line)) in enumerate(curves.items()):
        color = PALETTE[i % len(PALETTE)]
        xy = [at(min(b * L + L / 2, length), v) for b, v in enumerate(line)]
        if len(xy) > 1:
            draw.line(xy, fill=color, width=2)
        for px, py in xy:
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=color)
        label = name if length == x_max else f"{name} (runs to {length})"
        draw.rectangle([right + 16, top + 16 * i + 2, right + 28, top + 16 * i + 12], fill=color)
        draw.text((right + 34, top + 16 * i), label, fill="black", font=font)
    return image


def _by_length(key: str, *section: str):
    """Reads ``{length: value or None}`` of ``key`` from the per-length entries at ``run[section…]``."""
    def read(run: dict) -> dict[int, float | None]:
        for part in section:
            run = run[part]
        return {int(n): entry.get(key) for n, entry in run.items()}
    return read


SCALARS = {
    "loss_vs_length": _by_length("loss", "lengths"),
    "ratio_vs_length": _by_length("ratio", "lengths"),
    "accuracy_vs_length": _by_length("accuracy", "lengths"),
    "windowed_loss_vs_length": _by_length("loss", "windowed"),
    "train_loss": lambda run: {step: loss for step, loss in run["train"]["curve"]},
}


def _mean_series(runs: list[dict], read) -> dict[int, float]:
    """``{step: mean over runs}`` of ``read(run)``, leaving out steps where any run has no value (it raised)."""
    series = [read(run) for run in runs]
    return {step: _mean([s[step] for s in series]) for step in series[0]
            if all(s.get(step) is not None for s in series)}


def write_tensorboard(results: dict, logdir: Path, image) -> None:
    """Scalars ``extrapolation/<quantity>/<encoding>`` against the evaluation length (the training
    loss against the step) and ``extrapolation/rope_variants/<variant>``: one run per seed
    (``seed<k>``) and one for the mean over seeds (``mean``, with the loss-per-position image).
    A rerun replaces the whole folder: no run of an earlier experiment (another seed count) is left."""
    from torch.utils.tensorboard import SummaryWriter

    shutil.rmtree(logdir, ignore_errors=True)
    runs = results["runs"]
    seeds = sorted(next(iter(runs.values())))
    for run_name, chosen in [*((f"seed{s}", [s]) for s in seeds), ("mean", seeds)]:
        with SummaryWriter(log_dir=str(logdir / run_name)) as writer:
            for encoding, by_seed in runs.items():
                picked = [by_seed[s] for s in chosen]
                tags = {f"{quantity}/{encoding}": read for quantity, read in SCALARS.items()}
                if "rope_variants" in picked[0]:
                    tags.update({f"rope_variants/{name}": _by_length("loss", "rope_variants", name)
                                 for name in ROPE_VARIANTS})
                for tag, read in tags.items():
                    for step, value in _mean_series(picked, read).items():
                        writer.add_scalar(f"extrapolation/{tag}", value, global_step=step)
            if run_name == "mean":
                pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
                writer.add_image("extrapolation/loss_by_position", pixels.view(image.height, image.width, 3),
                                 dataformats="HWC")


def write_outputs(results: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md``, ``loss_by_position.png`` and ``tensorboard/``; returns the paths."""
    out = Path(out_dir)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "png": out / "loss_by_position.png",
             "tensorboard": out / "tensorboard"}
    atomic_write(paths["json"], json.dumps(results, indent=1) + "\n")
    atomic_write(paths["markdown"], markdown_report(results))
    image = loss_by_position_plot(results)
    image.save(paths["png"])
    write_tensorboard(results, paths["tensorboard"], image)
    return paths
