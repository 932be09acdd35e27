"""On CUDA the benchmarks' clock measures device time.

The timed call synchronises before it returns, so the host clock (what pytest-benchmark reads)
covers the queued kernels. It must agree with CUDA events recorded around the same work,
enqueued without synchronising: ``|t_host − t_events| ≤ 10 % · t_events + 50 µs`` (launch and
synchronisation latency). A second test shows the check has power: timing the same kind of
work without synchronising measures only the launches and falls outside that margin.
Skipped where CUDA is absent.
"""

from __future__ import annotations

import pytest
import torch

from posenc import get
from posenc.harness.performance import profiling

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

MARGIN_RELATIVE, MARGIN_ABSOLUTE = 0.10, 50e-6


def _agrees(host: float, events: float) -> bool:
    return abs(host - events) <= MARGIN_RELATIVE * events + MARGIN_ABSOLUTE


@pytest.mark.parametrize("encoder", ["rope_interleaved", "attention_rope"])
def test_synchronised_host_time_agrees_with_cuda_events(encoder):
    work = profiling.make_workload(get(encoder), batch=8, seq=4096, device="cuda")
    host = profiling.median(profiling.time_call(work.call, min_time=0.5, min_reps=20))
    events = profiling.median(profiling.cuda_event_times(lambda: work.call(sync=False), reps=20))
    assert _agrees(host, events), f"host {host * 1e3:.4f} ms vs CUDA events {events * 1e3:.4f} ms"


def test_unsynchronised_host_time_would_fail_the_check():
    a = torch.randn(4096, 4096, device="cuda")

    def enqueue():
        return a @ a

    events = profiling.median(profiling.cuda_event_times(enqueue, reps=10))
    torch.cuda.synchronize()
    host = profiling.median(profiling.time_call(enqueue, min_reps=10, min_time=0.0, max_reps=10))
    torch.cuda.synchronize()
    assert not _agrees(host, events), f"unsynchronised host {host * 1e3:.4f} ms vs events {events * 1e3:.4f} ms"
