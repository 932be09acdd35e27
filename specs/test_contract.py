"""The calling contract (matrix row ``contract``), on every encoder.

* ``y = f(x)`` keeps the shape, dtype and device of ``x``, is finite and leaves ``x`` untouched;
* bad input raises ``TypeError``/``ValueError`` naming the broken limit: non-float
  dtype, wrong rank, positions of the wrong shape or negative, a negative offset.
"""

import pytest
import torch

from specs import support as s

CONTRACT = "contract"


def _call(record, module, x, positions=None, **kwargs):
    return module(x, positions, **kwargs)


@pytest.mark.claim(CONTRACT)
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
        s.violated("non-finite output")
    if not torch.equal(x, before):
        s.violated("the input was modified in place")


def _expect_error(record, what, call, error_type, words):
    try:
        call()
    except error_type as error:
        if not any(w in str(error).lower() for w in words):
            s.violated(f"{what}: the {error_type.__name__} does not name the limit",
                       message=str(error), expected_words=words)
        return
    except Exception as error:  # noqa: BLE001 - a wrong error type breaks the contract
        s.violated(f"{what}: raised {type(error).__name__}, expected {error_type.__name__}",
                   message=str(error))
    s.violated(f"{what}: accepted silently, expected {error_type.__name__}")


@pytest.mark.claim(CONTRACT)
def test_rejects_non_float_input(record):
    module = s.build(record)
    x = torch.ones(s.input_shape(record, 1, 4), dtype=torch.int64)
    _expect_error(record, "int64 input", lambda: _call(record, module, x), TypeError, ("float",))


@pytest.mark.claim(CONTRACT)
def test_rejects_wrong_rank(record):
    module = s.build(record)
    x = s.randn((1, *s.input_shape(record, 1, 4)), seed=0)
    _expect_error(record, "input with an extra dimension", lambda: _call(record, module, x), ValueError, ("rank",))


@pytest.mark.claim(CONTRACT)
def test_rejects_positions_of_wrong_shape(record):
    module = s.build(record)
    x = s.randn(s.input_shape(record, 2, 4), seed=0)
    bad = torch.arange(5)
    _expect_error(record, "positions of length 5 for seq 4", lambda: _call(record, module, x, bad),
                  ValueError, ("shape",))


@pytest.mark.claim(CONTRACT)
def test_rejects_negative_positions(record):
    module = s.build(record)
    x = s.randn(s.input_shape(record, 1, 4), seed=0)
    bad = torch.tensor([0, 1, -2, 3])
    _expect_error(record, "a negative position", lambda: _call(record, module, x, bad),
                  ValueError, ("negative",))
    _expect_error(record, "a negative offset", lambda: _call(record, module, x, offset=-1),
                  ValueError, ("negative",))

