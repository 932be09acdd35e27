"""Real position producers judged on their own: transformers' ``get_rope_index`` of four VLM
families and its vision-grid ids, ``DataCollatorWithFlattening``, torchtune's ``PackedDataset``,
Megatron-core's position ids reset at each end of document, torch's context-parallel load
balancers (``posenc.ecosystem.position_producers``). The run's FAIL cells are exactly the findings
(``posenc.ecosystem.findings.PRODUCER_FINDINGS``), and each is reproduced below by transformers alone.

Reproduced, transformers 5.24 (no harness): Qwen2-VL's ``get_rope_index`` on a row of 2 text
tokens, a video of 4 frames of 2 × 2 merged tokens and 3 text tokens gives the video time ids
2 … 5 and the text after it 4, 5, 6: the text sits on ids the video already holds (the papers'
rule resumes at 6). Qwen2.5-VL at 2 ids a second and 1.5 s a grid: time ids 2, 5, 8, 11, text
4, 5, 6, delta −9, so a decode after the row (cache position 21 + delta = 12) jumps past where the
text ends (7).
"""

from __future__ import annotations

import types

import pytest
import torch

from posenc.ecosystem import findings
from posenc.harness.catalogue.states import State
from tests.spec_runs import ecosystem_run, needs

SPECS = ("test_id_builders", "test_packing", "test_sharding", "test_producer_contract")


@pytest.fixture(scope="module")
def producer_matrix(tmp_path_factory):
    data, result = ecosystem_run(tmp_path_factory.mktemp("producers"), findings.PRODUCER_ENCODERS)
    return data["matrix"]


def test_the_real_producers_fail_exactly_the_findings(producer_matrix):
    red = {(encoder, claim) for claim, row in producer_matrix.items() for encoder, state in row.items()
           if State(state) not in (State.HOLDS, State.NA)}
    assert red == findings.PRODUCER_FINDINGS
    judged = {encoder for row in producer_matrix.values() for encoder, state in row.items() if State(state) == State.HOLDS}
    assert {"tf_ids_qwen3_vl", "tf_ids_glm4v", "tf_vision_grid", "tf_flattening", "packed_torchtune",
            "megatron_reset_ids", "torch_cp_head_tail", "torch_cp_per_document_head_tail"} <= judged


def _get_rope_index(config_class, model_class, **vision):
    import transformers

    config = getattr(transformers, config_class)(
        text_config={"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4},
        vision_config={"spatial_merge_size": 2, **vision})
    holder = types.SimpleNamespace(config=config)
    cls = getattr(transformers, model_class)
    holder.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, holder)
    return types.MethodType(cls.get_rope_index, holder)


def _video_row():
    types_ = torch.tensor([[0, 0] + [2] * 16 + [0, 0, 0]])
    return {"input_ids": torch.ones_like(types_), "mm_token_type_ids": types_,
            "video_grid_thw": torch.tensor([[4, 4, 4]])}


def test_qwen2_vl_resumes_text_after_a_video_on_ids_the_video_holds():
    needs("transformers")
    ids, _ = _get_rope_index("Qwen2VLConfig", "Qwen2VLModel")(**_video_row())
    video_time, text_after = ids[0, 0, 2:18], ids[:, 0, 18:]
    assert video_time.unique().tolist() == [2, 3, 4, 5]
    assert text_after[0].tolist() == [4, 5, 6]  # the papers' rule: 6, 7, 8


def test_qwen2_5_vl_resumes_below_its_seconds_and_its_delta_jumps():
    needs("transformers")
    index = _get_rope_index("Qwen2_5_VLConfig", "Qwen2_5_VLModel", tokens_per_second=2)
    ids, delta = index(**_video_row(), second_per_grid_ts=torch.tensor([1.5]))
    assert ids[0, 0, 2:18].unique().tolist() == [2, 5, 8, 11]
    assert ids[0, 0, 18:].tolist() == [4, 5, 6] and int(delta) == -9  # decodes at 21 − 9 = 12, the row ends at 6


def test_qwen2_vl_delta_jumps_where_a_video_runs_past_the_text_after_it():
    needs("transformers")
    types_ = torch.tensor([[0, 2, 2, 2, 2, 0]])  # a video of 4 frames of one merged token
    ids, delta = _get_rope_index("Qwen2VLConfig", "Qwen2VLModel")(
        input_ids=torch.ones_like(types_), mm_token_type_ids=types_, video_grid_thw=torch.tensor([[4, 2, 2]]))
    assert ids[0, 0].tolist() == [0, 1, 2, 3, 4, 2] and int(delta) == -1  # decodes at 6 − 1 = 5; the row ends at 2
