"""Parameter counts.

* ABS-1 (000 §2.1): ``y = x + E[p]`` with a trainable table ``E`` of ``max_len × d_model`` parameters.
* ROPE-5 (004 §1.1): RoPE has no trainable parameters.
"""

import pytest
import torch

from specs.support import SPEC_CONFIG, build, input_shape, max_error, randn, reproducer, require_within, violated


def trainable_count(module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


@pytest.mark.claim("ABS-1", kinds=("additive",))
def test_learnable_adds_a_trainable_table_row(record, dtype):
    module = build(record, dtype)
    cfg = SPEC_CONFIG
    expected_count = cfg.max_len * cfg.d_model
    repro = reproducer("test_learnable_adds_a_trainable_table_row", record, dtype=dtype)
    if trainable_count(module) != expected_count:
        violated(record, "ABS-1", "trainable parameter count differs from max_len × d_model",
                 observed=trainable_count(module), expected=expected_count, reproducer=repro)
    positions = torch.tensor([0, 5, cfg.max_len - 1, 5])
    x = randn(input_shape(record, 2, 4), seed=3, dtype=dtype)
    rows = module(torch.zeros_like(x), positions)  # E[p] alone
    with torch.no_grad():
        y = module(x, positions)
    tol = record.tolerance(dtype)
    require_within(record, "ABS-1", error=max_error(y, x + rows), bound=tol.bound(float(y.abs().max())),
                   what="y − x is not the same table row for every input", repro=repro)
    if max_error(rows[0, 1], rows[0, 3]) != 0.0 or max_error(rows[0, 0], rows[0, 1]) == 0.0:
        violated(record, "ABS-1", "E[p] is not a function of the position alone", reproducer=repro)
    rows.sum().backward()
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads or not any(bool(g.abs().sum() > 0) for g in grads):
        violated(record, "ABS-1", "the table received no gradient", reproducer=repro)


@pytest.mark.claim("ROPE-5", kinds=("rotary",))
def test_rotary_has_no_trainable_parameters(record):
    module = build(record)
    count = trainable_count(module)
    if count:
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        violated(record, "ROPE-5", "has trainable parameters", observed=count, expected=0, parameters=names,
                 reproducer=reproducer("test_rotary_has_no_trainable_parameters", record))
