"""Complexity against sequence length n (LIN-1, ROPE-12).

* LIN-1 (000 §5.2): linear attention with RoPE costs O(n) instead of O(n²) in time and memory.
  Observed as the log-log slope ``k`` of ``cost(n) ∝ n^k`` over 5 lengths spanning 16×: peak
  memory above baseline of one forward call (deterministic: it decides, in the default run) and
  median time with memory again at lengths 512 … 8192 where the n² term dominates (``-m perf``;
  a record with a shorter cache at five lengths ending at its own limit, batch 4). A softmax
  attention control is timed at the same lengths: below n^1.6 the lengths cannot tell and the cell
  is undecided; otherwise both slopes must stay below the midpoint between 1 and the control's
  slope (at most 1.5). A softmax attention registered as linear fails, with or without a cache.
* ROPE-12 (000 §3.3, 004 §1.1): RoPE's overhead is "relatively small" and "efficient for long
  sequences". Observed inside softmax attention as ``t(attention) / t(attention, rotation
  removed) − 1`` at seq 512 and 2048 (``-m perf``), with the RoPE form 000 §3.3 uses (000 §3.2's
  complex multiplication); the rule is in :mod:`posenc.harness.catalogue.perf_rules`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc import CompiledRotaryEmbedding, RotaryEmbeddingComplex, get
from posenc.harness.performance import machine, profiling
from posenc.harness.catalogue.perf_rules import (BUSY_SPREAD, LINEAR_SLOPE_LIMIT, ROPE12_EQUIVALENCE, ROPE12_NOISE,
                                      ROPE12_OVERHEAD_LIMIT)
from specs import support as s
from posenc.harness.catalogue.states import State

#: Memory: small d_model keeps the default run fast; the slope does not depend on it.
MEMORY_LENGTHS, MEMORY_CONFIG = (128, 256, 512, 1024, 2048), dict(d_model=64, n_heads=4)
#: Time: d_model 256 (head_dim 64) keeps softmax attention at n = 4096 under a second on a CPU.
TIME_LENGTHS, TIME_CONFIG = (256, 512, 1024, 2048, 4096), dict(d_model=256, n_heads=4)
#: The modules the issue compares; the record under test is added to them.
REFERENCES = ("attention_rope", "rope_interleaved")


_CURVES: dict[tuple, list] = {}


def _curve_key(kind, record, device, lengths, config, batch) -> tuple:
    return kind, record.name, device, tuple(lengths), tuple(config.items()), batch


def memory_curve(record, device, lengths=MEMORY_LENGTHS, config=MEMORY_CONFIG, batch=1) -> list[int]:
    key = _curve_key("memory", record, device, lengths, config, batch)
    if key in _CURVES:
        return _CURVES[key]
    peaks = _CURVES[key] = []
    for n in lengths:
        work = profiling.make_workload(record, batch=batch, seq=n, device=device, warmup=1, **config)
        peaks.append(profiling.peak_memory(work.call, device))
    return peaks


def time_curve(record, device, lengths=TIME_LENGTHS, config=TIME_CONFIG, batch=1, min_time=1.0,
               min_rounds=5) -> list[float]:
    """Median forward seconds per length, the lengths interleaved round by round; the same
    workloads then give the memory curve at these lengths (kept for :func:`memory_curve`)."""
    key = _curve_key("time", record, device, lengths, config, batch)
    if key in _CURVES:
        return _CURVES[key]
    works = {n: profiling.make_workload(record, batch=batch, seq=n, device=device, warmup=1, **config) for n in lengths}
    samples = profiling.interleaved_samples({n: w.call for n, w in works.items()}, min_time=min_time,
                                            min_rounds=min_rounds)
    _SAMPLES[key] = samples
    _CURVES[key] = [profiling.median(samples[n]) for n in lengths]
    memory = _curve_key("memory", record, device, lengths, config, batch)
    if memory not in _CURVES:
        _CURVES[memory] = [profiling.peak_memory(works[n].call, device) for n in lengths]
    return _CURVES[key]


_SAMPLES: dict[tuple, dict[int, list[float]]] = {}


def growth_spread(record, device, lengths, config, batch) -> float:
    """IQR / median of the per-round ratios ``t(longest) / t(4× shorter)`` of a timed curve: how
    much the growth the slope is fitted to moves from round to round (``perf_rules.BUSY_SPREAD``)."""
    samples = _SAMPLES[_curve_key("time", record, device, lengths, config, batch)]
    return profiling.paired_spread(samples[lengths[-1]], samples[lengths[-LIN1_FIT]])


@pytest.mark.claim("LIN-1", kinds=("attention",))
def test_linear_attention_memory_is_linear_in_length(record, device, perf_session):
    peaks = memory_curve(record, device)
    slope = profiling.loglog_slope(MEMORY_LENGTHS, peaks)
    perf_session.note(f"LIN-1 memory slope on {device}: {record.name} {slope:.3f} "
                      f"(peak bytes {peaks} at n = {list(MEMORY_LENGTHS)})")
    if not slope < LINEAR_SLOPE_LIMIT:
        s.violated(f"peak memory grows as n^{slope:.2f}, not O(n)",
                   lengths=MEMORY_LENGTHS, peak_bytes=peaks)


#: LIN-1's decisive lengths: n ≫ d_model, where softmax attention's n²·d term dominates its n·d² projections.
LIN1_LENGTHS, LIN1_CONFIG = (512, 1024, 2048, 4096, 8192), dict(d_model=64, n_heads=4)
LIN1_FIT = 3  # slopes are fitted over the 3 longest lengths (4× apart)
#: Below this the softmax control's own slope is too close to O(n) for the lengths to tell.
LIN1_CONTROL_FLOOR = 1.6
LIN1_CONTROL = "attention_rope"
LIN1_MIN_GROWTH = 0.5  # below this the timed calls did not grow with n: something else was timed


def lin1_lengths(record) -> tuple[tuple[int, ...], int]:
    """Five lengths 2× apart ending at the longest power of two the record allows (at most 8192),
    and the batch: a record capped below 8192 runs batch 4, so the n² term still dominates."""
    limit = record.limits.max_position
    top = max(LIN1_LENGTHS) if limit is None else min(max(LIN1_LENGTHS), 1 << (max(limit, 16).bit_length() - 1))
    return tuple(top >> k for k in range(4, -1, -1)), 1 if top == max(LIN1_LENGTHS) else 4


def lin1_bar(control_slope: float) -> float:
    """The slope that separates O(n) from the control's measured growth: the midpoint between 1 and
    the softmax control's slope at the same lengths, never above ``LINEAR_SLOPE_LIMIT``."""
    return min(LINEAR_SLOPE_LIMIT, (1.0 + control_slope) / 2)


@pytest.mark.perf
@pytest.mark.claim("LIN-1", kinds=("attention",))
def test_linear_attention_time_is_linear_in_length(record, device, perf_session):
    """Time (interleaved over the lengths, median) and peak memory, fitted over the three longest
    lengths (4× apart) the record allows, with a softmax attention control measured at the same
    lengths, batch and size. The control shows the margin: if its own time slope is below
    ``LIN1_CONTROL_FLOOR`` these lengths cannot tell O(n) from O(n²) and the cell is undecided.
    Otherwise both of the record's slopes must stay below the bar, the midpoint between 1 and the
    control's slope (at most 1.5). Softmax attention on a memory-efficient kernel has O(n) memory
    but O(n²) time, so the time slope is what tells them apart."""
    slopes = {}
    lengths, batch = lin1_lengths(record)
    length = profiling.PERF_LENGTHS[perf_session.length]
    for name in dict.fromkeys((record.name, LIN1_CONTROL, *REFERENCES)):
        times = time_curve(get(name), device, lengths, LIN1_CONFIG, batch=batch, min_time=length.curve_min_time,
                           min_rounds=length.curve_min_rounds)
        memory = memory_curve(get(name), device, lengths, LIN1_CONFIG, batch=batch)
        top = slice(-LIN1_FIT, None)  # the longest lengths, where a quadratic term dominates
        slopes[name] = (profiling.loglog_slope(lengths[top], times[top]), profiling.loglog_slope(lengths[top], memory[top]))
        perf_session.note(f"complexity on {machine.device_name(device)}, n = {list(lengths)}, batch {batch}, "
                          f"d_model {LIN1_CONFIG['d_model']}: {name}: time slope {slopes[name][0]:.2f}, "
                          f"memory slope {slopes[name][1]:.2f}, ms {[round(t * 1e3, 2) for t in times]}")
    time_slope, memory_slope = slopes[record.name]
    control = slopes[LIN1_CONTROL][0]
    bar = lin1_bar(control)
    spreads = {name: growth_spread(get(name), device, lengths, LIN1_CONFIG, batch) for name in (record.name, LIN1_CONTROL)}
    perf_session.note(f"LIN-1 growth spread (IQR / median of per-round t({lengths[-1]}) / t({lengths[-LIN1_FIT]})): "
                      + ", ".join(f"{n} {v:.0%}" for n, v in spreads.items()))
    details = dict(lengths=lengths, batch=batch, bar=round(bar, 3), spreads={n: round(v, 3) for n, v in spreads.items()},
                   slopes={n: [round(v, 3) for v in sl] for n, sl in slopes.items()})
    if max(spreads.values()) > BUSY_SPREAD["LIN-1"] or time_slope < LIN1_MIN_GROWTH:
        s.undecided(f"the machine is busy: {record.name}'s time grew as n^{time_slope:.2f} (a call that touches "
                    f"every token grows at least as n^{LIN1_MIN_GROWTH}); the timed growth spreads by "
                    + ", ".join(f"{v:.0%} ({n})" for n, v in spreads.items())
                    + f" from round to round (limit {BUSY_SPREAD['LIN-1']:.0%}); measured: {record.name} "
                    f"n^{time_slope:.2f}, softmax control n^{control:.2f}", **details)
    if control < LIN1_CONTROL_FLOOR:
        s.undecided(f"at n = {lengths[-LIN1_FIT]} … {lengths[-1]} the softmax control's time grows only as "
                    f"n^{control:.2f} (below {LIN1_CONTROL_FLOOR}): these lengths cannot tell O(n) from O(n²); "
                    f"measured: {record.name} n^{time_slope:.2f}", **details)
    if not (time_slope < bar and memory_slope < bar):
        s.violated(f"time grows as n^{time_slope:.2f} and peak memory as n^{memory_slope:.2f}: not O(n) in both "
                   f"(bar n^{bar:.2f}, midway to the softmax control's n^{control:.2f})", **details)


class _NoRotation(nn.Module):
    def forward(self, x, positions=None, *, offset=0):
        return x


def _has_rotary(record) -> bool:
    return isinstance(getattr(record.make(d_model=16, n_heads=2), "rotary", None), nn.Module)


ROPE12_LENGTHS = (512, 2048)


def rope_overheads(record, device, length=profiling.PERF_LENGTHS["full"],
                   others: bool = True) -> dict[int, dict[str, list[float]]]:
    """Per length: per-round seconds with the document's RoPE form (000 §3.3 calls 000 §3.2's
    complex multiplication, cache warm) and without rotation, and where ``others`` with the
    record's own RoPE (eager) and with the fused RoPE, all interleaved in one run."""
    out = {}
    for n in ROPE12_LENGTHS:
        works = {"complex": profiling.make_workload(record, seq=n, device=device, warmup=0)}
        rotary = works["complex"].module.rotary
        works["complex"].module.rotary = RotaryEmbeddingComplex(rotary.head_dim, n, base=rotary.base).to(device)
        works["complex"].call()  # the cache is built once, as the document's module does in __init__
        works["none"] = profiling.make_workload(record, seq=n, device=device, warmup=0)
        works["none"].module.rotary = _NoRotation()
        if others:
            works["rope"] = profiling.make_workload(record, seq=n, device=device, warmup=1)
            works["fused"] = profiling.make_workload(record, seq=n, device=device, warmup=0)
            works["fused"].module.rotary = CompiledRotaryEmbedding(rotary.head_dim, base=rotary.base).to(device)
        out[n] = profiling.interleaved_samples({k: w.call for k, w in works.items()}, min_time=length.overhead_min_time,
                                               min_rounds=length.overhead_min_rounds)
    return out


@pytest.mark.perf
@pytest.mark.claim("ROPE-12", kinds=("attention",), requires=_has_rotary)
def test_rope_overhead_inside_attention_is_small(record, device, perf_session):
    """The overhead of the document's RoPE form (complex multiplication, as 000 §3.3 uses it): its
    95% interval (bootstrap over interleaved rounds) decides: all of it above the bar (by more than
    the equivalence margin), refuted; all below, holds; else undecided. The bar (10%) is the
    harness's choice, not the documents'; the verdict at 5, 10 and 20% is printed alongside."""
    others = perf_session.length == "full"  # the eager and fused forms: context, not the verdict
    samples = rope_overheads(record, device, profiling.PERF_LENGTHS[perf_session.length], others=others)
    overhead = {n: [v - 1 for v in profiling.ratio_interval(t["complex"], t["none"])] for n, t in samples.items()}
    eager = {n: profiling.ratio_interval(t["rope"], t["none"])[0] - 1 for n, t in samples.items() if others}
    fused = {n: profiling.ratio_interval(t["fused"], t["none"])[0] - 1 for n, t in samples.items() if others}
    beside = {n: f"eager {eager[n]:+.1%}, fused {fused[n]:+.1%}" if others else "eager and fused: --perf-length full"
              for n in samples}

    def verdict_at(bar, low, high):
        return State.REFUTED if low > bar + ROPE12_EQUIVALENCE else State.HOLDS if high < bar - ROPE12_EQUIVALENCE else State.UNDECIDED

    perf_session.note(f"ROPE-12 on {machine.device_name(device)}: {record.name}: complex-form RoPE overhead "
                      + ", ".join(f"n={n}: {o[0]:+.1%} (95% CI {o[1]:+.1%} … {o[2]:+.1%}; verdict at 5/10/20%: "
                                  f"{'/'.join(verdict_at(b, o[1], o[2]) for b in (0.05, 0.10, 0.20))}; "
                                  f"{beside[n]}, attention without rotation "
                                  f"{profiling.median(samples[n]['none']) * 1e3:.2f} ms)"
                                  for n, o in overhead.items()))
    short, long = ROPE12_LENGTHS[0], ROPE12_LENGTHS[-1]
    details = dict(overhead_ci={n: [round(v, 4) for v in o] for n, o in overhead.items()},
                   eager_overhead={n: round(v, 4) for n, v in eager.items()},
                   fused_overhead={n: round(v, 4) for n, v in fused.items()})
    estimate, low, high = overhead[short]
    spreads = {n: profiling.paired_spread(t["complex"], t["none"]) for n, t in samples.items()}
    if max(spreads.values()) > BUSY_SPREAD["ROPE-12"]:
        s.undecided("the machine is busy: the paired rounds spread by "
                    + ", ".join(f"{v:.0%} at n={n}" for n, v in spreads.items())
                    + f" (IQR / median of the per-round ratios; limit {BUSY_SPREAD['ROPE-12']:.0%}); measured: RoPE adds "
                    f"{estimate:.1%} (95% CI {low:.1%} … {high:.1%}) at seq {short}", **details)
    if overhead[long][1] > high + ROPE12_NOISE:
        s.violated(f"the overhead grows with length: {estimate:.1%} at {short}, {overhead[long][0]:.1%} at {long}",
                   **details)
    if low > ROPE12_OVERHEAD_LIMIT + ROPE12_EQUIVALENCE:
        s.violated(f"RoPE adds {estimate:.1%} (95% CI {low:.1%} … {high:.1%}) to attention at seq {short}, more "
                   f"than {ROPE12_OVERHEAD_LIMIT:.0%}", **details)
    if high > ROPE12_OVERHEAD_LIMIT - ROPE12_EQUIVALENCE:
        s.undecided(f"RoPE adds {estimate:.1%} (95% CI {low:.1%} … {high:.1%}) at seq {short}: the interval reaches "
                    f"within {ROPE12_EQUIVALENCE:.0%} of the {ROPE12_OVERHEAD_LIMIT:.0%} bar", **details)


#: Scaling at a glance: every RoPE and attention module, time and peak memory against length.
SCALING_LENGTHS, SCALING_CONFIG = (256, 512, 1024, 2048, 4096), dict(d_model=256, n_heads=4)


@pytest.mark.perf
def test_scaling_with_sequence_length(perf_record, perf_device, perf_session):
    """Forward time (median) and peak memory at batch 1 for each length, with log-log slopes;
    printed as one table at the end of the run and drawn as log-log plots."""
    if perf_record.kind not in ("rotary", "attention"):
        pytest.skip("n/a: scaling is tabulated for RoPE encoders and attention modules")
    lengths = scaling_lengths(perf_record)
    length = profiling.PERF_LENGTHS[perf_session.length]
    times = time_curve(perf_record, perf_device, lengths, SCALING_CONFIG, min_time=length.scaling_min_time,
                       min_rounds=length.scaling_min_rounds)
    peaks = memory_curve(perf_record, perf_device, lengths, SCALING_CONFIG)
    perf_session.scaling.append({
        "encoder": perf_record.name, "device": perf_device, "lengths": list(lengths), "seconds": times,
        "peak_bytes": peaks, "time_slope": profiling.loglog_slope(lengths, times),
        "memory_slope": profiling.loglog_slope(lengths, [max(p, 1) for p in peaks]), **SCALING_CONFIG,
    })
    assert len(times) == len(peaks) == len(lengths) and min(times) > 0


def scaling_lengths(record) -> tuple[int, ...]:
    """The scaling lengths the record supports: a fixed table (``max_position``) stops them, and a
    slope needs three; a head size the record excludes skips the row. Both skips say ``n/a`` and why."""
    head_dim = SCALING_CONFIG["d_model"] // SCALING_CONFIG["n_heads"]
    if not record.supports_head_dim(head_dim):
        pytest.skip(f"n/a: {record.name} supports head_dim ≥ {record.limits.min_head_dim}"
                    f"{f' up to {record.limits.max_head_dim}' if record.limits.max_head_dim else ''}; "
                    f"the scaling table runs at head_dim {head_dim}")
    limit = record.limits.max_position
    lengths = tuple(n for n in SCALING_LENGTHS if limit is None or n <= limit)
    if len(lengths) < 3:
        pytest.skip(f"n/a: {record.name}'s table covers positions below {limit}: fewer than three of the scaling "
                    f"lengths {SCALING_LENGTHS} fit, too few for a slope")
    return lengths


def test_slope_of_a_quadratic_cost_is_two():
    """The fit itself can tell O(n) from O(n²)."""
    lengths = MEMORY_LENGTHS
    assert abs(profiling.loglog_slope(lengths, [n * n * 3 + 5 for n in lengths]) - 2) < 0.01
    assert abs(profiling.loglog_slope(lengths, [7 * n for n in lengths]) - 1) < 1e-9
    assert torch.isfinite(torch.tensor(profiling.loglog_slope(lengths, [1.0] * len(lengths))))
