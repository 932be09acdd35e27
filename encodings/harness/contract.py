"""Cells that cannot be judged: an encoder that breaks the calling contract, or that hung, or
a measurement too noisy to decide.

Before a spec of any catalogue claim runs, the encoder is called once at the specs'
configuration (cached per encoder, dtype and device). If its output is not a tensor of the
input's shape, every spec would fail on shapes, not on the claim: the cell is
*blocked by the contract*, and the ``contract`` row says why. After a spec times out, the
encoder's remaining specs are blocked too, so the run moves on. A performance spec whose
confidence interval contains its bar raises :class:`Undecided` instead of a verdict.
"""

from __future__ import annotations

import pytest
import torch

from .protocols import build_subject
from .records import SPEC_CONFIG, EncoderRecord
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


_PROBES: dict[tuple[str, str, str], str | None] = {}


def contract_problem(record: EncoderRecord, dtype: torch.dtype | None, device: str) -> str | None:
    """Why ``record`` breaks the shape contract at the specs' configuration, or None."""
    dtype = dtype or torch.float32
    key = (record.name, str(dtype), device)
    if key not in _PROBES:
        _PROBES[key] = _probe(record, dtype, device)
    return _PROBES[key]


def _probe(record: EncoderRecord, dtype: torch.dtype, device: str) -> str | None:
    try:
        module = build_subject(record, **{**SPEC_CONFIG.__dict__, "dtype": dtype, "device": device})
        x = randn(record.input_shape(2, 5, SPEC_CONFIG), seed=0, dtype=dtype, device=device)
        with torch.no_grad():
            y = module(x)
    except Exception:  # noqa: BLE001 - a crash is the specs' to report, cell by cell
        return None
    if not isinstance(y, torch.Tensor):
        return f"{record.name} returns {type(y).__name__}, not a tensor"
    if tuple(y.shape) != tuple(x.shape):
        return f"{record.name} maps shape {tuple(x.shape)} to {tuple(y.shape)}; the output must keep the input's shape"
    return None
