"""Attention is unchanged when every position shifts by the same offset.

* ATT-4 (000 §3.3, 004 §6.2): from ROPE-4 and ROPE-6, ``Attn(p + t) = Attn(p)``. Rotary and
  additive encoders are placed into a float64 softmax attention over ``f(q, p), f(k, p)`` and
  unrotated ``v``; attention modules are called with positions ``p`` and ``p + t``.
* LIN-2 (000 §5.2): linear attention with RoPE keeps this property.

Shift invariance alone is passed by a module that ignores positions, so both also require position
awareness, with the tokens kept in place so that a reshape mixing tokens cannot pass for it: an
attention module that takes positions must change its output when they are permuted; one that
can say what it computes without positions (``without_positions()``, as the documents'
attentions do) must differ from that. Otherwise (an encoder placed in the reference attention)
reordering the earlier tokens must change the last token's output.
* ROPE-7 (004 §7), a cross-check on the hybrid (000 §5.1): with its table zeroed, what remains is
  per-head RoPE, ``f(x, p) = R_p x`` for every head, angles from ``head_dim``. (ABS-2 and ATT-4
  run on the hybrid as cross-checks too; HYB-1 itself is not decidable by a spec.)
"""

import math

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s

SEQ = 6


def shift_change(record, dtype, device, seed, offset, shift):
    """``max |Attn(p + t) − Attn(p)|`` and the tolerance it is held to."""
    cfg = s.SPEC_CONFIG
    cap = s.position_cap(record, 10**7)
    offset = min(offset, cap // 2)
    shift = min(shift, cap - offset - SEQ)
    module = s.build(record, dtype, device)
    heads = (1, SEQ, cfg.n_heads, cfg.head_dim)
    v = s.randn(heads, seed + 2, dtype, device)
    if record.kind == "attention":
        q, k = s.randn(heads, seed, dtype, device), s.randn(heads, seed + 1, dtype, device)

        def attention(start):
            with torch.no_grad():
                return module.attend(q, k, v, None, offset=start).to(torch.float64)
    else:
        q = s.randn(s.input_shape(record, 1, SEQ), seed, dtype, device)
        k = s.randn(s.input_shape(record, 1, SEQ), seed + 1, dtype, device)

        def attention(start):
            with torch.no_grad():
                fq, fk = s.encode_pair(module, q, k, q_offset=start, k_offset=start)
            return s.reference_attention(s.as_heads(fq), s.as_heads(fk), v)

    before, after = attention(offset), attention(offset + shift)
    qn, kn = s.as_heads(q).double().norm(dim=-1).max(), s.as_heads(k).double().norm(dim=-1).max()
    logit_scale = float(qn * kn) / math.sqrt(cfg.head_dim)
    magnitude = 2 * float(v.double().abs().max()) * (1 + logit_scale)
    bound = record.tolerance(dtype).bound(magnitude, s.max_angle(offset + shift + SEQ, record.geometry))
    return float((after - before).abs().max()), bound


def reorder_change(record, dtype, device, seed, offset):
    """``max |Attn_last(reordered) − Attn_last|``: the earlier tokens are reordered and the last
    query's output compared. Without positions (or with positions that cancel) attention is a weighted
    sum over a set, so the reordering cannot change it; RoPE moves the keys' offsets and changes it."""
    cfg = s.SPEC_CONFIG
    offset = min(offset, s.position_cap(record, 10**7) - SEQ)
    module = s.build(record, dtype, device)
    heads = (1, SEQ, cfg.n_heads, cfg.head_dim)
    order = torch.tensor([*range(SEQ - 2, -1, -1), SEQ - 1], device=device)  # reversed, the last kept in place
    v = s.randn(heads, seed + 2, dtype, device)
    if record.kind == "attention":
        q, k = s.randn(heads, seed, dtype, device), s.randn(heads, seed + 1, dtype, device)

        def last_output(perm):
            with torch.no_grad():
                return module.attend(q[:, perm], k[:, perm], v[:, perm], None, offset=offset)[:, -1].to(torch.float64)
    else:
        q = s.randn(s.input_shape(record, 1, SEQ), seed, dtype, device)
        k = s.randn(s.input_shape(record, 1, SEQ), seed + 1, dtype, device)

        def last_output(perm):
            with torch.no_grad():
                fq, fk = s.encode_pair(module, q[:, perm], k[:, perm], q_offset=offset, k_offset=offset)
            return s.reference_attention(s.as_heads(fq), s.as_heads(fk), v[:, perm])[:, -1]

    identity = torch.arange(SEQ, device=device)
    before, after = last_output(identity), last_output(order)
    qn, kn = s.as_heads(q).double().norm(dim=-1).max(), s.as_heads(k).double().norm(dim=-1).max()
    magnitude = 2 * float(v.double().abs().max()) * (1 + float(qn * kn) / math.sqrt(cfg.head_dim))
    bound = record.tolerance(dtype).bound(magnitude, s.max_angle(offset + SEQ, record.geometry))
    return float((after - before).abs().max()), bound


def removal_change(record, dtype, device, seed, offset):
    """For an attention module, tokens kept in place: ``max |Attn − Attn without positions|`` where it
    offers ``without_positions()``, else ``max |Attn(p) − Attn(π(p))|`` with its positions permuted
    where it takes them; None for neither, or where it refuses permuted positions (the reorder
    check decides)."""
    cfg = s.SPEC_CONFIG
    module = s.build(record, dtype, device)
    bare = getattr(module, "without_positions", None)
    if record.kind != "attention" or (bare is None and record.calling.positions != "any"):
        return None
    offset = min(offset, s.position_cap(record, 10**7) - SEQ)
    heads = (1, SEQ, cfg.n_heads, cfg.head_dim)
    q, k, v = (s.randn(heads, seed + i, dtype, device) for i in range(3))
    positions = torch.arange(offset, offset + SEQ, device=device)
    with torch.no_grad():
        out = module.attend(q, k, v, None, offset=offset).to(torch.float64)
        if bare is not None:
            other = bare().attend(q, k, v, None, offset=offset).to(torch.float64)
        else:  # the earlier tokens' positions reversed, the last kept
            permuted = torch.cat((positions[:-1].flip(0), positions[-1:]))
            try:
                other = module.attend(q, k, v, permuted).to(torch.float64)
            except (ValueError, RuntimeError):  # it takes a contiguous run only: the reorder check decides
                return None
    qn, kn = q.double().norm(dim=-1).max(), k.double().norm(dim=-1).max()
    magnitude = 2 * float(v.double().abs().max()) * (1 + float(qn * kn) / math.sqrt(cfg.head_dim))
    return float((out - other).abs().max()), record.tolerance(dtype).bound(magnitude, s.max_angle(offset + SEQ))


def _require_shift_invariant(record, dtype, device, seed, offset, shift):
    error, bound = shift_change(record, dtype, device, seed, offset, shift)
    s.require_within(error=error, bound=bound,
                     what="shifting every position by the same offset changed the attention output")
    removed = removal_change(record, dtype, device, seed, offset)
    if removed is not None:
        if removed[0] <= removed[1]:
            s.violated("with the tokens in place, removing or permuting the positions changes nothing (RoPE has "
                       "no effect in this code), so its shift invariance says nothing about positions",
                       change=removed[0], tolerance=removed[1])
        return
    change, bound = reorder_change(record, dtype, device, seed, offset)
    if change <= bound:
        s.violated("reordering the earlier tokens left the last output unchanged: positions never reach "
                   "the attention, so its shift invariance says nothing", change=change, tolerance=bound)


EXACT_DTYPES = (torch.float32, torch.float64)  # low-precision phase errors are ROPE-11's subject


@pytest.mark.claim("ATT-4", kinds=("rotary", "additive", "attention"), dtypes=EXACT_DTYPES)
@given(seed=draws.seeds, offset=draws.offsets, shift=draws.shifts)
@example(seed=0, offset=0, shift=5)
@example(seed=1, offset=2, shift=4096)
@example(seed=2, offset=0, shift=100)  # a moderate shift, where fp32 angles still resolve small changes
@example(seed=3, offset=37, shift=1001)  # no power of two divides the offset or the shift
def test_attention_is_shift_invariant(record, dtype, device, seed, offset, shift):
    _require_shift_invariant(record, dtype, device, seed, offset, shift)


@pytest.mark.claim("LIN-2", kinds=("attention",), dtypes=EXACT_DTYPES)
@given(seed=draws.seeds, offset=draws.offsets, shift=draws.shifts)
@example(seed=0, offset=0, shift=5)
@example(seed=3, offset=37, shift=1001)
def test_linear_attention_is_shift_invariant(record, dtype, device, seed, offset, shift):
    _require_shift_invariant(record, dtype, device, seed, offset, shift)


@pytest.mark.claim("ROPE-7", kinds=("rotary",), requires=lambda r: "hybrid" in r.designs)
@given(seed=draws.seeds, offset=draws.offsets)
@example(seed=0, offset=3)
def test_hybrid_rotation_alone_is_per_head_rope(record, dtype, seed, offset):
    offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)
    module = s.build(record, dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.zero_()
        x = s.randn(s.input_shape(record, 2, SEQ), seed, dtype)
        y = s.as_heads(module(x, None, offset=offset))
    positions = torch.arange(offset, offset + SEQ)[None]
    expected = s.reference_rotation(s.as_heads(x), positions, record.geometry, s.SPEC_CONFIG.head_dim)
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(positions)),
                     what="with the table zeroed, the output is not per-head RoPE")
