"""The history check (``posenc.harness.references.contract.history_problem``): silent on every registered
encoder, which answers one input the same on every call, and loud on one that does not."""

from __future__ import annotations

import dataclasses

import pytest

import posenc
from posenc import RotaryEmbedding
from posenc.harness.references.contract import history_problem
from posenc.harness.catalogue.states import State


class Drifting(RotaryEmbedding):
    """A correct RoPE whose output shrinks by 10⁻³ on each call (the mutant
    ``rope_rescales_its_cache_every_call`` is the same defect, judged by the whole suite)."""

    calls = 0

    def forward(self, x, positions=None, *, offset=0):
        self.calls += 1
        return super().forward(x, positions, offset=offset) * (1 - 1e-3) ** self.calls


@pytest.mark.parametrize("record", posenc.records(), ids=lambda r: r.name)
def test_registered_encoders_answer_one_input_the_same_on_every_call(record):
    assert history_problem(record, "cpu") is None


def test_an_encoder_that_drifts_on_every_call_is_found():
    drifting = dataclasses.replace(
        posenc.get("rope_interleaved"), name="drifting_rope",
        build=lambda c: Drifting(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype))
    problem = history_problem(drifting, "cpu")
    assert problem is not None and "call 2" in problem and "drifting_rope" in problem, problem


def test_encoders_the_history_claim_is_not_about_are_not_probed():
    assert posenc.get("learnable").declared("ROPE-9").status == State.NA
    assert history_problem(posenc.get("learnable"), "cpu") is None
