"""Performance: benchmarks of every encoder, and the documents' table (PERF-1, PERF-2).

000 §4.1 (V100, seq 512, dim 768): forward time learnable 1.2 ms < sinusoidal 1.5 ms < RoPE 2.1 ms
(PERF-1); memory learnable 3.8 MB, sinusoidal 0.2 MB, RoPE 1.5 MB (PERF-2). The rules that decide
them are stated in :mod:`posenc.harness.catalogue.perf_rules`.

``test_benchmark`` (``-m perf``) times each encoder at seq 512, d_model 768, 12 heads, batch 1 and
8, forward and forward+backward, grouped by size (one table per group, one row per encoder), and
records in ``extra_info``: peak memory above baseline, static memory, minimum bytes moved
``B``, achieved bandwidth ``B / t`` and its ratio to a same-run copy of ``B`` bytes, operator and
kernel counts, and on CUDA the CUDA-event time. With ``--profile`` it also writes a trace.
"""

from __future__ import annotations

import math
import re
import time

import pytest
import torch

from posenc import get
from posenc.harness.run import benchmark_gates
from posenc.harness.performance import machine, plots, profiling
from posenc.harness.catalogue.perf_rules import BUSY_SPREAD, DOCUMENT_TABLE, PERF1_EQUIVALENCE, PERF1_MARGIN, PERF2_FACTOR
from posenc.harness.performance.summaries import write_summaries
from specs import support as s

MODES = ("forward", "forward+backward")
BATCHES = (1, 8)
DTYPE = torch.float32


def _in_document_table(record) -> bool:
    return record.name in DOCUMENT_TABLE


def _skip_bias(record) -> None:
    if record.kind == "bias":
        pytest.skip("a logit bias takes positions, not activations: it is timed inside the length experiment's models")


def _skip_unsupported_size(record) -> None:
    head_dim = profiling.DOC_D_MODEL // profiling.DOC_HEADS
    if not record.supports_head_dim(head_dim):
        pytest.skip(f"n/a: {record.name} excludes the documents' head_dim {head_dim} (d_model "
                    f"{profiling.DOC_D_MODEL}, {profiling.DOC_HEADS} heads)")


def _bench_name(device, mode, batch, encoder) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{device}-{mode}-b{batch}-{encoder}")


def _rounds(benchmark, work) -> int:
    """pytest-benchmark's rounds for ``work``: ``--benchmark-max-time`` over one timed call, at least
    ``--benchmark-min-rounds`` (both set by ``--perf-length`` unless given). A workload whose
    last warm-up call fills that time at the least rounds takes them without a further call."""
    least, most = int(getattr(benchmark, "_min_rounds", 5)), float(getattr(benchmark, "_max_time", 1.0))
    if work.warmup_seconds * least >= most:
        return least
    start = time.perf_counter()
    work.call()
    once = max(time.perf_counter() - start, 1e-6)
    return max(least, math.ceil(most / once))


@pytest.mark.perf
@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"b{b}")
@pytest.mark.parametrize("mode", MODES)
def test_benchmark(benchmark, perf_record, perf_device, mode, batch, perf_session):
    _skip_bias(perf_record)
    _skip_unsupported_size(perf_record)
    device = perf_device
    length = profiling.PERF_LENGTHS[perf_session.length]
    work = profiling.make_workload(perf_record, batch=batch, dtype=DTYPE, device=device,
                                   backward=mode != "forward", warmup=length.warmup, fixed_shapes=True)
    benchmark.group = (f"{device} {mode}: batch {batch}, seq {profiling.DOC_SEQ}, "
                       f"d_model {profiling.DOC_D_MODEL}, {profiling.DOC_HEADS} heads, float32")
    # ×copy: before each timed round a copy of the call's minimum bytes is timed too (pedantic's
    # setup, untimed by pytest-benchmark), so drift hits both alike and no round is spent twice
    copy, copies = profiling.copy_call(work.min_bytes, device), []
    copy()  # its pages touched once, as the call's are by its warm-up

    def time_the_copy():
        start = time.perf_counter_ns()
        copy()
        copies.append((time.perf_counter_ns() - start) * 1e-9)

    benchmark.pedantic(work.call, setup=time_the_copy, rounds=_rounds(benchmark, work), warmup_rounds=0)
    stats = getattr(benchmark, "stats", None)
    calls = list(stats.stats.data) if stats is not None else profiling.time_call(work.call)
    seconds = profiling.median(calls)
    spread = stats.stats.iqr / stats.stats.median if stats is not None and stats.stats.median else 0.0
    copy_seconds = profiling.median(copies or profiling.time_call(copy))
    source, counts = profiling.profile_call(work.call, device)  # on CPU its trace gives the peak too
    on_cuda = torch.device(device).type == "cuda"
    info = {
            "encoder": perf_record.name,
            "kind": perf_record.kind,
            "device": device,
            "device_name": machine.device_name(device),
            "dtype": "float32",
            "mode": mode,
            "batch": batch,
            "seq": profiling.DOC_SEQ,
            "d_model": profiling.DOC_D_MODEL,
            "n_heads": profiling.DOC_HEADS,
            "seconds": seconds,
        "spread": spread,  # IQR / median of pytest-benchmark's rounds: this run's own timing noise
        "best_seconds": stats.stats.min if stats is not None else seconds,
            "peak_bytes": profiling.peak_memory(work.call, device) if on_cuda else source.peak_bytes,
            "peak_op": str(source),  # the largest block alive at the peak
            **work.static,
            "min_bytes": work.min_bytes,
            "copy_seconds": copy_seconds,
            **profiling.roofline(work.min_bytes, seconds, copy_seconds),
            **counts,
    }
    backends = getattr(work.module, "backends", None)
    if backends is not None:
        info["backend"] = backends.get((torch.device(device).type, DTYPE), "eager")
    if on_cuda:
        info["cuda_event_seconds"] = profiling.median(profiling.cuda_event_times(lambda: work.call(sync=False)))
    if perf_session.run_dir is not None:
        name = _bench_name(device, mode, batch, perf_record.name)
        files = profiling.write_trace(work.call, perf_session.run_dir / name, name, device)
        info["trace"] = [str(f) for f in files]
        if files:  # the timeline as a picture: TensorBoard's Images tab shows it offline
            picture = perf_session.run_dir / name / "timeline.png"
            plots.timeline(files[0], title=name).save(picture)
            info["timeline"] = str(picture)
    benchmark.extra_info.update(info)
    perf_session.benchmarks.append({**info, "group": benchmark.group})
    assert info["peak_bytes"] >= 0 and info["min_bytes"] > 0 and seconds > 0


@pytest.mark.perf
def test_benchmarks_pass_the_gate(perf_session):
    """With ``--perf-compare RUN``: this run's benchmarks against the saved run, under ``--perf-fail``'s
    gate. Collected last (the harness moves it there) and only with ``--perf-compare``, so a
    regression ends the run on a failed test and a red summary line; each regression is one
    ``REGRESSION`` line in the perf summary."""
    compared = benchmark_gates.gate_this_run(perf_session)
    if compared is None:
        pytest.skip("needs --perf-compare RUN")
    if perf_session.regressions:
        pytest.fail(f"{len(perf_session.regressions)} benchmark regression(s) against {compared}: "
                    "see the REGRESSION lines of the perf summary", pytrace=False)


@pytest.mark.perf
def test_tensorboard_summaries(perf_session):
    """With ``--profile``: attention patterns, RoFormer decay, precision and scaling per encoder."""
    if perf_session.run_dir is None:
        pytest.skip("needs --profile")
    logdir = perf_session.run_dir / "summaries"
    tags = write_summaries(logdir, perf_session.records, perf_session.device)
    perf_session.note(f"TensorBoard summaries: {len(tags['scalars'])} scalar and "
                      f"{len(tags['images'])} image tags in {logdir}")
    for skipped in tags["skipped"]:
        perf_session.note(f"TensorBoard summaries skipped {skipped}")
    assert list(logdir.glob("events.out.tfevents.*"))
    crashed = [line for line in tags["skipped"] if line.split(": ", 2)[1].endswith(("Error", "Exception"))]
    assert not crashed, f"summaries raised for {len(crashed)} encoder(s): " + "; ".join(crashed)


# ---------------------------------------------------------------- PERF-1: forward time ordering

_TIMES: dict[str, dict[str, list[float]]] = {}


def document_times(device: str, length: profiling.PerfLength) -> dict[str, list[float]]:
    """Per-round forward seconds of the documents' three encoders, batch 1, timed interleaved in this run."""
    if device not in _TIMES:
        works = {name: profiling.make_workload(get(name), device=device) for name in DOCUMENT_TABLE}
        _TIMES[device] = profiling.interleaved_samples({n: w.call for n, w in works.items()},
                                                       min_time=length.ranking_min_time,
                                                       min_rounds=length.ranking_min_rounds)
    return _TIMES[device]


@pytest.mark.perf
@pytest.mark.claim("PERF-1", requires=_in_document_table)
def test_forward_time_ranks_as_the_documents_table(record, device, perf_session):
    """Each claimed "faster than" is judged by the 95% interval of the time ratio of the two
    encoders over interleaved rounds: all of it past ``1 + PERF1_MARGIN`` (by more than the
    equivalence margin) holds, all of it below refutes, anything else is undecided."""
    samples = document_times(device, profiling.PERF_LENGTHS[perf_session.length])
    times = {n: profiling.median(t) for n, t in samples.items()}
    chain = sorted(DOCUMENT_TABLE, key=lambda n: DOCUMENT_TABLE[n][0])  # claimed fastest first
    i = chain.index(record.name)
    pairs = [(chain[j], chain[j + 1]) for j in (i - 1, i) if 0 <= j < len(chain) - 1]
    shown = ", ".join(f"{n} {times[n] * 1e3:.3f} ms (doc {DOCUMENT_TABLE[n][0]} ms)" for n in chain)
    perf_session.note(f"PERF-1 on {machine.device_name(device)}: {shown}")
    details = dict(times_ms={n: round(times[n] * 1e3, 4) for n in chain}, device=machine.device_name(device))
    spreads = {f"{slower}/{faster}": profiling.paired_spread(samples[slower], samples[faster]) for faster, slower in pairs}
    if max(spreads.values()) > BUSY_SPREAD["PERF-1"]:
        measured = "; ".join(f"t({slower}) / t({faster}) = {{:.3f}} (95% CI {{:.3f}} … {{:.3f}})".format(
            *profiling.ratio_interval(samples[slower], samples[faster])) for faster, slower in pairs)
        s.undecided("the machine is busy: the paired rounds spread by "
                    + ", ".join(f"{v:.0%} ({pair})" for pair, v in spreads.items())
                    + f" (IQR / median of the per-round ratios; limit {BUSY_SPREAD['PERF-1']:.0%}); measured: {measured}",
                    **details)
    straddles = []
    for faster, slower in pairs:
        ratio, low, high = profiling.ratio_interval(samples[slower], samples[faster])
        if high < 1 + PERF1_MARGIN - PERF1_EQUIVALENCE:
            s.violated(f"{faster} is not faster than {slower} by more than the {PERF1_MARGIN:.0%} noise margin: "
                       f"t({slower}) / t({faster}) = {ratio:.3f} (95% CI {low:.3f} … {high:.3f})", **details)
        if low < 1 + PERF1_MARGIN + PERF1_EQUIVALENCE:
            straddles.append(f"t({slower}) / t({faster}) = {ratio:.3f} (95% CI {low:.3f} … {high:.3f})")
    if straddles:
        s.undecided(f"the interval contains the {1 + PERF1_MARGIN:.2f} bar: " + "; ".join(straddles), **details)


# ---------------------------------------------------------------- PERF-2: memory (deterministic)

_MEMORY: dict[str, dict[str, dict]] = {}


def document_memory(device: str) -> dict[str, dict]:
    """Static bytes + peak bytes of one forward call, batch 1, seq 512, d_model 768, float32."""
    if device not in _MEMORY:
        out = {}
        for name in DOCUMENT_TABLE:
            work = profiling.make_workload(get(name), device=device, warmup=1)
            peak = profiling.peak_memory(work.call, device)
            out[name] = {"static": work.static["static_bytes"], "peak": peak,
                         "total": work.static["static_bytes"] + peak}
        _MEMORY[device] = out
    return _MEMORY[device]


@pytest.mark.claim("PERF-2", requires=_in_document_table)
def test_memory_matches_the_documents_table(record, device, perf_session):
    memory = document_memory(device)
    measured = {n: m["total"] / 1e6 for n, m in memory.items()}
    claimed = {n: DOCUMENT_TABLE[n][1] for n in DOCUMENT_TABLE}
    shown = ", ".join(f"{n} {measured[n]:.2f} MB (static {memory[n]['static'] / 1e6:.2f} + peak "
                      f"{memory[n]['peak'] / 1e6:.2f}; doc {claimed[n]} MB, {measured[n] / claimed[n]:.2f}×)"
                      for n in DOCUMENT_TABLE)
    note = f"PERF-2 on {device}: {shown}"
    perf_session.note(note)
    name = record.name
    ratio = measured[name] / claimed[name]
    details = dict(measured_MB={n: round(v, 3) for n, v in measured.items()}, claimed_MB=claimed)
    if not 1 / PERF2_FACTOR <= ratio <= PERF2_FACTOR:
        s.violated(f"{measured[name]:.2f} MB is {ratio:.2f}× the claimed {claimed[name]} MB "
                   f"(allowed: within a factor {PERF2_FACTOR:g})", **details)
    claimed_rank = sorted(claimed, key=claimed.get).index(name)
    measured_rank = sorted(measured, key=measured.get).index(name)
    if claimed_rank != measured_rank:
        s.violated(f"ranks {measured_rank + 1} of {len(claimed)} by memory, claimed "
                   f"{claimed_rank + 1}", **details)


def test_workload_builds_and_measures(perf_record):
    """The benchmark workload of every selected encoder, at a tiny size (cheap, default run)."""
    _skip_bias(perf_record)
    head_dim = s.supported_head_dim(perf_record, 8)
    work = profiling.make_workload(perf_record, seq=8, d_model=2 * head_dim, n_heads=2, warmup=1, backward=True)
    assert work.min_bytes > 0 and profiling.peak_memory(work.call, "cpu") > 0
