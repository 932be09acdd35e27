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
    module = s.build(record, dtype)
    cfg = s.SPEC_CONFIG
    expected_count = cfg.max_len * cfg.d_model
    if trainable_count(module) != expected_count:
        s.violated("trainable parameter count differs from max_len × d_model",
                   observed=trainable_count(module), expected=expected_count)
    positions = torch.tensor([0, 5, cfg.max_len - 1, 5])
    x = s.randn(s.input_shape(record, 2, 4), seed=3, dtype=dtype)
    rows = module(torch.zeros_like(x), positions)  # E[p] alone
    with torch.no_grad():
        y = module(x, positions)
    tol = record.tolerance(dtype)
    s.require_within(error=s.max_error(y, x + rows), bound=tol.bound(float(y.abs().max())),
                     what="y − x is not the same table row for every input")
    if s.max_error(rows[0, 1], rows[0, 3]) != 0.0 or s.max_error(rows[0, 0], rows[0, 1]) == 0.0:
        s.violated("E[p] is not a function of the position alone")
    rows.sum().backward()
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads or not any(bool(g.abs().sum() > 0) for g in grads):
        s.violated("the table received no gradient")


@pytest.mark.claim("ROPE-5", kinds=("rotary",))
def test_rotary_has_no_trainable_parameters(record):
    module = s.build(record)
    count = trainable_count(module)
    if count:
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        s.violated("has trainable parameters", observed=count, expected=0, parameters=names)
