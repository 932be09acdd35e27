"""Behaviour past the maximum length.

* ABS-2 (000 §2.1 tip, §4.2): a learnable table refuses positions ``p ≥ max_len`` with an error naming the limit.
* ABS-4 (000 §2.2): the sinusoidal encoding is defined at any position up to ``p = 10^6``: each
  ``(pe[p, 2i], pe[p, 2i+1])`` is finite, on the unit circle, and turns from ``p`` to ``p + 1`` by
  the angle it turns from 0 to 1 (which angle is ABS-3's: the formula ``θ_i``).
* ROPE-9 (000 §3.2, 004 §5.2): caching sin/cos changes no result. A used module gives a fresh
  module's output on the same call, whatever came before: the same call, calls of ``max_len − 1``, ``max_len``,
  ``max_len + 1``, ``2·max_len`` and 4096 positions, a bf16 call of more than 256 positions, a
  call on another device, a call of the probe's own length 7 positions on (a cache keyed by the
  length alone), and the same input three times with no positions (the check whose finding makes
  other claims' violations ``depends on ROPE-9``). Each probe (a call of length ``max_len − 1``, ``max_len`` or
  ``max_len + 1``, and a short one far out) runs on its own module after its own history.
* ROPE-10a (000 §4.2, 004 §1.1) and ROPE-11 (004 §10.2): ROPE-4 and ROPE-3 still hold at
  positions 10^2 … 10^6: the logits ``⟨f(q, P), f(k, P − δ)⟩`` equal the encoder's own
  ``⟨f(q, δ), f(k, 0)⟩`` (a table that wraps or saturates, or angles formed in a narrow dtype,
  cannot), and norms are kept where ROPE-3 is declared to hold, within the dtype's declared
  tolerance, which grows with the largest angle (fp32 angles carry ~2^-24·p rad). ROPE-11 runs
  this in float16 and bfloat16: it holds when angles are formed in fp32.
"""

import math

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s
from posenc.harness.catalogue.states import State
from posenc.harness.references.contract import history_problem


@pytest.mark.claim("ABS-2", kinds=("additive", "rotary"))
def test_positions_past_the_table_raise(record):
    """000 §2.1: past ``max_len`` the table "either raises or uses invalid encodings". Observable: an
    error (any: how clearly it names the limit is the contract row's business), never an answer."""
    module = s.build(record)
    cfg = s.SPEC_CONFIG
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    last = torch.tensor([0, 1, 2, cfg.max_len - 1])
    module(x, last)  # the last row is valid
    for what, call in (
        (f"position {cfg.max_len}", lambda: module(x, torch.tensor([0, 1, 2, cfg.max_len]))),
        (f"offset {cfg.max_len - 3} with 4 tokens", lambda: module(x, None, offset=cfg.max_len - 3)),
    ):
        try:
            out = call()
        except Exception:  # noqa: BLE001 - any error stops the table; the contract judges its message
            continue
        s.violated(f"{what}: no error past max_len={cfg.max_len}, returned an answer",
                   returned_shape=tuple(out.shape))


@pytest.mark.far_positions
@pytest.mark.claim("ABS-4", kinds=("additive",))
@given(seed=draws.seeds)
@example(seed=0)
def test_sinusoidal_is_defined_far_past_any_table(record, dtype, seed):
    """Defined, not a formula: each (sin, cos) pair is finite, on the unit circle, and turns from p to
    p + 1 by the angle it turns from 0 to 1, at every position up to 10^6 (a table that ends,
    wraps, clamps or rounds its positions cannot). Which angle that is, the formula's or another
    base's, is ABS-3's to judge."""
    module = s.build(record, dtype)
    positions = torch.tensor([0, 1, 511, 512, 10**4, 10**5, 10**6])
    positions = positions[torch.randperm(len(positions), generator=torch.Generator().manual_seed(seed))]
    both = torch.cat((positions, positions + 1))
    x = torch.zeros(s.input_shape(record, 1, len(both)), dtype=dtype)
    with torch.no_grad():
        pe = module(x, both).to(torch.float64)[0]
    if not bool(torch.isfinite(pe).all()):
        s.violated("pe is not finite far past any table", positions=both[~torch.isfinite(pe).all(-1)].tolist())
    sin, cos = pe[:, 0::2], pe[:, 1::2]
    tol = record.tolerance(dtype)
    s.require_within(error=float(((sin**2 + cos**2).sqrt() - 1).abs().max()), bound=tol.bound(1.0),
                     what="a (sin, cos) pair is off the unit circle far past any table")
    phase = torch.atan2(sin, cos)
    step = torch.remainder(phase[len(positions):] - phase[: len(positions)] + math.pi, 2 * math.pi) - math.pi
    rate = step[positions == 0]  # each pair's turn from 0 to 1
    error = torch.remainder(step - rate + math.pi, 2 * math.pi) - math.pi
    worst = int(error.abs().amax(dim=-1).argmax())
    s.require_within(error=float(error.abs().max()), bound=2 * tol.bound(1.0, s.max_angle(both)),
                     what=f"from position {int(positions[worst])} to {int(positions[worst]) + 1} the pairs turn by "
                          "another angle than from 0 to 1: the encoding is not defined there",
                     position=int(positions[worst]))


HISTORY_PROBE_SEQ = 4096  # "a call longer than any internal cache", at batch 1 and one head
HISTORY_OFFSET = 7  # a call of the probe's own length this far on: a cache keyed by length alone


def _history_calls(record, dtype, device):
    """(label, run) pairs: what a module may have been through before the probe. ``run(module, x,
    positions)`` is given the probe's own input, for the history "the same call in another dtype"."""
    L = s.SPEC_CONFIG.max_len

    def call(seq, call_dtype=dtype, call_device=device, batch=2, heads=None):
        def run(module, x, positions):
            shape = list(s.input_shape(record, batch, seq))
            if heads is not None and record.calling.input_layout == "bshd":
                shape[2] = heads
            with torch.no_grad():
                module(s.randn(tuple(shape), seed=seq, dtype=call_dtype, device=call_device), None, offset=0)
        return run

    def same_call(module, x, positions):
        with torch.no_grad():  # an encoder that changes on every call (the harness's history check)
            module(x, positions)

    def same_call_in(other_dtype):
        def run(module, x, positions):
            with torch.no_grad():
                module(x.to(other_dtype), positions)
        return run

    def same_length_at_offset(module, x, positions):
        shift = min(HISTORY_OFFSET, s.position_cap(record, int(positions.max()) + HISTORY_OFFSET) - int(positions.max()))
        with torch.no_grad():  # a cache keyed by the length alone serves the probe these positions
            module(x, None, offset=int(positions.min()) + shift)

    def elsewhere(other):
        def run(module, x, positions):
            module.to(other)
            call(L + 1, call_device=other)(module, x, positions)
            module.to(device)
        return run

    cap = s.position_cap(record, 2 * L) + 1  # a table stops at max_len
    calls = [("the same call", same_call)]
    calls += [(f"a call of {n} positions", call(n)) for n in (L - 1, L, L + 1, 2 * L) if n <= cap]
    if not record.limits.table_limited and HISTORY_PROBE_SEQ <= s.position_cap(record, HISTORY_PROBE_SEQ - 1) + 1:
        calls.append((f"a call of {HISTORY_PROBE_SEQ} positions (batch 1, one head)",
                      call(HISTORY_PROBE_SEQ, batch=1, heads=1)))
    if torch.bfloat16 in record.limits.dtypes and dtype != torch.bfloat16:
        bf16_call = min(300, s.position_cap(record, 299) + 1)  # past 256, bf16's last exact integer
        calls.append((f"a bfloat16 call of {bf16_call} positions", call(bf16_call, call_dtype=torch.bfloat16)))
    calls += [(f"the same call in {other}", same_call_in(other)) for other in record.limits.dtypes if other != dtype]
    calls.append((f"a call of the probe's own length at offset {HISTORY_OFFSET}", same_length_at_offset))
    if device == "cpu" and torch.cuda.is_available():
        calls.append(("a call on cuda", elsewhere("cuda")))
    return calls


def _probes(record, device):
    """(label, positions) of the calls compared: lengths around max_len, and a short call far out."""
    L = s.SPEC_CONFIG.max_len
    probes = [(f"a call of length {n}", torch.arange(n, device=device)) for n in (L - 1, L, L + 1)]
    if not record.limits.table_limited:
        probes.append(("3 positions from 2·max_len", torch.arange(2 * L, 2 * L + 3, device=device)))
    # a fixed cache's declared end is a limit, not a cache effect: past it is ROPE-10a's (neither document claims more)
    return [(label, p) for label, p in probes if int(p.max()) <= s.position_cap(record, int(p.max()))]


@pytest.mark.claim("ROPE-9", kinds=("rotary",))
def test_used_module_gives_the_fresh_result(record, dtype, device):
    # the check that makes other claims' violations "depends on ROPE-9": where it finds a history
    # (repeated calls without positions, the offset path), ROPE-9 fails here, once
    problem = history_problem(record, device)
    if problem is not None:
        s.violated(problem, probe="the same input three times, no positions")
    tol = record.tolerance(dtype)
    for probe, positions in _probes(record, device):
        x = s.randn(s.input_shape(record, 1, len(positions)), seed=len(positions), dtype=dtype, device=device)
        with torch.no_grad():
            fresh = s.answered(probe, lambda: s.build(record, dtype, device)(x, positions)).to(torch.float64)
        for history, run in _history_calls(record, dtype, device):
            module = s.build(record, dtype, device)
            s.answered(history, lambda: run(module, x, positions))
            with torch.no_grad():
                used = s.answered(f"{probe} after {history}", lambda: module(x, positions)).to(torch.float64)
            s.require_within(error=s.disagreement(used, fresh),
                             bound=tol.bound(float(fresh.nan_to_num(0, 0, 0).abs().max()),
                                             s.max_angle(positions, record.geometry)),
                             what=f"{probe} after {history} differs from the same call on a fresh module",
                             history=history, probe=probe)


def _far_positions(record, within_table):
    if record.limits.table_limited:
        raise s.Excluded(f"{record.name} declares a table of max_len positions: no far positions to check")
    far_positions = [p for p in s.FAR_POSITIONS if s.reachable(record, p) == p]
    if within_table:  # a precision claim: a fixed table's end is ROPE-9's and ROPE-10a's to judge
        far_positions = [p for p in far_positions if p <= s.position_cap(record, p)]
    return far_positions


def _far_errors(record, dtype, device, q, k, far_positions):
    """Per far position, nearest first: ``(position, logit error, its bound, norm error, its bound)``
    of a fresh module in ``dtype`` on ``q``, ``k``: the logits ``⟨f(q, P), f(k, P − δ)⟩`` against
    the encoder's own ``⟨f(q, δ), f(k, 0)⟩`` (ROPE-4), and the norm (ROPE-3, where declared to
    hold; else None). A call that raises is a violation, at its position."""
    module = s.build(record, dtype, device)
    tol = record.tolerance(dtype)
    q, k = q.to(dtype), k.to(dtype)
    q64 = s.as_heads(q).to(torch.float64)
    deltas = torch.tensor(s.DELTAS, device=device)
    try:
        near, near_scale = s.answered("at positions 0 … 100",
                                      lambda: s.logits(module, q, k, deltas, torch.zeros_like(deltas)))
    except s.ClaimViolation as violation:
        violation.near = True  # no far position reached: an encoder that never answers is no evidence
        raise
    keeps_norm = record.declared("ROPE-3").status == State.HOLDS
    for position in far_positions:
        m = torch.full((len(s.DELTAS),), position, device=device)
        far, far_scale, fq = s.answered(f"at position {position}",
                                        lambda: s.logits_and_queries(module, q, k, m, m - deltas))
        logit = (float((far - near).abs().max()), 2 * tol.bound(max(near_scale, far_scale), s.max_angle(m, record.geometry)))
        norm = (None, None)
        if keeps_norm:  # f_q(q, P) of the same call
            norm = (float((fq.norm(dim=-1) - q64.norm(dim=-1)).abs().max()), tol.bound(float(q64.norm(dim=-1).max())))
        yield position, *logit, *norm


_ANYWAY: dict[tuple, dict[int, tuple[float, float]]] = {}


def _errors_anyway(record, reference, device, seed, far_positions):
    """``{position: (logit error, norm error)}`` of the far-position check in the ``reference``
    dtype, on the same draws (kept for both half dtypes); a position past one where it raises is
    left out, since a failure there is not precision's."""
    key = (record.name, str(reference), device, seed, far_positions)
    if reference is None:
        return {}
    if key not in _ANYWAY:
        anyway = _ANYWAY[key] = {}
        q, k = _far_inputs(record, reference, device, seed)
        try:
            for position, error, _, norm_error, _ in _far_errors(record, reference, device, q, k, far_positions):
                anyway[position] = (_nan_as_inf(error), _nan_as_inf(norm_error or 0.0))
        except s.ClaimViolation:
            pass
    return _ANYWAY[key]


def _nan_as_inf(error):
    return math.inf if math.isnan(error) else error


def _far_inputs(record, dtype, device, seed):
    shape = s.input_shape(record, 1, len(s.DELTAS))
    return s.randn(shape, seed, dtype, device), s.randn(shape, seed + 1, dtype, device)


@pytest.mark.far_positions
@pytest.mark.claim("ROPE-10a", kinds=("rotary",), dtypes=(torch.float32, torch.float64))
@given(seed=draws.seeds)
@example(seed=0)
def test_relative_offset_and_norm_hold_far_past_any_table(record, dtype, device, seed):
    far_positions = _far_positions(record, within_table=False)
    q, k = _far_inputs(record, dtype, device, seed)
    for position, error, bound, norm_error, norm_bound in _far_errors(record, dtype, device, q, k, far_positions):
        s.require_within(error=error, bound=bound, position=position,
                         what=f"at position {position}: ⟨f(q, P), f(k, P − δ)⟩ ≠ ⟨f(q, δ), f(k, 0)⟩")
        if norm_error is not None:
            s.require_within(error=norm_error, bound=norm_bound, what=f"at position {position}: the norm changed",
                             position=position)


# The claim is about half precision: it runs in both, whatever dtypes the record lists; an error is a violation.
@pytest.mark.far_positions
@pytest.mark.claim("ROPE-11", kinds=("rotary",), dtypes=(torch.float16, torch.bfloat16), all_dtypes=True)
@given(seed=draws.seeds)
@example(seed=0)
def test_half_precision_keeps_relative_offset(record, dtype, device, seed):
    """Holds when angles are formed in fp32: fp16 and bf16 cannot even represent p·θ past 2048 and 256.
    Precision is blamed for the part of the error that depends on the dtype only: where the half
    dtype exceeds its bound, the same check in float32 (float64 for a record without float32), on
    the same draws, gives the error the encoder has anyway (a table that wraps, a clamp, a length-dependent scale
    are ROPE-10a's)."""
    far_positions = _far_positions(record, within_table=True)
    reference = next((d for d in (torch.float32, torch.float64) if d in record.limits.dtypes), None)
    q, k = _far_inputs(record, dtype, device, seed)
    measured, done = _far_errors(record, dtype, device, q, k, far_positions), 0

    def anyway_at(position):
        """The reference dtype's errors at ``position``; None where it raised there or before."""
        anyway = _errors_anyway(record, reference, device, seed, tuple(far_positions))
        return (0.0, 0.0) if reference is None else anyway.get(position)

    while True:
        try:
            position, error, bound, norm_error, norm_bound = next(measured)
        except StopIteration:
            return
        except s.ClaimViolation as violation:  # the call at the next position raised: precision's unless
            if getattr(violation, "near", False):  # the precise dtype's does; near positions are never excused
                raise
            if anyway_at(far_positions[done]) is None:
                return
            raise
        done += 1
        if error <= bound and (norm_error is None or norm_error <= norm_bound):
            continue
        # Past the bound: the reference dtype's error on the same draws is what the encoder has anyway.
        if anyway_at(position) is None:
            return  # the precise dtype fails first, here or before: not precision's
        logit_anyway, norm_anyway = anyway_at(position)
        if not all(math.isfinite(v) for v in (logit_anyway, norm_anyway or 0.0)):
            return  # not finite in the precise dtype too: not a precision defect (ROPE-10a owns it)
        s.require_within(error=error - logit_anyway, bound=bound, position=position, error_in_precise_dtype=logit_anyway,
                         what=f"at position {position}: ⟨f(q, P), f(k, P − δ)⟩ ≠ ⟨f(q, δ), f(k, 0)⟩ by more "
                              f"in {str(dtype)[6:]} than in {str(reference)[6:]}")
        if norm_error is not None:
            s.require_within(error=norm_error - norm_anyway, bound=norm_bound, position=position,
                             error_in_precise_dtype=norm_anyway,
                             what=f"at position {position}: the norm changed, more in {str(dtype)[6:]} "
                                  f"than in {str(reference)[6:]}")
