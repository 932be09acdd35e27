"""transformers' vision-language models (``posenc.ecosystem.transformers_vlms``): every cell of a VLM
spec run is what the record declares, the known upstream defects are FAIL, nothing else is red,
and each defect is reproduced here without the harness (transformers' own calls alone).

Known, in the pinned transformers 5.24:

* Qwen2-VL and Qwen2.5-VL's ``get_rope_index`` resumes text after a video at ``start + max(h, w)``
  (merged), below the video's time ids when the video runs longer than it is wide (VLM-3). The
  papers, and the reference code transformers shipped before, resume at the largest id plus one;
  the stored ``rope_deltas`` do, so a decode after such a prompt also jumps.
* A decode step through ``forward`` with an attention mask, after a prompt holding a picture (padded
  or not), builds M-RoPE ids for every position its mask covers, cache included, and the attention
  fails on the sizes (VLM-4, all four
  families); the prompt and ``generate`` read each row as alone.
* A forward whose chunk brings a picture after cached tokens gives it wrong ids (VLM-6): after a
  text-only cache, ``get_rope_index`` on the chunk alone, counting from 0; after a cache that holds
  a picture (a second turn), text ids continuing the cache plus the first picture's delta, the new
  picture's grid ignored. Only ``generate`` computes new pictures' ids on the whole sequence; a
  chunked prefill or a second turn through ``forward`` gets no error, only the wrong ids.
"""

from __future__ import annotations


import pytest
import torch

import posenc.ecosystem  # noqa: F401  (registers the records)
from posenc.ecosystem.findings import VLM_ENCODERS, VLM_FINDINGS
from posenc.ecosystem.transformers_vlms import CONFIGS, TEXT, TOKENS, VISION
from posenc.harness.catalogue.registry import get
from posenc.harness.catalogue.states import State
from tests.spec_runs import ecosystem_run, needs

pytestmark = pytest.mark.xdist_group("ecosystem")


@pytest.fixture(scope="module")
def vlm_run(tmp_path_factory):
    return ecosystem_run(tmp_path_factory.mktemp("ecosystem-vlm"), VLM_ENCODERS)


def test_every_cell_is_as_declared_and_only_the_findings_are_red(vlm_run):
    verdicts, result = vlm_run
    assert set(verdicts["header"]["encoders"]) == set(CONFIGS)
    wrong = {}
    for claim, row in verdicts["matrix"].items():
        for name, state in row.items():
            expected = State.UNEXPECTEDLY_FAILING if (name, claim) in VLM_FINDINGS else get(name).declared(claim).status
            if State(state) != expected:
                wrong[(name, claim)] = f"{state}, declared {expected}"
    assert not wrong, wrong
    assert result.returncode == 1  # the findings are FAIL
    for claim in ("VLM-1", "VLM-2", "VLM-5"):
        assert set(verdicts["matrix"][claim].values()) == {State.HOLDS}, claim


def test_each_finding_names_its_row_or_chunk_and_a_reproducer(vlm_run):
    verdicts, _ = vlm_run
    for encoder, claim in VLM_FINDINGS:
        found = [o for o in verdicts["outcomes"]
                 if (o["encoder"], o["claim"]) == (encoder, claim) and o["state"] == State.UNEXPECTEDLY_FAILING]
        assert found and all("--plugin posenc.ecosystem" in o["reproducer"] for o in found), (encoder, claim)
        said = " ".join(o["message"] for o in found)
        assert {"VLM-3": "row 2", "VLM-4": "with the cache and the attention mask", "VLM-6": "the chunk of tokens"}[claim] in said, said


# Standalone: transformers' models and calls alone, no harness.
def _model(name: str):
    import transformers
    from transformers import AutoModelForImageTextToText

    config_class, text, vision, _ = CONFIGS[name]
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(text_config={**TEXT, **text}, vision_config={**VISION, **vision},
                                                 **TOKENS)
    return AutoModelForImageTextToText.from_config(config, attn_implementation="eager").eval()


def _video_prompt(model, seconds=None):
    """Text 2, a video of 4 temporal tokens × 1 × 2 (merged), text 3."""
    grid = torch.tensor([[4, 2, 4]])
    ids = torch.tensor([[5, 6, *([TOKENS["video_token_id"]] * 8), 7, 8, 9]])
    width = 3 * 2 * 2 * 2
    extra = {} if seconds is None else {"second_per_grid_ts": torch.tensor([seconds])}
    return ids, dict(pixel_values_videos=torch.randn(int(grid.prod()), width), video_grid_thw=grid,
                     mm_token_type_ids=(ids == TOKENS["video_token_id"]).long() * 2, **extra)


@pytest.mark.parametrize("name", sorted({n for n, c in VLM_FINDINGS if c == "VLM-3"}))
def test_text_after_a_video_resumes_below_its_time_ids(name):
    needs("transformers")
    model = _model(name)
    seconds = 1.5 if CONFIGS[name][3]["video_time"] == "seconds" else None
    ids, vision = _video_prompt(model, seconds)
    index, deltas = model.model.get_rope_index(ids, **{k: v for k, v in vision.items() if "pixel" not in k})
    video = index[:, 0, 2:10]
    after = index[:, 0, 10]
    assert int(after[0]) <= int(video[0].max()), "text after the video now resumes past its time ids: fixed?"
    assert int(deltas[0, 0]) + ids.shape[1] == int(index.max()) + 1  # the stored delta follows the largest id
    # where the video's time outruns the text after it, a decode after the prompt (its cache and deltas)
    # also differs from a fresh pass on the prefix
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **vision)
        step = model(input_ids=torch.tensor([[11]]), cache=out.cache, use_cache=True).logits[:, -1]
        longer = {**vision, "mm_token_type_ids": torch.cat((vision["mm_token_type_ids"], torch.zeros(1, 1)), 1).long()}
        fresh = model(input_ids=torch.cat((ids, torch.tensor([[11]])), 1), **longer).logits[:, -1]
    jumps = int(video[0].max()) > int(index[0, 0, -1])  # the video's time outruns the text after it
    assert (float((step - fresh).abs().max()) > 1e-2) == jumps


def _continued(model, ids, types, cut, chunk, **given):
    """The logits of ``chunk`` (tokens ``cut:``) after a cache of tokens ``:cut``, a new sequence."""
    model.model.rope_deltas = None  # nothing kept from an earlier call
    head = {k: v for k, v in chunk.items() if k == "head"}
    first = model(input_ids=ids[:, :cut], use_cache=True, mm_token_type_ids=types[:, :cut], **head.get("head", {}))
    rest = {k: v for k, v in chunk.items() if k != "head"}
    return model(input_ids=ids[:, cut:], mm_token_type_ids=types[:, cut:], cache=first.cache, use_cache=True,
                 **rest, **given).logits


@pytest.mark.parametrize("name", sorted({n for n, c in VLM_FINDINGS if c == "VLM-6"}))
def test_a_picture_in_a_later_chunk_gets_ids_from_zero(name):
    needs("transformers")
    model = _model(name)
    image = TOKENS["image_token_id"]
    ids = torch.tensor([[5, 6, *([image] * 6), 7, 8]])  # text 2, an image of 2 × 3 (merged), text 2
    grid = torch.tensor([[1, 4, 6]])
    pixels = torch.randn(int(grid.prod()), 3 * 2 * 2 * 2)
    types = (ids == image).long()
    picture = dict(pixel_values=pixels, image_grid_thw=grid)
    with torch.no_grad():
        full = model(input_ids=ids, mm_token_type_ids=types, **picture).logits
        own = _continued(model, ids, types, 2, picture)
        local, _ = model.model.get_rope_index(ids[:, 2:], mm_token_type_ids=types[:, 2:], image_grid_thw=grid)
        from_zero = _continued(model, ids, types, 2, picture, position_ids=local)
        index, _ = model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grid)
        right = _continued(model, ids, types, 2, picture, position_ids=index[:, :, 2:])
    assert float((own - full[:, 2:]).abs().max()) > 1e-2  # the chunk's own ids are wrong:
    assert float((own - from_zero).abs().max()) < 1e-5  # they are the chunk's alone, from 0
    assert float((right - full[:, 2:]).abs().max()) < 1e-4  # with the whole row's ids it matches


@pytest.mark.parametrize("name", sorted({n for n, c in VLM_FINDINGS if c == "VLM-6"}))
def test_a_picture_after_cached_pictures_gets_text_ids(name):
    """A second turn: the cache holds a picture (``rope_deltas`` set), the chunk brings another."""
    needs("transformers")
    model = _model(name)
    image = TOKENS["image_token_id"]
    ids = torch.tensor([[5, *([image] * 4), 6, *([image] * 6), 7, 8]])  # text, 2 × 2 image, text, 2 × 3, text 2
    grids = torch.tensor([[1, 4, 4], [1, 4, 6]])
    pixels = torch.randn(int(grids.prod(-1).sum()), 3 * 2 * 2 * 2)
    types = (ids == image).long()
    first_pixels, second_pixels = pixels[:16], pixels[16:]
    cached = {"head": dict(pixel_values=first_pixels, image_grid_thw=grids[:1])}
    second = dict(pixel_values=second_pixels, image_grid_thw=grids[1:])
    with torch.no_grad():
        full = model(input_ids=ids, mm_token_type_ids=types, pixel_values=pixels, image_grid_thw=grids).logits
        own = _continued(model, ids, types, 6, {**cached, **second})
        delta = int(model.model.get_rope_index(ids[:, :6], mm_token_type_ids=types[:, :6],
                                               image_grid_thw=grids[:1])[1])
        text_like = torch.arange(6 + delta, ids.shape[1] + delta).expand(3, 1, -1)
        as_text = _continued(model, ids, types, 6, {**cached, **second}, position_ids=text_like)
    assert float((own - full[:, 6:]).abs().max()) > 1e-2  # the new picture's own ids are wrong:
    assert float((own - as_text).abs().max()) < 1e-5  # text ids after the cache, plus the first picture's delta


@pytest.mark.parametrize("name", sorted({n for n, c in VLM_FINDINGS if c == "VLM-4"}))
def test_a_padded_decode_through_forward_builds_ids_for_the_whole_mask(name):
    """A left-padded batch with a picture: the prompt and ``generate`` read each row as alone, but a
    decode step through ``forward`` with the mask builds M-RoPE ids for every position the mask
    covers, cache included, and the attention then fails on the sizes."""
    needs("transformers")
    model = _model(name)
    image = TOKENS["image_token_id"]
    ids = torch.tensor([[5, 6, *([image] * 6), 7, 8], [0, 0, 0, 9, 10, 11, 12, 13, 14, 15]])  # row 1 padded by 3
    mask = torch.tensor([[1] * 10, [0] * 3 + [1] * 7])
    types = (ids == image).long()
    grid = torch.tensor([[1, 4, 6]])
    picture = dict(pixel_values=torch.randn(int(grid.prod()), 3 * 2 * 2 * 2), image_grid_thw=grid)
    step = torch.tensor([[20], [21]])
    with torch.no_grad():
        prompt = model(input_ids=ids, attention_mask=mask, mm_token_type_ids=types, use_cache=True, **picture)
        alone = model(input_ids=ids[1:, 3:], mm_token_type_ids=types[1:, 3:]).logits
        assert float((prompt.logits[1, 3:] - alone[0]).abs().max()) < 1e-4  # the prompt is right
        generated = model.generate(ids, attention_mask=mask, mm_token_type_ids=types, max_new_tokens=2,
                                   do_sample=False, output_logits=True, return_dict_in_generate=True,
                                   pad_token_id=0, eos_token_id=None, **picture)
        following = torch.cat((ids[1:, 3:], generated.sequences[1:, 10:11]), 1)
        again = model(input_ids=following, mm_token_type_ids=torch.zeros_like(following)).logits
        assert float((generated.logits[1][1] - again[0, -1]).abs().max()) < 1e-4  # so is generate
        longer = torch.cat((mask, torch.ones(2, 1, dtype=torch.long)), 1)
        built = model.model.compute_3d_position_ids(
            input_ids=step, image_grid_thw=None, video_grid_thw=None, inputs_embeds=model.get_input_embeddings()(step),
            attention_mask=longer, cache=prompt.cache, mm_token_type_ids=torch.zeros_like(step))
        assert built.shape[-1] == longer.shape[1] != step.shape[1]  # ids for the whole mask, not the new token
        with pytest.raises(RuntimeError, match="must match"):
            model(input_ids=step, attention_mask=longer, cache=prompt.cache, use_cache=True,
                  mm_token_type_ids=torch.zeros_like(step))


@pytest.mark.parametrize("name", sorted({n for n, c in VLM_FINDINGS if c == "VLM-4"}))
def test_an_unpadded_decode_through_forward_with_its_mask_fails_too(name):
    """No padding at all: one row with a picture, its mask of ones, then one token with the cache and
    the longer mask of ones. The same step without the mask is right."""
    needs("transformers")
    model = _model(name)
    image = TOKENS["image_token_id"]
    ids = torch.tensor([[5, 6, *([image] * 6), 7, 8]])
    types = (ids == image).long()
    grid = torch.tensor([[1, 4, 6]])
    picture = dict(pixel_values=torch.randn(int(grid.prod()), 3 * 2 * 2 * 2), image_grid_thw=grid)
    step = torch.tensor([[20]])
    with torch.no_grad():
        prompt = model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types, use_cache=True,
                       **picture)
        with pytest.raises(RuntimeError, match="must match"):
            model(input_ids=step, attention_mask=torch.ones(1, 11, dtype=torch.long), cache=prompt.cache,
                  use_cache=True, mm_token_type_ids=torch.zeros_like(step))
        bare = model(input_ids=ids, mm_token_type_ids=types, use_cache=True, **picture)
        model(input_ids=step, cache=bare.cache, use_cache=True, mm_token_type_ids=torch.zeros_like(step))
