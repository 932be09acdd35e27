"""The rules that decide the performance claims (PERF-1, PERF-2, LIN-1, ROPE-12), stated once.

Applied by ``specs/test_perf.py`` and ``specs/test_complexity.py``; each built-in record's
verdicts on them are in :mod:`.builtin_records`.

* **PERF-1** (000 §4.1): forward time at seq 512, d_model 768 ranks learnable < sinusoidal < RoPE
  (V100: 1.2 < 1.5 < 2.1 ms). Batch 1, float32, ``torch.no_grad()``, timed interleaved in one
  run (``-m perf`` only). An encoder satisfies it when every comparison with its neighbours in
  the claimed chain holds by more than the noise margin: ``t_slower / t_faster ≥ 1 + PERF1_MARGIN``.
* **PERF-2** (000 §4.1): memory at the same size is learnable 3.8 MB, sinusoidal 0.2 MB,
  RoPE 1.5 MB. Memory = static bytes (parameters, buffers, caches) + peak bytes of one forward
  call above the baseline, batch 1, float32 (deterministic, in the default run). An encoder
  satisfies it when its memory is within a factor ``PERF2_FACTOR`` of its claimed figure *and*
  its rank among the three is the claimed rank (sinusoidal < RoPE < learnable).
* **LIN-1** (000 §5.2): linear attention is O(n) in memory and time: the log-log slope of peak
  memory against sequence length (5 lengths over 16×, deterministic) is below
  ``LINEAR_SLOPE_LIMIT``, the midpoint between O(n) and O(n²). Time (``-m perf``) is fitted at
  the longest lengths the record allows, beside a softmax attention control at the same lengths:
  the bar is the midpoint between 1 and the control's slope (at most ``LINEAR_SLOPE_LIMIT``), and
  a control below n^1.6 leaves the cell undecided, since those lengths cannot tell the two apart.
  So does a busy machine: the per-round ratio ``t(longest) / t(4× shorter)`` spreading (IQR /
  median) by more than ``BUSY_SPREAD["LIN-1"]`` for the record or the control (linear attention's
  short calls spread by 23-53% idle on a 2-core EPYC), or the record's time growing as less than
  n^0.5: a call that touches every token cannot, so something else was timed.
* **ROPE-12** (000 §3.3, 004 §1.1): inside softmax attention, RoPE's overhead
  ``t(attention) / t(attention without rotation) − 1`` is "relatively small", at most
  ``ROPE12_OVERHEAD_LIMIT`` (the usual bar for a small cost) at the documents' size (batch 1,
  seq 512, d_model 768, 12 heads, forward), and "efficient for long sequences": the
  overhead at 4× the length is no larger than at 512 plus ``ROPE12_NOISE``.
* **A busy machine decides nothing.** PERF-1 and ROPE-12 compare calls timed in alternation,
  round by round. When the per-round ratios spread (IQR / median) by more than ``BUSY_SPREAD``
  the machine was busy while they ran: other work lands on one call of a round and not on the
  other, and the interval moves with it. Such a cell reads ``undecided`` with its measured
  interval and spread, never ``holds`` or ``refuted``. The limit is per claim, above the spread
  an idle machine shows: ROPE-12's calls (tens of ms) spread by 3-9% idle on a 2-core EPYC and by
  77% with another test run beside them; PERF-1's (0.1-0.5 ms, where a cache miss is a large
  share) by 21-27% idle and 29-54% beside another run. On an idle machine the spread is a few
  percent; ``tests/test_spec_teeth.py`` injects a noisy timer and requires ``undecided``.
"""

#: The documents' table (000 §4.1, V100, seq 512, dim 768): encoder -> (forward ms, memory MB). Measured
#: on the documents' own code (000 §2.1, §2.2, §3.2). RoPE is called on q and k, as 000 §3.3 calls it:
#: both count. Memory is static bytes + the peak of one forward call (ABS-6 counts static bytes only:
#: it is about how the table grows with max_len, not about one call).
DOCUMENT_TABLE: dict[str, tuple[float, float]] = {
    "published_learnable": (1.2, 3.8),
    "published_sinusoidal": (1.5, 0.2),
    "published_rope": (2.1, 1.5),
}
PERF1_MARGIN = 0.10
PERF2_FACTOR = 2.0
LINEAR_SLOPE_LIMIT = 1.5
ROPE12_OVERHEAD_LIMIT = 0.10
ROPE12_NOISE = 0.05
#: A measured ratio whose 95% interval lies within this distance of its bar is "undecided": the
#: bars are round numbers, and a verdict that a different machine could flip is no verdict.
PERF1_EQUIVALENCE = 0.02
ROPE12_EQUIVALENCE = 0.02
#: Per-round ratio spread (IQR / median) above which a timing cell is undecided: the machine was busy.
BUSY_SPREAD = {"ROPE-12": 0.20, "PERF-1": 0.40, "LIN-1": 0.75}
