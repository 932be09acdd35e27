"""Multi-axis RoPE: a position per axis, each axis turning the pairs it owns.

With positions ``P = (p_0, …, p_{A−1})`` per token, pair ``i`` turns by ``p_{a(i)}·θ_i`` (M-RoPE:
Qwen2-VL, arXiv 2409.12191 §2.1, sections contiguous; Qwen3-VL interleaved; axial 2D RoPE: Heo et
al., ECCV 2024 §3.2, a schedule per axis), or by ``Σ_a θ_{a,i}·p_a`` (RoPE-Mixed, Heo et al. §3.3):

* MROPE-1: ``f(x, P)`` is the float64 rotation at per-axis positions, the geometry's sections;
* MROPE-2: moving axis ``a`` by one turns exactly the pairs the declared sections give ``a`` (read
  off the outputs, so a wrong split, swapped or ignored axes are named as such);
* MROPE-3: equal ids on every axis are 1D RoPE at that id (Qwen2-VL's claim for text, about M-RoPE):
  the axis call with equal ids, and the text call, are the 1D rotation of the geometry's θ (a 2D
  RoPE's cell is a cross-check: its θ restarts on each axis);
* MROPE-4: ``⟨f(q, P), f(k, P′)⟩ = ⟨f(q, P + c), f(k, P′ + c)⟩`` for a shift ``c`` per axis, far
  shifts included (relative position in every axis, Heo et al. §3), with q and k through the
  record's own q-and-k call (``pair``, or ``cos_sin`` and ``apply``): keys on their own path;
* MROPE-5: ``‖f(x, P)‖ = ‖x‖`` per head.

Positions with an axis dimension have shape ``(axes, batch, seq)``, as transformers passes them.
"""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from specs import strategies as draws
from specs import support as s

SEQ = 6
BATCH = 2  # rows with positions of their own: a row must not take another's
MULTIAXIS = dict(kinds=("rotary",), requires=lambda r: r.geometry is not None and r.geometry.axes > 1)
#: Per-axis positions: up to an image of 4096 patches a side, and a video's time ids far out.
axis_positions = st.lists(st.integers(min_value=0, max_value=4096), min_size=3 * BATCH * SEQ,
                          max_size=3 * BATCH * SEQ)
shifts = st.lists(st.integers(min_value=0, max_value=100_000), min_size=3, max_size=3)


def per_axis(record, values, device) -> torch.Tensor:
    """``(axes, BATCH, SEQ)`` positions from a flat draw (the first ``axes·BATCH·SEQ`` values)."""
    axes = record.geometry.axes
    return torch.tensor(values[: axes * BATCH * SEQ], device=device).reshape(axes, BATCH, SEQ)


def head_dim_of(record) -> int:
    """The spec's head size, or the smallest the record's sections fit (Qwen3-VL's 6:5:5 needs 32)."""
    return s.supported_head_dim(record, s.SPEC_CONFIG.head_dim)


def build(record, dtype, device):
    head_dim = head_dim_of(record)
    return s.build(record, dtype, device, **s.heads_config(head_dim)), s.config(**s.heads_config(head_dim))


def inputs(record, seed, dtype, device, cfg, batch=BATCH):
    return s.randn(s.input_shape(record, batch, SEQ, cfg), seed, dtype, device)


def _call(module, x, positions):
    with torch.no_grad():
        return s.answered(f"a call at positions of shape {tuple(positions.shape)}", lambda: module(x, positions))


def _pair(module, q, k, q_positions, k_positions):
    """``(f_q(q, P), f_k(k, P′))`` through the record's own q-and-k call where it has one (``pair``,
    or ``cos_sin`` and its ``apply``), so that keys are read on their own path; two calls otherwise."""
    record = getattr(module, "record", None)
    if record is None:
        return _call(module, q, q_positions), _call(module, k, k_positions)
    with torch.no_grad():
        if record.calling.protocol == "pair":
            return s.answered("a pair call at per-axis positions",
                              lambda: module.library(q, k, q_positions, k_positions))
        q_cos, q_sin = s.answered("a cos_sin call at q's per-axis positions", lambda: module.library(q, q_positions))
        k_cos, k_sin = s.answered("a cos_sin call at k's per-axis positions", lambda: module.library(k, k_positions))
        return record.calling.apply(q, q, q_cos, q_sin)[0], record.calling.apply(k, k, k_cos, k_sin)[1]


@pytest.mark.claim("MROPE-1", **MULTIAXIS)
@given(seed=draws.seeds, positions=axis_positions)
@example(seed=0, positions=list(range(3 * BATCH * SEQ)))
@example(seed=1, positions=([0] * SEQ + [9] * SEQ + list(range(2 * SEQ)) + [4095, 7, 300, 1, 2048, 9] * 2)[::-1])
def test_each_pair_turns_by_the_position_on_its_axis(record, dtype, device, seed, positions):
    module, cfg = build(record, dtype, device)
    P = per_axis(record, positions, device)
    x = inputs(record, seed, dtype, device, cfg)
    y = s.as_heads(_call(module, x, P), cfg).to(torch.float64)
    expected = s.reference_rotation(s.as_heads(x, cfg), P, record.geometry, cfg.head_dim, axis_positions=True)
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(P, record.geometry)),
                     what="f(x, P) ≠ the rotation of each pair by the position on its axis")


def _pair_coordinates(layout: str, rotary_dim: int) -> list[tuple[int, int]]:
    half = rotary_dim // 2
    return [(i, i + half) if layout == "half_split" else (2 * i, 2 * i + 1) for i in range(half)]


@pytest.mark.claim("MROPE-2", **MULTIAXIS)
def test_moving_one_axis_turns_exactly_its_pairs(record, device):
    s.needs_float64(record)
    module, cfg = build(record, torch.float64, device)
    geometry, head_dim = record.geometry, cfg.head_dim
    r = geometry.rotary_dim(head_dim)
    owner = geometry.pair_axes(r).tolist()
    x = inputs(record, 0, torch.float64, device, cfg)
    P = torch.arange(geometry.axes * BATCH * SEQ, device=device).reshape(geometry.axes, BATCH, SEQ) * 5 + 3
    before = s.as_heads(_call(module, x, P), cfg)
    for axis in range(geometry.axes):
        moved = P.clone()
        moved[axis] += 1
        after = s.as_heads(_call(module, x, moved), cfg)
        changed = ((after - before).abs() > 1e-9 * float(before.abs().max())).flatten(0, -2).any(0)
        turned = [i for i, (a, b) in enumerate(_pair_coordinates(geometry.layout, r)) if changed[a] or changed[b]]
        declared = [i for i, a in enumerate(owner) if a == axis]
        if turned != declared:
            s.violated(f"moving axis {axis} by one turns pairs {turned}; the declared sections "
                       f"{geometry.sections(r)} ({geometry.axis_order}) give it pairs {declared}",
                       axis=axis, turned=turned, declared=declared)


@pytest.mark.claim("MROPE-3", **MULTIAXIS)
@given(seed=draws.seeds, positions=draws.position_lists(10**5, SEQ))
@example(seed=0, positions=[0, 1, 2, 3, 4, 5])
@example(seed=1, positions=[7, 7, 300, 4095, 65_535, 99_999])
def test_equal_ids_on_every_axis_are_one_dimensional_rope(record, dtype, device, seed, positions):
    module, cfg = build(record, dtype, device)
    p = torch.tensor(positions, device=device)
    x = inputs(record, seed, dtype, device, cfg, batch=1)
    expected = s.reference_rotation(s.as_heads(x, cfg), p.reshape(1, SEQ), record.geometry, cfg.head_dim)
    bound = record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(p, record.geometry))
    equal = p.reshape(1, 1, SEQ).expand(record.geometry.axes, 1, SEQ)
    for path, positions_given in (("the call with equal ids on every axis", equal), ("the call with text ids", p)):
        y = s.as_heads(_call(module, x, positions_given), cfg).to(torch.float64)
        s.require_within(error=s.max_error(y, expected), bound=bound, path=path,
                         what=f"{path} ≠ 1D RoPE at those ids")


@pytest.mark.claim("MROPE-4", **MULTIAXIS)
@given(seed=draws.seeds, positions=axis_positions, shift=shifts)
@example(seed=0, positions=list(range(3 * BATCH * SEQ)), shift=[1, 0, 0])
@example(seed=1, positions=list(range(3 * BATCH * SEQ)), shift=[0, 0, 100_000])
@example(seed=2, positions=[5] * (3 * BATCH * SEQ), shift=[90_000, 4_096, 17])
def test_logits_depend_only_on_the_offset_in_every_axis(record, dtype, device, seed, positions, shift):
    module, cfg = build(record, dtype, device)
    P = per_axis(record, positions, device)
    Pk = P.flip(-1)  # keys at other positions: the offsets differ per token and per axis
    c = torch.tensor(shift[: record.geometry.axes], device=device).reshape(-1, 1, 1)
    q = inputs(record, seed, dtype, device, cfg)
    k = inputs(record, seed + 1, dtype, device, cfg)

    def logits(q_positions, k_positions):
        fq, fk = (s.as_heads(t, cfg).to(torch.float64) for t in _pair(module, q, k, q_positions, k_positions))
        return (fq * fk).sum(-1), s.dot_scale(fq, fk)

    near, near_scale = logits(P, Pk)
    far, far_scale = logits(P + c, Pk + c)
    s.require_within(error=float((far - near).abs().max()),
                     bound=2 * record.tolerance(dtype).bound(max(near_scale, far_scale),
                                                             s.max_angle(P + c, record.geometry)),
                     what=f"⟨f(q, P + c), f(k, P′ + c)⟩ ≠ ⟨f(q, P), f(k, P′)⟩ for the shift c = {shift[:len(c)]}",
                     shift=shift[: len(c)])


@pytest.mark.claim("MROPE-5", **MULTIAXIS)
@given(seed=draws.seeds, positions=axis_positions)
@example(seed=0, positions=[4096] * (3 * BATCH * SEQ))
def test_the_norm_is_kept_at_per_axis_positions(record, dtype, device, seed, positions):
    module, cfg = build(record, dtype, device)
    P = per_axis(record, positions, device)
    x = inputs(record, seed, dtype, device, cfg)
    y = s.as_heads(_call(module, x, P), cfg).to(torch.float64)
    norms = s.as_heads(x, cfg).to(torch.float64).norm(dim=-1)
    s.require_within(error=float((y.norm(dim=-1) - norms).abs().max()),
                     bound=record.tolerance(dtype).bound(float(norms.max())), what="‖f(x, P)‖ ≠ ‖x‖ per head")
