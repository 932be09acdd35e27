"""From a spec function to its cases: one per selected encoder (and dtype) its claim applies to.

A spec is a test marked ``@pytest.mark.claim("ID", kinds=(...), requires=..., dtypes=...)`` that
takes ``record`` (and optionally ``dtype`` and ``device``). :func:`spec_params` makes a case for
every selected record to which the claim applies. Each case carries its encoder's xdist group and,
where the record declares the claim refuted for this spec and dtype, a strict expected failure:
the same declaration the judge reads (:class:`SpecCase`), rendered for pytest's own counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from ..catalogue.claims import CLAIMS, CONTRACT, ClaimViolation, NoClearError
from ..catalogue.records import EncoderRecord


def claim_of(node) -> tuple[str, dict] | None:
    """The claim a spec decides, from its ``claim`` marker, and the marker's options."""
    marker = node.get_closest_marker("claim")
    if marker is None:
        return None
    claim = marker.args[0]
    if claim not in CLAIMS and claim != CONTRACT:
        raise pytest.UsageError(f"{node.nodeid}: unknown claim {claim!r}")
    return claim, marker.kwargs


@dataclass(frozen=True)
class SpecCase:
    """One spec on one encoder (in one dtype): what the judge compares the spec's result with."""

    claim: str
    record: EncoderRecord
    spec: str  # the spec function's name
    dtype: torch.dtype | None = None

    @property
    def expects_refutation(self) -> bool:
        return self.record.declared(self.claim).expects_failure(self.spec, self.dtype)

    @property
    def excused(self) -> type[BaseException]:
        """The error a declared refutation accepts: a library's contract refutation excuses only
        a missing or unclear error, never silent garbage; published code is judged as it is."""
        declared = self.record.declared(self.claim)
        return NoClearError if self.claim == CONTRACT and not declared.garbage else ClaimViolation


def case_of(item) -> SpecCase | None:
    """The case ``item`` runs, or None where it is no spec on an encoder record."""
    callspec = getattr(item, "callspec", None)
    found = claim_of(item)
    if found is None or callspec is None or "record" not in callspec.params:
        return None
    return SpecCase(found[0], callspec.params["record"], item.originalname, callspec.params.get("dtype"))


def _marks(case: SpecCase) -> list:
    group = pytest.mark.xdist_group(case.record.name)
    if not case.expects_refutation:
        return [group]
    declared = case.record.declared(case.claim)
    where = f" in {str(case.dtype).removeprefix('torch.')}" if declared.dtypes else ""
    return [group, pytest.mark.xfail(strict=True, raises=case.excused,
                                     reason=f"{case.claim} refuted{where} as declared: {declared.reason}")]


def spec_params(spec: str, takes_dtype: bool, records, claim: str, marker: dict) -> list:
    """The cases of ``spec`` on ``records``, as ``pytest.param`` values of ``record`` (and ``dtype``)."""
    kinds, requires = marker.get("kinds"), marker.get("requires")
    params = []
    for record in records:
        if not record.applies(claim) or (kinds and record.kind not in kinds) or (requires and not requires(record)):
            continue
        if not takes_dtype:
            params.append(pytest.param(record, id=record.name, marks=_marks(SpecCase(claim, record, spec))))
            continue
        dtypes = marker["dtypes"] if marker.get("all_dtypes") else \
            [d for d in record.limits.dtypes if d in marker.get("dtypes", record.limits.dtypes)]
        for dtype in dtypes:
            params.append(pytest.param(record, dtype, id=f"{record.name}-{str(dtype).removeprefix('torch.')}",
                                       marks=_marks(SpecCase(claim, record, spec, dtype))))
    return params
