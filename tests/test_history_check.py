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


class KeyedByLength(RotaryEmbedding):
    """cos/sin cached by the call's length: a later call of that length gets the first one's angles."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.by_length = {}

    def cos_sin(self, positions, dtype):
        key = (positions.shape[-1], dtype)
        if key not in self.by_length:
            self.by_length[key] = super().cos_sin(positions, dtype)
        return self.by_length[key]


class RotatesInPlace(RotaryEmbedding):
    """A correct rotation written back into its input (the contract's defect, not a history); it
    answers a new tensor, so that an answer kept by the caller is not changed by the next call."""

    def forward(self, x, positions=None, *, offset=0):
        return x.copy_(super().forward(x, positions, offset=offset)).clone()


def _like_rope(name, cls):
    return dataclasses.replace(posenc.get("rope_interleaved"), name=name,
                               build=lambda c: cls(c.head_dim, base=c.base).to(device=c.device, dtype=c.dtype))


def test_state_kept_by_length_is_found_by_a_call_at_later_positions():
    """The same input twice hits the same cache entry; the same length at other positions does not."""
    problem = history_problem(_like_rope("keyed_by_length", KeyedByLength), "cpu")
    assert problem is not None and problem.startswith("a call at positions 7…11 on a keyed_by_length called at 0…4 "
                                                      "before differs by "), problem
    assert problem.endswith("from a fresh one's: its output depends on the calls before"), problem


def test_an_encoder_that_edits_its_input_has_no_history():
    """Each probe call gets its own copy: an input written in place is the contract's finding, and
    the rules make the other cells its consequences (docs/reference/states.md)."""
    assert history_problem(_like_rope("rotates_in_place", RotatesInPlace), "cpu") is None


class TakesNoPositions(RotaryEmbedding):
    """A correct RoPE behind a wrapper that, like rotary-embedding-torch's xPos record, skips any
    call with explicit positions."""

    def forward(self, x, positions=None, *, offset=0):
        if positions is not None:
            from posenc.harness.references.contract import Excluded

            raise Excluded("takes no positions")
        return super().forward(x, offset=offset)


def test_an_encoder_that_skips_explicit_positions_gives_the_later_probe_no_verdict():
    """The probe at later positions reads such a skip as no verdict: it never escapes into the
    spec that asked (which then read every cell of the encoder as excluded)."""
    try:
        problem = history_problem(_like_rope("takes_no_positions", TakesNoPositions), "cpu")
    except pytest.skip.Exception as escaped:
        pytest.fail(f"the probe's skip escaped into the caller: {escaped}")
    assert problem is None
