"""What the perf run writes for TensorBoard with ``SummaryWriter``, next to the profiler traces.

* ``attention/<encoder>`` (images): attention weights between 64 positions of one repeated
  token, mean over heads, scaled to [0, 1]; 004 §10 advises looking at attention patterns.
  Attention modules are read through ``attend(q, k, v = I)``, rotary encoders as
  ``softmax(⟨f(q, m), f(k, n)⟩ / √d)``, additive ones as ``softmax(h_m·h_n / √d)``, ``h = f(x)``,
  a logit bias (ALiBi) as ``softmax(b(m, n))``: with one repeated token only the bias differs.
* ``skipped/<encoder>`` (text): what could not be drawn for an encoder and why (a head size it
  excludes, a call that raised): one encoder never stops the others' summaries.
* ``roformer/decay_bound_d<d>`` (scalars against the distance r): RoFormer §3.4.3's bound
  ``B(r) = (1/(d/2))·Σ_j |S_j|``, ``S_j = Σ_{k<j} e^{i r θ_k}``, ``θ_k = 10000^(−2k/d)``.
* ``precision/<encoder>/<dtype>`` (scalars against the position p): ``max|f(x, p) − R_p x| / max|R_p x|``
  against the float64 formula, for every rotary encoder that claims the formula (ROPE-1).
* ``scaling/time_ms/<encoder>`` and ``scaling/peak_MiB/<encoder>`` (scalars against seq):
  forward time (median) and peak memory above baseline at batch 1, d_model 768.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import torch

from . import machine, profiling
from ..references.protocols import build_subject
from ..catalogue.records import SPEC_CONFIG, BuildConfig
from ..references.reference import reference_frequencies, reference_rotation, roformer_bound
from ..references.tensors import as_heads, randn
from ..catalogue.states import State

PATTERN_SEQ, PATTERN_D_MODEL, PATTERN_HEADS = 64, 768, 12  # head_dim 64 = seq: v = I fits
PRECISION_POSITIONS = tuple(2**k for k in range(0, 21))
SCALING_LENGTHS = (128, 256, 512, 1024, 2048)
PATTERN_CONFIG = BuildConfig(d_model=PATTERN_D_MODEL, n_heads=PATTERN_HEADS, max_len=PATTERN_SEQ)


def _same_token(shape, device, seed=0):
    """A tensor whose every position holds the same random vector."""
    one = randn((shape[0], 1, *shape[2:]), seed, device=device)
    return one.expand(shape).contiguous()


def attention_pattern(record, device: str = "cpu") -> torch.Tensor:
    """(seq, seq) attention weights of one repeated token, mean over heads."""
    module = build_subject(record, **replace(PATTERN_CONFIG, device=device).__dict__)
    s, h, hd = PATTERN_SEQ, PATTERN_HEADS, PATTERN_D_MODEL // PATTERN_HEADS
    with torch.no_grad():
        if record.kind == "attention":
            q = _same_token((1, s, h, hd), device)
            v = torch.eye(s, hd, device=device)[None, :, None, :].expand(1, s, h, hd).contiguous()
            weights = module.attend(q, q.clone(), v)[0, :, :, :s].permute(1, 0, 2)  # (h, m, n)
        elif record.kind == "bias":
            positions = torch.arange(s, device=device)
            weights = module(positions, positions).float().softmax(-1)  # (h, m, n); −∞ after the query
        elif record.kind == "rotary":
            x = _same_token(record.input_shape(1, s, PATTERN_CONFIG), device)
            f = as_heads(module(x), PATTERN_CONFIG)[0].transpose(0, 1)  # (h, s, hd)
            weights = (f @ f.transpose(-1, -2) / math.sqrt(f.shape[-1])).softmax(-1)
        else:
            x = _same_token((1, s, PATTERN_D_MODEL), device)
            out = module(x)[0]
            weights = (out @ out.T / math.sqrt(out.shape[-1])).softmax(-1)[None]
    pattern = weights.float().mean(0).cpu()
    return (pattern - pattern.min()) / (pattern.max() - pattern.min()).clamp_min(1e-30)


def precision_errors(record, dtype, positions=PRECISION_POSITIONS, device: str = "cpu") -> list[float]:
    """Relative error of ``f(x, p)`` against the float64 formula at each position."""
    config = SPEC_CONFIG
    module = build_subject(record, **replace(config, dtype=dtype, device=device).__dict__)
    x = randn(record.input_shape(1, 1, config), seed=7, dtype=dtype, device=device)
    x64 = as_heads(x, config).to(torch.float64)
    errors = []
    for p in positions:
        pos = torch.tensor([[p]], device=device)
        with torch.no_grad():
            y = as_heads(module(x, pos), config).to(torch.float64)
        ref = reference_rotation(x64, pos, record.geometry, config.head_dim)
        errors.append(float((y - ref).abs().max() / ref.abs().max()))
    return errors


def scaling(record, device: str = "cpu", lengths=SCALING_LENGTHS) -> list[tuple[int, float, int]]:
    """(seq, median seconds, peak bytes) of one forward call at batch 1, d_model 768."""
    rows = []
    for n in lengths:
        work = profiling.make_workload(record, seq=n, device=device, warmup=1)
        seconds = profiling.median(profiling.time_call(work.call, min_time=0.1, min_reps=3))
        rows.append((n, seconds, profiling.peak_memory(work.call, device)))
    return rows


def claims_formula(record) -> bool:
    return record.kind == "rotary" and record.geometry is not None and record.declared("ROPE-1").status == State.HOLDS


def write_summaries(logdir, records, device: str = "cpu", *, lengths=SCALING_LENGTHS,
                    positions=PRECISION_POSITIONS) -> dict[str, list[str]]:
    """Write every summary for ``records`` into ``logdir``; returns the scalar and image tags written."""
    from torch.utils.tensorboard import SummaryWriter

    tags = {"scalars": [], "images": [], "skipped": []}
    with SummaryWriter(log_dir=str(Path(logdir))) as writer:
        writer.add_text("machine", str(machine.machine_info()))
        for dim in (64, 128):
            tag = f"roformer/decay_bound_d{dim}"
            for r, value in enumerate(roformer_bound(reference_frequencies(dim, 10000.0), range(0, 1024)).tolist()):
                writer.add_scalar(tag, value, global_step=r)
            tags["scalars"].append(tag)
        for record in records:
            for why in _record_summaries(writer, tags, record, device, lengths, positions):
                writer.add_text(f"skipped/{record.name}", why)
                tags["skipped"].append(f"{record.name}: {why}")
    return tags


def _record_summaries(writer, tags, record, device, lengths, positions) -> list[str]:
    """Write one encoder's summaries; returns what was skipped and why."""
    skipped = []
    head_dim = PATTERN_D_MODEL // PATTERN_HEADS
    try:
        if record.kind != "bias" and not record.supports_head_dim(head_dim):
            skipped.append(f"attention pattern: the encoder excludes head_dim {head_dim}")
        else:
            pattern = attention_pattern(record, device)
            image = pattern.repeat_interleave(4, 0).repeat_interleave(4, 1)
            writer.add_image(f"attention/{record.name}", image, dataformats="HW")
            tags["images"].append(f"attention/{record.name}")
        limit = record.limits.max_position
        if claims_formula(record):
            reached = [p for p in positions if limit is None or p < limit]  # a fixed table ends them
            if len(reached) < len(positions):
                skipped.append(f"precision past position {limit - 1}: the encoder's table ends there")
            for dtype in record.limits.dtypes:
                tag = f"precision/{record.name}/{str(dtype).removeprefix('torch.')}"
                for p, error in zip(reached, precision_errors(record, dtype, reached, device)):
                    writer.add_scalar(tag, error, global_step=p)
                tags["scalars"].append(tag)
        if lengths and record.kind == "bias":
            skipped.append("scaling: a logit bias takes positions, not activations (timed inside the length "
                           "experiment's models)")
        elif lengths:
            fitting = [n for n in lengths if limit is None or n <= limit]
            for n, seconds, peak in scaling(record, device, fitting):
                writer.add_scalar(f"scaling/time_ms/{record.name}", seconds * 1e3, global_step=n)
                writer.add_scalar(f"scaling/peak_MiB/{record.name}", peak / 2**20, global_step=n)
            tags["scalars"] += [f"scaling/time_ms/{record.name}", f"scaling/peak_MiB/{record.name}"]
    except Exception as error:  # noqa: BLE001 - one encoder's failure is reported, the others go on
        skipped.append(f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
    return skipped
