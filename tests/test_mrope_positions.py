"""The papers' M-RoPE position ids (``posenc.encoders.mrope_positions``), the VLM relations' reference:
worked examples from Qwen2-VL's and Qwen2.5-VL's descriptions, and clear errors for bad segments."""

from __future__ import annotations

import pytest
import torch

from posenc.encoders.mrope_positions import Text, Vision, mrope_positions


def test_an_image_takes_its_grid_and_text_resumes_after_its_largest_id():
    ids, delta = mrope_positions([Text(3), Vision(1, 2, 3), Text(2)])
    assert ids.tolist() == [[0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7],
                            [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7],
                            [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]]
    assert delta == 8 - 11  # a decode after the row continues at its length + delta = 8


def test_a_video_in_seconds_spaces_its_time_ids_and_text_resumes_past_them():
    # Qwen2.5-VL: 4 temporal tokens 1.5 s apart at 2 ids a second -> time ids 0, 3, 6, 9 after the start
    ids, delta = mrope_positions([Text(2), Vision(4, 1, 2, seconds=1.5), Text(1)], time="seconds", ids_per_second=2)
    assert ids[0].tolist() == [0, 1, 2, 2, 5, 5, 8, 8, 11, 11, 12]
    assert ids[1, 2:10].tolist() == [2] * 8 and ids[2, 2:10].tolist() == [2, 3] * 4
    assert delta == 13 - 11


def test_frames_ignore_the_seconds_and_fractional_steps_quantise_after_the_product():
    by_frames, _ = mrope_positions([Vision(3, 1, 1, seconds=5.0)], time="frames")
    assert by_frames[0].tolist() == [0, 1, 2]
    halves, _ = mrope_positions([Vision(4, 1, 1, seconds=0.25)], time="seconds", ids_per_second=2)
    assert halves[0].tolist() == [0, 0, 1, 1]  # 0.5 ids a step: floor(k · 0.5), not floor(0.5) · k = 0


def test_equal_ids_for_text_alone_and_a_start():
    ids, delta = mrope_positions([Text(4)], start=10)
    assert torch.equal(ids, torch.arange(10, 14).expand(3, 4)) and delta == 0


@pytest.mark.parametrize("segments, kwargs, names", [
    ([Text(-1)], {}, "length must be >= 0"),
    ([Vision(0, 2, 2)], {}, "at least one token per axis"),
    ([(1, 2, 3)], {}, "Text or Vision"),
    ([Text(1)], {"time": "minutes"}, "time must be one of"),
    ([Text(1)], {"ids_per_second": 0.0}, "ids_per_second must be a positive finite"),
])
def test_bad_segments_name_the_broken_limit(segments, kwargs, names):
    with pytest.raises((ValueError, TypeError), match=names):
        mrope_positions(segments, **kwargs)
