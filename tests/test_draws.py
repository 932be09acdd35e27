"""How many Hypothesis draws a case makes (``posenc.harness.cases.execution.sized_draws``): the profile's
in float32 and float64, half as many in a half-precision repeat of a float32 case, all of them
where the claim is about half precision itself, and only the pinned examples where a far-position
spec meets an encoder reached through a prefix."""

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from posenc.harness.cases import execution
from posenc.harness.cases.parametrization import SpecCase
from posenc.harness.catalogue.registry import records

PROFILE_DRAWS = 12


@settings(max_examples=PROFILE_DRAWS)
@given(seed=st.integers())
def _spec(seed):
    pass


class _Item:
    """The parts of a pytest item that ``sized_draws`` reads."""

    def __init__(self, **markers):
        self.obj, self.markers = _spec, {name: getattr(pytest.mark, name)(**kwargs).mark
                                         for name, kwargs in markers.items()}

    def get_closest_marker(self, name):
        return self.markers.get(name)


def _record(name):
    return next(r for r in records() if r.name == name)


def _draws(item, record, dtype):
    with execution.sized_draws(item, SpecCase("ROPE-4", record, "_spec", dtype)):
        inside = _spec._hypothesis_internal_use_settings
    assert _spec._hypothesis_internal_use_settings.max_examples == PROFILE_DRAWS, "the spec's settings are restored"
    return inside.max_examples, inside.phases


@pytest.mark.parametrize("dtype, expected", [(torch.float32, PROFILE_DRAWS), (torch.float64, PROFILE_DRAWS),
                                             (torch.float16, PROFILE_DRAWS // 2), (torch.bfloat16, PROFILE_DRAWS // 2)])
def test_a_half_precision_repeat_makes_half_the_draws(dtype, expected):
    assert _draws(_Item(claim={}), _record("rope_interleaved"), dtype)[0] == expected


def test_a_claim_about_half_precision_makes_all_its_draws():
    item = _Item(claim={"dtypes": (torch.float16, torch.bfloat16)})
    assert _draws(item, _record("rope_interleaved"), torch.float16)[0] == PROFILE_DRAWS


def test_a_far_position_spec_on_a_prefix_encoder_runs_its_pinned_examples_only():
    prefix = next(r for r in records() if r.calling.positions == "none" and r.kind == "rotary")
    assert _draws(_Item(claim={}, far_positions={}), prefix, torch.float32)[1] == (Phase.explicit,)
    assert Phase.generate in _draws(_Item(claim={}, far_positions={}), _record("rope_interleaved"), torch.float32)[1]
