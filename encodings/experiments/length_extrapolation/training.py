"""Training and scoring: one model per (encoding, seed), scored at L … 8L, in worker processes."""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from queue import Empty

import torch
import torch.nn.functional as F
from torch import nn

from ...harness.performance.machine import machine_info
from .config import ExperimentConfig, FIRST_SCORED_TARGET, ROPE_VARIANTS
from .data import MarkovChain
from .model import rope_variant, TinyLM
from .verdicts import verdicts
from .outputs import write_outputs


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
    pool = ProcessPoolExecutor(config.workers, mp_context=context, initializer=_init_worker, initargs=(queue,))
    try:
        futures = {pool.submit(_worker_job, e, s, config, chain, eval_sets): (e, s) for e, s in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(queue, progress)
            for future in done:
                e, s = futures[future]
                runs[e][str(s)] = future.result()
    except BaseException:  # a timeout, an interrupt, a failed job: no worker trains on after it
        stop_workers(pool)
        raise
    pool.shutdown()
    _drain(queue, progress)
    return runs


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued jobs and end the running ones' processes now (``shutdown`` alone would wait
    for every running job to finish training)."""
    processes = list(getattr(pool, "_processes", {}).values())  # the executor names no public handle
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


def _drain(queue, progress) -> None:
    while True:
        try:
            print(queue.get_nowait(), file=progress)
        except Empty:
            return


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages at the end of the run: how busy it was."""
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


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
                          "workers": config.workers, "load_average": _load_average()}
    if out_dir is not None:
        write_outputs(results, out_dir)
    return results
