"""Parameter counts.

* ABS-1 (000 §2.1): ``y = x + E[p]`` with a trainable table ``E`` of ``max_len × d_model`` parameters.
* ROPE-5 (004 §1.1): RoPE has no trainable parameters.
"""

import pytest
import torch

from specs import support as s


def trainable_count(module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


@pytest.mark.claim("ABS-1", kinds=("additive",))
def test_learnable_adds_a_trainable_table_row(record, dtype):
    """``y − x`` is compared with the row ``E[p]`` read from the module's one ``max_len × d_model``
    parameter, so a table read at the wrong row (``E[p + 1]``) cannot agree with itself; at every
    row, in one call, so that a row read wrong at some positions only is seen too."""
    module = s.build(record, dtype)
    cfg = s.SPEC_CONFIG
    expected_count = cfg.max_len * cfg.d_model
    if trainable_count(module) != expected_count:
        s.violated("trainable parameter count differs from max_len × d_model",
                   observed=trainable_count(module), expected=expected_count)
    tables = [p for p in module.parameters() if p.requires_grad and tuple(p.shape) == (cfg.max_len, cfg.d_model)]
    if len(tables) != 1:
        s.violated("no single trainable max_len × d_model table among the parameters",
                   shapes=[tuple(p.shape) for p in module.parameters()])
    table = tables[0]
    positions = torch.arange(cfg.max_len).flip(0)  # every row, not in order
    x = s.randn(s.input_shape(record, 2, cfg.max_len), seed=3, dtype=dtype)
    with torch.no_grad():
        y = module(x, positions)
    expected = x.double() + table.detach().double()[positions]
    tol = record.tolerance(dtype)
    s.require_within(error=s.max_error(y, expected), bound=tol.bound(float(expected.abs().max())),
                     what=f"y − x is not the parameter's row E[p] at every position 0 … {cfg.max_len - 1}")
    module(x, positions).sum().backward()
    if table.grad is None or not bool(table.grad[positions].abs().sum() > 0):
        s.violated("the table rows used received no gradient")


@pytest.mark.claim("ROPE-5", kinds=("rotary",))
def test_rotary_has_no_trainable_parameters(record):
    module = s.build(record)
    count = trainable_count(module)
    if count:
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        s.violated("has trainable parameters", observed=count, expected=0, parameters=names)
