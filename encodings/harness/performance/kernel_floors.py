"""What bounds a RoPE's ×copy at the perf run's size: the kernels under the reference encoders.

The perf tables give each encoder's ``×copy = t_copy / t`` (``specs/test_perf.py``). Where the
reference RoPEs fall short of 1, the cause is one of: the arithmetic of the kernel (a complex
multiply is four products and two sums per pair, a copy none), the shape of its loop (phasors
broadcast over heads leave an inner loop of ``head_dim / 2`` pairs), or the cost of the call
(a compiled function's guards and wrapper). :func:`measure` times each right after a copy, as the
perf run times an encoder (the copy is pytest-benchmark's setup before each round), the kernels
taken in turn round by round, at ``batch × 512 × 12 × 64`` float32 for q and k:

* ``copy``: a copy of the bytes the encoders' calls move (reads and writes of q, k and their outputs);
* ``new outputs, nothing computed``: ``x.clone()`` for q and k, the least any encoder that returns
  new tensors does (an allocation, and writes where the last round did not write);
* ``real multiply``: ``x · x`` for q and k, the same bytes through the simplest vectorised kernel;
* ``complex multiply, broadcast over heads``: ``rope_complex``'s kernel alone;
* ``complex multiply, phasors per head``: the same with its table as wide as ``x``;
* ``rope_complex`` and ``rope_compiled`` (static shapes): the encoders, as the perf run calls them;
* ``rope_inplace``: its C kernel rotating q and k where they lie (as the perf run times it), and
  the same kernel writing new tensors (its ``forward``): what a fresh output costs;
* ``compiled call, one element``: a compiled ``x · c`` of one element, the call's cost alone.

Each is stated as ×copy (the median of the copies timed right before it over its median), so the
page says which bound holds. At batch 1 everything sits in the CPU's caches, a copy runs at their
speed, and a kernel's arithmetic shows; at batch 8 memory decides.
"""

from __future__ import annotations

import torch

import time

from .profiling import copy_call, median, steady_allocator

SEQ, HEADS, HEAD_DIM = 512, 12, 64


def _kernels(batch: int) -> dict:
    from ...encoders.fused import CompiledRotaryEmbedding
    from ...encoders.native import InPlaceRotaryEmbedding
    from ...encoders.rotary import RotaryEmbeddingComplex

    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(batch, SEQ, HEADS, HEAD_DIM, generator=generator) for _ in range(2))
    angles = torch.arange(SEQ, dtype=torch.float32)[:, None] * RotaryEmbeddingComplex(HEAD_DIM).inv_freq.float()
    phasors = torch.polar(torch.ones_like(angles), angles)[:, None, :]
    per_head = phasors.expand(SEQ, HEADS, HEAD_DIM // 2).contiguous()
    complex_rope = RotaryEmbeddingComplex(HEAD_DIM, SEQ)
    fused = CompiledRotaryEmbedding(HEAD_DIM)
    fused.static_shapes = True
    in_place = InPlaceRotaryEmbedding(HEAD_DIM)
    one, scale = torch.randn(1), torch.randn(1)
    compiled_scale = torch.compile(lambda x, c: x * c, dynamic=False)

    def complex_multiply(table):
        return lambda: [(t.view(torch.complex64) * table).view(torch.float32) for t in (q, k)]

    return {
        "copy": copy_call(4 * q.numel() * q.element_size(), "cpu"),
        "new outputs, nothing computed (clone)": lambda: [t.clone() for t in (q, k)],
        "real multiply (x·x)": lambda: [t * t for t in (q, k)],
        "complex multiply, broadcast over heads": complex_multiply(phasors),
        "complex multiply, phasors per head": complex_multiply(per_head),
        "rope_complex": lambda: [complex_rope(t) for t in (q, k)],
        "rope_compiled (static shapes)": lambda: [fused(t) for t in (q, k)],
        # q and k themselves, as the perf run's rounds rotate theirs: read hot like every other
        # kernel's input, and kept in norm (a rotation), so the kernels after it read the same sizes
        "rope_inplace, in place": lambda: [in_place.rotate_(t) for t in (q, k)],
        "rope_inplace's kernel into new outputs (forward)": lambda: [in_place(t) for t in (q, k)],
        "compiled call, one element": lambda: compiled_scale(one, scale),
    }


def _after_copies(kernels: dict, copy, min_time: float, min_rounds: int) -> dict[str, tuple[list, list]]:
    """Per kernel: the seconds of the copies timed right before it, and its own; in turn, round by round."""
    names = [name for name in kernels if name != "copy"]
    for name in names:
        copy(), kernels[name]()
    samples = {name: ([], []) for name in names}
    start, rounds = time.perf_counter(), 0
    while rounds < min_rounds or time.perf_counter() - start < min_time:
        for name in names[rounds % len(names):] + names[: rounds % len(names)]:
            for seconds, call in zip(samples[name], (copy, kernels[name])):
                t0 = time.perf_counter_ns()
                call()
                seconds.append((time.perf_counter_ns() - t0) * 1e-9)
        rounds += 1
    return samples


def measure(batches=(1, 8), min_time: float = 3.0) -> dict:
    """``{batch: {kernel: ×copy}}`` and each kernel's median microseconds, each timed after a copy."""
    out = {}
    steady_allocator()  # outputs from the heap, as in the perf run's workloads: no page faults timed
    with torch.no_grad():
        for batch in batches:
            kernels = _kernels(batch)
            samples = _after_copies(kernels, kernels["copy"], min_time, min_rounds=50)
            copies = [t for before, _ in samples.values() for t in before]
            out[str(batch)] = {"copy": {"microseconds": median(copies) * 1e6, "xcopy": 1.0},
                               **{name: {"microseconds": median(own) * 1e6, "xcopy": median(before) / median(own)}
                                  for name, (before, own) in samples.items()}}
    return out
