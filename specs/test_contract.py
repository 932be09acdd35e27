"""The calling contract (matrix row ``contract``), on every encoder.

* ``y = f(x)`` keeps the shape, dtype and device of ``x``, is finite (at 5 positions, and at every
  position of a ``max_len`` call) and leaves ``x`` untouched;
* bad input raises an error whose message names the broken limit: non-float dtype, wrong rank,
  positions of the wrong shape or negative, a negative offset. The message is judged, not the
  exception's type: an ``IndexError`` that says which limit was passed is clear, a ``ValueError``
  that does not is not. Accepting bad input silently is always reported, even where a record
  declares that its library validates no input (a contract refutation covers the clear-error
  specs only when they raise).
"""

import pytest
import torch

from posenc.harness.verdicts.primary import IN_PLACE
from specs import support as s

TENSOR_KINDS = ("additive", "rotary", "attention")  # a bias takes positions, not x: test_alibi

CONTRACT = "contract"
NEGATIVE = ("negative", "non-negative", ">= 0", "≥ 0")


def _call(record, module, x, positions=None, **kwargs):
    return module(x, positions, **kwargs)


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS)
def test_output_keeps_shape_dtype_device(record, dtype, device):
    module = s.build(record, dtype, device)
    x = s.randn(s.input_shape(record, 2, 5), seed=1, dtype=dtype, device=device)
    before = x.clone()
    with torch.no_grad():
        y = _call(record, module, x)
    if not isinstance(y, torch.Tensor):
        s.violated(f"returned {type(y).__name__}, expected a tensor")
    observed = (tuple(y.shape), y.dtype, y.device.type)
    expected = (tuple(x.shape), x.dtype, x.device.type)
    if observed != expected:
        s.violated("shape, dtype or device changed", observed=observed, expected=expected)
    if not bool(torch.isfinite(y).all()):
        s.violated("non-finite output", length=x.shape[1])
    if not torch.equal(x, before):
        s.violated(IN_PLACE)  # primary: every other failure of this encoder follows from it
    length = s.position_cap(record, s.SPEC_CONFIG.max_len - 1) + 1  # finite at every position of a table
    x = s.randn(s.input_shape(record, 1, length), seed=2, dtype=dtype, device=device)
    with torch.no_grad():
        y = _call(record, module, x)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        s.violated("shape changed", length=length, observed=getattr(y, "shape", type(y).__name__),
                   expected=tuple(x.shape))
    finite = torch.isfinite(y).reshape(1, length, -1).all(-1)[0]
    if not bool(finite.all()):
        first = int((~finite).nonzero()[0])
        s.violated(f"non-finite output in a call of length {length}, from position {first}", first_position=first)


def _expect_error(record, what, call, words, garbage=None, answer_is_judged_elsewhere=False, convention=("", {})):
    """``call`` must raise an error whose message names the limit (one of ``words``). Returning
    silently is silent garbage when ``garbage(out)`` names why; otherwise it is :class:`NoClearError`.
    ``answer_is_judged_elsewhere``: an answer is another claim's to report; only a message is judged.
    ``convention``: what a silent answer that is not garbage matches, and ``{"declaration": …}`` for it."""
    try:
        out = call()
    except Exception as error:  # noqa: BLE001 - any error type is fine if its message names the limit
        if not any(w in str(error).lower() for w in words):
            s.no_clear_error(f"{what}: the {type(error).__name__} does not name the limit",
                             message=s.shorten(str(error)), expected_words=words)
        return
    if answer_is_judged_elsewhere:
        return
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    why = garbage(out) if garbage is not None else None
    if why:
        s.violated(f"{what}: silent garbage, {why} (returned {shape}, no error)")
    said, declaration = convention
    s.no_clear_error(f"{what}: accepted silently (returned {shape}), expected an error naming the limit{said}",
                     **declaration)


def _not_the_rotation_at(record, x, positions):
    """Why a silent result at (negative) ``positions`` is garbage: it is not ``R_p x`` there (a
    table that wrapped to its end, say). None where it is the rotation at ``p``, where no geometry
    says, or, for positions with negative ones among them, where the rotation is wrong at the
    non-negative ones too: a wrong θ, pairing or offset is the rotation claims' to blame (ROPE-1),
    not a negative position's."""
    if record.geometry is None or record.kind != "rotary":
        return lambda out: f"{record.name} has no rotation to compare with"

    def check(out):
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:  # an empty or cut answer is garbage too
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return f"an output of shape {shape} for an input of shape {tuple(x.shape)}"
        p = torch.as_tensor(positions).reshape(1, -1)
        expected = s.reference_rotation(s.as_heads(x), p, record.geometry, s.SPEC_CONFIG.head_dim)
        per_token = (s.as_heads(out).to(expected.dtype) - expected).abs().flatten(2).amax(dim=(0, 2))
        bound = record.tolerance(x.dtype).bound(float(expected.abs().max()), s.max_angle(p.abs(), record.geometry))
        if not float(per_token.max()) > bound:
            return None
        kept = p[0] >= 0
        if not bool(kept.all()) and bool(kept.any()) and float(per_token[kept].max()) > bound:
            return None  # wrong at p ≥ 0 too: not the negative position's doing
        return f"not R_p x at p = {p.tolist()[0]} (error {float(per_token.max()):.3g})"
    return check


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS)
def test_rejects_non_float_input(record):
    module = s.build(record)
    x = torch.ones(s.input_shape(record, 1, 4), dtype=torch.int64)
    _expect_error(record, "int64 input", lambda: _call(record, module, x), ("float", "dtype"))


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS)
def test_rejects_wrong_rank(record):
    module = s.build(record)
    x = s.randn((1, *s.input_shape(record, 1, 4)), seed=0)
    _expect_error(record, "input with an extra dimension", lambda: _call(record, module, x),
                  ("rank", "dimension", "dims", "shape"))


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS, requires=lambda r: r.calling.positions != "none")  # no positions to check
def test_rejects_positions_of_wrong_shape(record):
    module = s.build(record)
    x = s.randn(s.input_shape(record, 2, 4), seed=0)
    bad = torch.arange(5)
    # Positions right-aligned to the tokens (the last 4 of 5, as in decoding after a cache) are a
    # convention some libraries document (x-transformers): a missing error, not garbage.
    right_aligned = _not_the_rotation_at(record, x, bad[-x.shape[1]:])
    _expect_error(record, "positions of length 5 for seq 4", lambda: _call(record, module, x, bad),
                  ("shape", "length", "size"),
                  garbage=lambda out: right_aligned(out) and "the positions were sliced or ignored",
                  convention=RIGHT_ALIGNED)


#: Where a silent answer to longer positions is the rotation at their last ``seq``: the convention,
#: and the declaration that says a library takes them so.
RIGHT_ALIGNED = ("; it is the rotation at the last 4, right-aligned as x-transformers documents: declare the "
                 "contract refuted for this spec if yours does",
                 {"declaration": 'posenc.CONTRACT: posenc.refuted("takes the last seq positions", '
                                 'specs=("test_rejects_positions_of_wrong_shape",))'})


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS, requires=lambda r: r.calling.positions != "none")  # no positions to check
def test_rejects_negative_positions(record):
    module = s.build(record)
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    bad = torch.tensor([0, 1, -2, 3])
    _expect_error(record, "a negative position", lambda: _call(record, module, x, bad), NEGATIVE,
                  garbage=_not_the_rotation_at(record, x, bad))
    if record.calling.protocol == "single":  # the other protocols take explicit positions only
        _expect_error(record, "a negative offset", lambda: _call(record, module, x, offset=-1), NEGATIVE,
                      garbage=_not_the_rotation_at(record, x, torch.arange(-1, 3)))


@pytest.mark.claim(CONTRACT, kinds=TENSOR_KINDS, requires=lambda r: r.limits.table_limited and r.calling.positions != "none")
def test_positions_past_a_table_name_the_limit(record):
    """A table that stops at ``max_len`` must say so past its end. An answer instead of an error is
    ABS-2's to report where ABS-2 applies (one defect, one claim); here only the message is judged."""
    module = s.build(record)
    cfg = s.SPEC_CONFIG
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    past = torch.tensor([0, 1, 2, cfg.max_len])
    _expect_error(record, f"position {cfg.max_len} past a table of {cfg.max_len}", lambda: _call(record, module, x, past),
                  s.LIMIT_WORDS, garbage=lambda out: f"a position past max_len={cfg.max_len} was answered",
                  answer_is_judged_elsewhere=record.applies("ABS-2"))