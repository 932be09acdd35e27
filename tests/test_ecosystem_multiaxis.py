"""transformers' multi-axis rotary classes (``posenc.ecosystem.transformers_mrope``): every cell of a
spec run is what the record declares, the known upstream defect is FAIL, and nothing else is red.

Known, in the pinned transformers 5.24: ``module.to(torch.bfloat16)`` (or float16) rounds ``inv_freq``
and ``original_inv_freq`` of every multi-axis rotary class, text (Qwen2-VL … Ernie 4.5 VL) and
vision (Qwen2-VL's tower, Pixtral), as it does Llama's (``tests/test_ecosystem.py``): PATH-3 FAIL,
reproduced here without the harness. The published Qwen3.5 quarter (``hf_qwen3_5_mrope``) cannot
share 2 rotated pairs between three axes at the specs' head_dim 16: only the specs that size the head
for the record judge it (the multi-axis claims at 32), its other cells are ``n/a``.
"""

from __future__ import annotations


import pytest
import torch

import posenc.ecosystem  # noqa: F401  (registers the records)
from posenc.ecosystem.findings import MULTIAXIS_CAST_ROUNDS_FREQUENCIES, MULTIAXIS_ENCODERS, MULTIAXIS_FINDINGS
from posenc.harness.catalogue.registry import get
from posenc.harness.catalogue.states import State
from tests.spec_runs import ecosystem_run, needs

pytestmark = pytest.mark.xdist_group("ecosystem")
SURPRISES = {State.UNEXPECTEDLY_FAILING, State.CRASHED, State.FAILING_AND_CRASHED, State.TIMED_OUT,
             State.UNEXPECTEDLY_HOLDS, State.BLOCKED}
#: Records that compute no head of 16: a cell whose every spec is excluded reads n/a, and the contract, its
#: bad-input specs (the refutation's aim) excluded, holds on gradcheck alone, which sizes the head itself.
NOT_AT_HEAD_DIM_16 = {"hf_qwen3_5_mrope": {"contract": State.HOLDS}}


@pytest.fixture(scope="module")
def multiaxis_run(tmp_path_factory):
    return ecosystem_run(tmp_path_factory.mktemp("ecosystem-multiaxis"), MULTIAXIS_ENCODERS)


def test_every_cell_is_as_declared_and_only_the_cast_is_red(multiaxis_run):
    verdicts, result = multiaxis_run
    names = verdicts["header"]["encoders"]
    assert set(names) == set(MULTIAXIS_CAST_ROUNDS_FREQUENCIES) | set(NOT_AT_HEAD_DIM_16), names
    assert {verdicts["kinds"][name] for name in names} == {"multiaxis"}
    wrong = {}
    for claim, row in verdicts["matrix"].items():
        for name, state in row.items():
            record = get(name)
            if (name, claim) in MULTIAXIS_FINDINGS:
                expected = State.UNEXPECTEDLY_FAILING
            else:
                expected = NOT_AT_HEAD_DIM_16.get(name, {}).get(claim, record.declared(claim).status)
            excluded = name in NOT_AT_HEAD_DIM_16 and State(state) == State.NA
            if State(state) != expected and not excluded:
                wrong[(name, claim)] = f"{state}, declared {expected}"
    assert not wrong, wrong
    assert result.returncode == 1  # the findings are FAIL


def test_the_multiaxis_claims_are_judged_on_every_record(multiaxis_run):
    verdicts, _ = multiaxis_run
    for claim in ("MROPE-1", "MROPE-2", "MROPE-3", "MROPE-4", "MROPE-5"):
        row = verdicts["matrix"][claim]
        assert set(row.values()) == {State.HOLDS}, (claim, row)


def test_each_finding_carries_a_reproducer(multiaxis_run):
    verdicts, _ = multiaxis_run
    for encoder, claim in MULTIAXIS_FINDINGS:
        found = [o for o in verdicts["outcomes"]
                 if (o["encoder"], o["claim"]) == (encoder, claim) and o["state"] == State.UNEXPECTEDLY_FAILING]
        assert found and all("--plugin posenc.ecosystem" in o["reproducer"] for o in found), (encoder, claim)
        assert all(o["test_id"].endswith(("-bfloat16]", "-float16]")) for o in found), found


# Standalone: the library's classes and apply functions alone, no harness.
def _text_rotary(module: str, config_class: str, rotary_class: str, sections, **rope):
    import importlib

    configs = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    config = getattr(configs, config_class)(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16, num_hidden_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections, **rope})
    rotary = getattr(modeling, rotary_class)(config)
    positions = torch.arange(3000, 3015).reshape(3, 1, 5)  # T, H, W rows past bf16's exact integers

    def rotate(q):
        cos, sin = rotary(q, positions)
        return modeling.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=2)[0]

    return rotary, rotate


def _vision_rotary(name: str):
    patches = torch.stack([torch.arange(3000, 3005), torch.arange(3100, 3105)], dim=-1)  # [h, w] per patch
    if name == "qwen2_vl":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (Qwen2VLVisionRotaryEmbedding,
                                                                    apply_rotary_pos_emb_vision)

        rotary = Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(depth=1, embed_dim=64, hidden_size=64, num_heads=4))
        return rotary, lambda q: apply_rotary_pos_emb_vision(q[0], q[0], *rotary(q, patches))[0]
    from transformers import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding, apply_rotary_pos_emb

    config = PixtralVisionConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64,
                                 image_size=64, patch_size=16)
    rotary = PixtralVisionRotaryEmbedding(config)
    return rotary, lambda q: apply_rotary_pos_emb(q[0], q[0], *rotary(q, patches), unsqueeze_dim=1)[0]


CLASSES = {
    "Qwen2VLRotaryEmbedding": lambda: _text_rotary("qwen2_vl", "Qwen2VLTextConfig", "Qwen2VLRotaryEmbedding",
                                                   [2, 3, 3]),
    "Qwen2_5_VLRotaryEmbedding": lambda: _text_rotary("qwen2_5_vl", "Qwen2_5_VLTextConfig",
                                                      "Qwen2_5_VLRotaryEmbedding", [2, 3, 3]),
    "Qwen3VLTextRotaryEmbedding": lambda: _text_rotary("qwen3_vl", "Qwen3VLTextConfig", "Qwen3VLTextRotaryEmbedding",
                                                       [4, 2, 2], mrope_interleaved=True),
    "Qwen3_5TextRotaryEmbedding": lambda: _text_rotary("qwen3_5", "Qwen3_5TextConfig", "Qwen3_5TextRotaryEmbedding",
                                                       [2, 1, 1], mrope_interleaved=True, partial_rotary_factor=0.5),
    "Glm4vTextRotaryEmbedding": lambda: _text_rotary("glm4v", "Glm4vTextConfig", "Glm4vTextRotaryEmbedding",
                                                     [1, 2, 1], partial_rotary_factor=0.5),
    "Glm4vMoeTextRotaryEmbedding": lambda: _text_rotary("glm4v_moe", "Glm4vMoeTextConfig",
                                                        "Glm4vMoeTextRotaryEmbedding", [1, 2, 1],
                                                        partial_rotary_factor=0.5),
    "Ernie4_5_VLMoeTextRotaryEmbedding": lambda: _text_rotary("ernie4_5_vl_moe", "Ernie4_5_VLMoeTextConfig",
                                                              "Ernie4_5_VLMoeTextRotaryEmbedding", [3, 3, 2]),
    "Qwen2VLVisionRotaryEmbedding": lambda: _vision_rotary("qwen2_vl"),
    "PixtralVisionRotaryEmbedding": lambda: _vision_rotary("pixtral"),
}


@pytest.mark.parametrize("cast", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", list(CLASSES))
def test_module_to_half_precision_rounds_the_frequencies_without_the_harness(name, cast):
    """PATH-3 FAIL, standalone: after ``module.to(cast)`` fp32 input at positions 3000… turns by other angles."""
    needs("transformers")
    torch.manual_seed(0)
    rotary, rotate = CLASSES[name]()
    q = torch.randn(1, 5, 4, 16)
    with torch.no_grad():
        before, again = rotate(q), rotate(q)
        rotary.to(cast)
        after = rotate(q)
    assert torch.equal(before, again)  # the difference is the cast's, not the call's
    assert rotary.inv_freq.dtype == cast and rotary.original_inv_freq.dtype == cast
    assert float((after.float() - before).abs().max()) > 0.05, name  # an angle off by far more than rounding


def test_ernies_pair_order_is_the_same_in_the_geometry_and_the_built_in_module():
    """``spatial_interleaved``: two implementations of one rule, and Ernie's class read off its outputs."""
    needs("transformers")
    from posenc.encoders.multiaxis import pair_axes
    from posenc.harness.catalogue.records import RotaryGeometry

    for sections in ((2, 3, 3), (1, 2, 2), (4, 2, 2), (3, 5)):
        geometry = RotaryGeometry(axis_sections=sections, axis_order="spatial_interleaved")
        assert torch.equal(geometry.pair_axes(2 * sum(sections)), pair_axes(sections, "spatial_interleaved"))
    assert pair_axes((2, 3, 3), "spatial_interleaved").tolist() == [1, 2, 1, 2, 1, 2, 0, 0]
    for bad in ((2, 3, 2), (4,)):
        with pytest.raises(ValueError, match="spatial_interleaved"):
            RotaryGeometry(axis_sections=bad, axis_order="spatial_interleaved")
        with pytest.raises(ValueError, match="spatial_interleaved"):
            pair_axes(bad, "spatial_interleaved")
    rotary, _ = _text_rotary("ernie4_5_vl_moe", "Ernie4_5_VLMoeTextConfig", "Ernie4_5_VLMoeTextRotaryEmbedding",
                             [3, 3, 2])
    x, owners = torch.zeros(1, 1, 64), []
    base = torch.zeros(3, 1, 1, dtype=torch.long)
    cos0, _ = rotary(x, base)
    for axis in range(3):
        moved = base.clone()
        moved[axis] = 1
        cos, _ = rotary(x, moved)
        owners.append((cos[0, 0, 0::2] != cos0[0, 0, 0::2]).tolist())  # adjacent pairs: one cos per pair
    read = [next(a for a in range(3) if owners[a][i]) for i in range(8)]
    assert read == get("hf_ernie4_5vl_mrope").geometry.pair_axes(16).tolist()
