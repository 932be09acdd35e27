"""Absolute encodings.

* ABS-3 (000 §2.2): ``pe[p, 2i] = sin(p θ_i)``, ``pe[p, 2i+1] = cos(p θ_i)``, deterministic, no
  trainable parameters, values in [−1, 1]; and what the formula implies: ``pe[m]·pe[n]`` depends
  only on ``m − n``, ``pe[p+k] = M_k pe[p]`` for one matrix ``M_k`` (least squares over all ``p``).
* ABS-5 (000 §1): absolute encodings express relative position poorly ("hard to model the
  distance between tokens directly"). Observable: logits ``⟨W_q(x_m + pe_m), W_k(x_n + pe_n)⟩``
  change when every position shifts, for the learnable and the sinusoidal table alike.
* ABS-6 (000 §1, §2.2 table): the learnable table's bytes grow linearly with ``max_len``; the
  sinusoidal encoding stores nothing that grows with length.
"""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from specs import strategies as draws
from specs import support as s
from posenc.harness.catalogue.states import State

ADDITIVE = ("additive",)


def table_rows(module, positions, dtype=torch.float64):
    """``pe[p]`` read through the encoder: ``f(0, p)``."""
    zeros = torch.zeros(1, len(positions), s.SPEC_CONFIG.d_model, dtype=dtype)
    with torch.no_grad():
        return module(zeros, positions)[0].to(torch.float64)


@pytest.mark.far_positions  # through a prefix (the documents' code), each draw is a call of 10^5 tokens
@pytest.mark.claim("ABS-3", kinds=ADDITIVE)
@given(positions=st.lists(st.integers(0, 10**5), min_size=1, max_size=8))
@example(positions=[0, 1, 2, 50, 99_999])
@example(positions=[4095, 4096, 65_537, 77_777])
def test_sinusoidal_formula_and_bounds(record, dtype, positions):
    p = torch.tensor(positions)
    module = s.build(record, dtype)
    pe = table_rows(module, p, dtype)
    angles = p.double()[:, None] * s.reference_frequencies(s.SPEC_CONFIG.d_model, s.SPEC_CONFIG.base)
    expected = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    s.require_within(error=s.max_error(pe, expected),
                     bound=record.tolerance(dtype).bound(1.0, s.max_angle(p)), what="pe differs from sin/cos(p·θ_i)")
    if float(pe.abs().max()) > 1.0:
        s.violated("values outside [−1, 1]", observed=float(pe.abs().max()))
    if s.max_error(table_rows(s.build(record, dtype), p, dtype), pe) != 0.0:
        s.violated("two builds give different tables: not deterministic")
    trainable = sum(q.numel() for q in module.parameters() if q.requires_grad)
    if trainable:
        s.violated("has trainable parameters", observed=trainable, expected=0)


@pytest.mark.claim("ABS-3", kinds=ADDITIVE)
@given(m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(1, 60))
@example(m=3, n=10, shift=17)
def test_sinusoidal_dot_product_depends_only_on_offset(record, m, n, shift):
    s.needs_float64(record)
    module = s.build(record, torch.float64)
    rows = table_rows(module, torch.tensor([m, n, m + shift, n + shift]))
    before, after = rows[0] @ rows[1], rows[2] @ rows[3]
    s.require_within(error=abs(float(after - before)),
                     bound=record.tolerance(torch.float64).bound(float(rows.norm(dim=-1).max()) ** 2, m + n + 2 * shift),
                     what=f"pe[m]·pe[n] changed under a common shift of {shift}")


@pytest.mark.far_positions  # through a prefix, each draw is a call of 10^5 tokens
@pytest.mark.claim("ABS-3", kinds=ADDITIVE)
@given(k=st.integers(1, 20))
@example(k=1)
@example(k=13)
def test_sinusoidal_shift_is_a_fixed_linear_map(record, k):
    """Least squares ``M_k = argmin Σ_p ‖pe[p+k] − M pe[p]‖²`` over ~200 positions; the residual must vanish.

    Positions spread over 0 … 10^5 (or the whole table) so that slow frequencies turn too and the
    fit is well conditioned; its accuracy is about eps · cond(source).
    """
    s.needs_float64(record)
    module = s.build(record, torch.float64)
    stop = s.position_cap(record, 100_000) - k
    p = torch.arange(0, stop, max(1, stop // 206))
    source, target = table_rows(module, torch.cat((p, p + k))).split(len(p))  # one call
    solution = torch.linalg.lstsq(source, target, driver="gelsd").solution
    residual = float((source @ solution - target).abs().max())
    fit_error = torch.finfo(torch.float64).eps * float(torch.linalg.cond(source)) * len(p)
    s.require_within(error=residual,
                     bound=record.tolerance(torch.float64).bound(1.0, float(stop + k)) + fit_error,
                     what=f"no single linear map takes pe[p] to pe[p+{k}] for p = 0 … {stop - 1}")


@pytest.mark.claim("ABS-5", kinds=ADDITIVE)
@given(seed=draws.seeds, offset=draws.offsets, shift=draws.shifts)
@example(seed=0, offset=0, shift=3)
def test_absolute_logits_are_not_translation_invariant(record, seed, offset, shift):
    s.needs_float64(record)
    cap = s.position_cap(record, 10**6)
    offset = min(offset, cap // 2)
    shift = min(shift, cap - offset - 8)
    module = s.build(record, torch.float64)
    d = s.SPEC_CONFIG.d_model
    x = s.randn((1, 8, d), seed, torch.float64)
    w_q, w_k = s.randn((d, d), seed + 1, torch.float64) / d**0.5, s.randn((d, d), seed + 2, torch.float64) / d**0.5

    def logits(start):
        with torch.no_grad():
            h = module(x, None, offset=start)[0]
        return (h @ w_q) @ (h @ w_k).T

    change = s.max_error(logits(offset + shift), logits(offset))
    bound = record.tolerance(torch.float64).bound(float(logits(offset).abs().max()), offset + shift + 8)
    if change <= bound:
        s.violated("logits of (x + pe) through projections were translation invariant",
                   change=change, tolerance=bound)


def static_bytes(module) -> int:
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.claim("ABS-6", kinds=ADDITIVE)
def test_table_memory_against_max_len(record):
    small, large = (static_bytes(s.build(record, torch.float32, max_len=n)) for n in (512, 4096))
    if record.declared("ABS-1").status == State.HOLDS:  # a learned table
        expected = (4096 - 512) * s.SPEC_CONFIG.d_model * 4
        if large - small != expected:
            s.violated("table bytes do not grow linearly with max_len",
                       observed=large - small, expected=expected)
    elif large != small or large > 64 * s.SPEC_CONFIG.d_model * 8:
        s.violated("a fixed encoding stores memory that grows with max_len or is not small",
                   bytes_at_512=small, bytes_at_4096=large)
