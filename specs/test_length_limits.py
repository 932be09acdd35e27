"""Behaviour past the maximum length.

* ABS-2 (000 §2.1 tip, §4.2): a learnable table refuses positions ``p ≥ max_len`` with an error naming the limit.
* ABS-4 (000 §2.2): the sinusoidal encoding is defined at any position: ``pe[p, 2i] = sin(p θ_i)``,
  ``pe[p, 2i+1] = cos(p θ_i)`` up to ``p = 10^6``.
* ROPE-9 (000 §3.2, 004 §5.2): caching sin/cos changes no result: outputs equal the float64
  formula before the cache grows, past it, for a sequence that straddles its end, after it grew,
  and when decoding token by token with a KV-cache ``offset``.
* ROPE-10a (000 §4.2, 004 §1.1) and ROPE-11 (004 §10.2): at positions 10^2 … 10^6 the output
  equals the float64 ``R_P q``, the logits ``⟨f(q, P), f(k, P − δ)⟩`` equal the float64
  ``⟨q, R_δ k⟩`` (a table that wraps or saturates keeps these) and norms are kept, within the
  dtype's declared tolerance, which grows with the largest angle (fp32 angles carry ~2^-24·p rad).
  ROPE-11 runs this in float16 and bfloat16: it holds when angles are formed in fp32.
"""

import pytest
import torch
from hypothesis import example, given

from specs import strategies as draws
from specs import support as s


@pytest.mark.claim("ABS-2", kinds=("additive", "rotary"))
def test_positions_past_the_table_raise(record):
    module = s.build(record)
    cfg = s.SPEC_CONFIG
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    last = torch.tensor([0, 1, 2, cfg.max_len - 1])
    module(x, last)  # the last row is valid
    for what, call in (
        (f"position {cfg.max_len}", lambda: module(x, torch.tensor([0, 1, 2, cfg.max_len]))),
        (f"offset {cfg.max_len - 2} with 4 tokens", lambda: module(x, None, offset=cfg.max_len - 2)),
    ):
        try:
            out = call()
        except ValueError as error:
            if "max_len" not in str(error):
                s.violated(f"{what}: the error does not name max_len", message=str(error))
            continue
        s.violated(f"{what}: no error past max_len={cfg.max_len}, returned silent garbage",
                   returned_shape=tuple(out.shape))


@pytest.mark.claim("ABS-4", kinds=("additive",))
@given(seed=draws.seeds)
@example(seed=0)
def test_sinusoidal_is_defined_far_past_any_table(record, dtype, seed):
    module = s.build(record, dtype)
    positions = torch.tensor([0, 1, 511, 512, 10**4, 10**5, 10**6])
    positions = positions[torch.randperm(len(positions), generator=torch.Generator().manual_seed(seed))]
    x = torch.zeros(s.input_shape(record, 1, len(positions)), dtype=dtype)
    with torch.no_grad():
        pe = module(x, positions).to(torch.float64)
    theta = s.reference_frequencies(s.SPEC_CONFIG.d_model, record.geometry.base if record.geometry else 10000.0)
    angles = positions.to(torch.float64)[:, None] * theta
    expected = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[None]
    s.require_within(
        error=s.max_error(pe, expected),
        bound=record.tolerance(dtype).bound(1.0, s.max_angle(positions)),
        what="pe[p] differs from sin/cos(p·θ_i) far past any table",
    )


def _compare_to_formula(record, module, x, positions, dtype, what, **kwargs):
    with torch.no_grad():
        y = module(x, positions, **kwargs)
    seq = x.shape[1]
    p = positions if positions is not None else torch.arange(kwargs.get("offset", 0), kwargs.get("offset", 0) + seq)
    p = p if p.dim() == 2 else p[None]
    expected = s.reference_rotation(s.as_heads(x), p, record.geometry, s.SPEC_CONFIG.head_dim)
    s.require_within(
        error=s.max_error(s.as_heads(y), expected),
        bound=record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(p, record.geometry)),
        what=what,
    )
    return y


@pytest.mark.claim("ROPE-9", kinds=("rotary",))
def test_cache_changes_no_result(record, dtype, device):
    cfg = s.SPEC_CONFIG
    module = s.build(record, dtype, device)
    x = s.randn(s.input_shape(record, 2, 8), seed=5, dtype=dtype, device=device)
    first = _compare_to_formula(record, module, x, None, dtype, "inside the initial cache", offset=3)
    _compare_to_formula(record, module, x, None, dtype, "a sequence straddling the cache end",
                        offset=cfg.max_len - 4)
    _compare_to_formula(record, module, x, None, dtype, "far past the cache", offset=7 * cfg.max_len + 5)
    per_batch = torch.stack((torch.arange(8) * 37 + 1, torch.arange(8) * 611 + 2))
    _compare_to_formula(record, module, x, per_batch, dtype, "per-batch positions past the cache")
    again = _compare_to_formula(record, module, x, None, dtype, "inside the cache after it grew", offset=3)
    if s.max_error(again, first) > record.tolerance(dtype).bound(float(first.abs().max())):
        s.violated("the same call changed result after the cache grew",
                   error=s.max_error(again, first))
    # KV-cache decoding: token t alone at offset t equals position t of the full sequence.
    full = _compare_to_formula(record, module, x, None, dtype, "the full sequence", offset=cfg.max_len - 3)
    for t in range(x.shape[1]):
        with torch.no_grad():
            step = module(x[:, t : t + 1], None, offset=cfg.max_len - 3 + t)
        s.require_within(error=s.max_error(step, full[:, t : t + 1]),
                         bound=record.tolerance(dtype).bound(float(full.abs().max())),
                         what=f"decoding token {t} with offset {cfg.max_len - 3 + t} differs from the full sequence")


def _far_position_check(record, dtype, device, seed):
    """At each far position, nearest first, against float64: f(q, P) = R_P q itself, the logits
    (ROPE-4) and the norm (ROPE-3). Raises at the first failure, naming the position."""
    module = s.build(record, dtype, device)
    tol = record.tolerance(dtype)
    q = s.randn(s.input_shape(record, 1, len(s.DELTAS)), seed, dtype, device)
    k = s.randn(s.input_shape(record, 1, len(s.DELTAS)), seed + 1, dtype, device)
    q64, k64 = s.as_heads(q).to(torch.float64), s.as_heads(k).to(torch.float64)
    deltas = torch.tensor(s.DELTAS, device=device)
    # ⟨R_P q, R_{P−δ} k⟩ = ⟨R_δ q, R_0 k⟩, both in the encoder's output layout, in float64.
    rotated_q = s.reference_rotation(q64, deltas[None], record.geometry, q64.shape[-1])
    unrotated_k = s.reference_rotation(k64, torch.zeros_like(deltas)[None], record.geometry, k64.shape[-1])
    expected = (rotated_q * unrotated_k).sum(-1)
    scale = float((q64.norm(dim=-1) * k64.norm(dim=-1)).max())
    for position in s.FAR_POSITIONS:
        m = torch.full((len(s.DELTAS),), position, device=device)
        n = m - deltas
        with torch.no_grad():
            fq, fk = s.as_heads(module(q, m)).to(torch.float64), s.as_heads(module(k, n)).to(torch.float64)
        bound = tol.bound(scale, s.max_angle(m, record.geometry))
        absolute = s.reference_rotation(q64, m[None], record.geometry, q64.shape[-1])
        s.require_within(error=s.max_error(fq, absolute),
                         bound=tol.bound(float(absolute.abs().max()), s.max_angle(m, record.geometry)),
                         what=f"at position {position}: f(q, P) ≠ R_P q (float64)", position=position)
        s.require_within(error=float(((fq * fk).sum(-1) - expected).abs().max()), bound=bound,
                         what=f"at position {position}: ⟨f(q, P), f(k, P − δ)⟩ ≠ ⟨q, R_δ k⟩ (float64)", position=position)
        norm_error = float((fq.norm(dim=-1) - q64.norm(dim=-1)).abs().max())
        s.require_within(error=norm_error, bound=tol.bound(float(q64.norm(dim=-1).max())),
                         what=f"at position {position}: the norm changed", position=position)


@pytest.mark.claim("ROPE-10a", kinds=("rotary",), dtypes=(torch.float32, torch.float64))
@given(seed=draws.seeds)
@example(seed=0)
def test_relative_offset_and_norm_hold_far_past_any_table(record, dtype, device, seed):
    _far_position_check(record, dtype, device, seed)


@pytest.mark.claim("ROPE-11", kinds=("rotary",), dtypes=(torch.float16, torch.bfloat16))
@given(seed=draws.seeds)
@example(seed=0)
def test_half_precision_keeps_relative_offset(record, dtype, device, seed):
    """Holds when angles are formed in fp32: fp16 and bf16 cannot even represent p·θ past 2048 and 256."""
    _far_position_check(record, dtype, device, seed)


@pytest.mark.claim("ROPE-9", kinds=("rotary",))
def test_one_module_serves_every_dtype(record, device):
    """A cache must be keyed by dtype and device: one module, called in each declared dtype in
    turn (and again after ``.to()``), gives the formula every time."""
    cfg = s.SPEC_CONFIG
    module = s.build(record, record.dtypes[0], device)
    order = list(record.dtypes) + list(reversed(record.dtypes))
    for step, dtype in enumerate(order):
        if step == len(record.dtypes):
            module = module.to(record.dtypes[-1])
        x = s.randn(s.input_shape(record, 1, 6), seed=step, dtype=dtype, device=device)
        _compare_to_formula(record, module, x, None, dtype, f"call {step + 1} in {dtype} after calls in "
                            f"{[str(d) for d in order[:step]]}", offset=cfg.max_len - 2)
