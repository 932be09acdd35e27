"""A busy machine, simulated: every timed call of the interleaved timer takes 1 to 4 times as long
as it did, at random (seeded), as when other jobs share the cores. Registers no encoder. It times the
spec's least rounds (``min_rounds``) and no longer: the busy check judges that many as well.

    pytest specs -m perf -k "rope_overhead or forward_time" --plugin tests/plugins/noisy_timer.py

PERF-1 and ROPE-12 must then read ``undecided``, never ``holds`` or ``refuted``."""

import random

from posenc.harness import profiling

_quiet = profiling.interleaved_samples
_load = random.Random(0)


def _busy(fns, **options):
    samples = _quiet(fns, **{**options, "min_time": 0.0})
    return {name: [t * _load.uniform(1.0, 4.0) for t in times] for name, times in samples.items()}


profiling.interleaved_samples = _busy
