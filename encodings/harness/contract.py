"""Cells that cannot be judged: an encoder that breaks the calling contract, or that hung, or
whose output depends on its calls before, or a measurement too noisy to decide.

Before a spec of any catalogue claim runs, the encoder is called once at the specs'
configuration (cached per encoder, dtype and device). If its output is not a tensor of the
input's shape, every spec would fail on shapes, not on the claim: the cell is
*blocked by the contract*, and the ``contract`` row says why. After a spec times out, the
encoder's remaining specs are blocked too, so the run moves on. A performance spec whose
confidence interval contains its bar raises :class:`Undecided` instead of a verdict.

The history check (:func:`history_problem`) calls a fresh encoder three times on one input, in
its most precise dtype: an
encoder that is a function of its inputs answers the same each time. One that does not fails
ROPE-9 (its own spec makes the same call), once; a violation any other spec of it finds may come
from the calls that spec repeats, so it reads ``depends on ROPE-9`` (:class:`DependsOnHistory`),
never as a failure of a claim that may hold on a fresh module.
"""

from __future__ import annotations

import pytest
import torch

from .claims import HISTORY_CLAIM
from .protocols import build_subject
from .records import SPEC_CONFIG, EncoderRecord
from .states import State
from .tensors import randn


class Blocked(pytest.skip.Exception):
    """A spec not run because its encoder cannot be judged (a skip, reported as ``blocked``)."""


class SpecTimeout(BaseException):
    """A spec ran past its timeout. A ``BaseException``, so that no test framework inside the
    spec (Hypothesis retries and shrinks on ordinary failures) can catch it and run on."""


class Excluded(pytest.skip.Exception):
    """A spec that needs a configuration the record says its encoder does not support (a head_dim,
    say): a skip with the reason, counted as run, never a crash."""


class Undecided(pytest.skip.Exception):
    """A measured claim whose confidence interval straddles its bar (a skip, reported as
    ``undecided``): noise never turns a run red, in either direction."""


class DependsOnHistory(pytest.skip.Exception):
    """A violation found on an encoder whose output depends on its earlier calls (ROPE-9 fails):
    not judged, since the spec's repeated calls alone may explain it (``depends on ROPE-9``)."""


_PROBES: dict[tuple[str, str, str], str | None] = {}
_HISTORIES: dict[tuple[str, str], str | None] = {}
#: Calls of one input the history check makes on a fresh encoder.
HISTORY_CALLS = 3


def contract_problem(record: EncoderRecord, dtype: torch.dtype | None, device: str) -> str | None:
    """Why ``record`` breaks the shape contract at the specs' configuration, or None."""
    dtype = dtype or torch.float32
    key = (record.name, str(dtype), device)
    if key not in _PROBES:
        _PROBES[key] = _probe(record, dtype, device)
    return _PROBES[key]


def _fresh_subject_and_input(record: EncoderRecord, dtype: torch.dtype, device: str):
    """A fresh module at the specs' configuration and one input for it (batch 2, 5 positions)."""
    module = build_subject(record, **{**SPEC_CONFIG.__dict__, "dtype": dtype, "device": device})
    return module, randn(record.input_shape(2, 5, SPEC_CONFIG), seed=0, dtype=dtype, device=device)


def _probe(record: EncoderRecord, dtype: torch.dtype, device: str) -> str | None:
    try:
        module, x = _fresh_subject_and_input(record, dtype, device)
        with torch.no_grad():
            y = module(x)
    except Exception:  # noqa: BLE001 - a crash is the specs' to report, cell by cell
        return None
    if not isinstance(y, torch.Tensor):
        return f"{record.name} returns {type(y).__name__}, not a tensor"
    if tuple(y.shape) != tuple(x.shape):
        return f"{record.name} maps shape {tuple(x.shape)} to {tuple(y.shape)}; the output must keep the input's shape"
    return None


def history_problem(record: EncoderRecord, device: str) -> str | None:
    """How a fresh ``record`` answers one input differently on repeated calls, or None (also for an
    encoder that ROPE-9 is not about, or that cannot be called: the specs report those). Checked
    once per encoder, in its most precise dtype, where the tolerance is finest."""
    key = (record.name, device)
    if key not in _HISTORIES:
        dtype = next((d for d in (torch.float64, torch.float32) if d in record.limits.dtypes), record.limits.dtypes[0])
        _HISTORIES[key] = _history(record, dtype, device) if record.declared(HISTORY_CLAIM).status != State.NA else None
    return _HISTORIES[key]


def _history(record: EncoderRecord, dtype: torch.dtype, device: str) -> str | None:
    try:
        module, x = _fresh_subject_and_input(record, dtype, device)
        with torch.no_grad():
            answers = [module(x).to(torch.float64) for _ in range(HISTORY_CALLS)]
    except Exception:  # noqa: BLE001 - a crash is the specs' to report
        return None
    first = answers[0]
    bound = record.tolerance(dtype).bound(float(first.nan_to_num(0, 0, 0).abs().max()))
    for call, answer in enumerate(answers[1:], start=2):
        error = float((answer - first).nan_to_num(float("inf"), float("inf"), float("inf")).abs().max())
        if error > bound:
            return (f"call {call} of one input on a fresh {record.name} differs from call 1 by {error:.3g} "
                    f"(bound {bound:.3g}): its output depends on the calls before")
    return None
