"""``identify --axes``: the protocol is honoured, position 0 is probed, a map that is not a
rotation is said to be one, and an order is named by what it is (each a defect seen at ``7f927be``:
a ``TypeError`` traceback under ``--protocol pair``; time ids one ahead read as mixed frequencies; a
scaled pair read as a section with θ 0; a width-first 2D RoPE named by Ernie's order with a note
promised and not printed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding
from posenc.harness.identify.axes_identification import identify_axes
from tests.spec_runs import ROOT

HEAD_DIM = 16


def _mrope():
    return MultiAxisRotaryEmbedding(HEAD_DIM, (2, 3, 3), order="contiguous", layout="half_split").double()


def test_the_pair_protocol_is_honoured_under_axes(tmp_path):
    target = tmp_path / "pair_mrope.py"
    target.write_text(textwrap.dedent("""
        from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding
        rope = MultiAxisRotaryEmbedding(16, (2, 3, 3), order="contiguous", layout="half_split").double()

        def pair(q, k, q_positions, k_positions):
            return rope(q, q_positions), rope(k, k_positions)
    """))
    done = subprocess.run([sys.executable, "-m", "posenc", "identify", f"{target}:pair", "--axes", "3",
                           "--protocol", "pair"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "sections:        (2, 3, 3) pairs, contiguous" in done.stdout


def test_time_ids_one_ahead_are_read_relative_to_position_zero():
    rope = _mrope()

    def ahead(x, P):
        return rope(x, P + torch.tensor([1, 0, 0]).reshape(3, 1, 1))

    found = identify_axes(ahead, HEAD_DIM)
    assert found.sections == (2, 3, 3) and found.order == "contiguous", found.report()
    assert any("position 0" in note for note in found.notes)
    assert not any("mixed frequencies" in note for note in found.notes)


def test_a_map_that_is_not_a_rotation_is_said_to_be_one():
    rope = _mrope()

    def scaled(x, P):
        y = rope(x, P)
        width = [5, 6, 7, 13, 14, 15]  # the width section's pairs, half-split
        y[..., width] = y[..., width] * (1 + P[2].reshape(*P.shape[1:], 1, 1).to(y.dtype))
        return y

    found = identify_axes(scaled, HEAD_DIM)
    assert found.order == "other" and found.geometry_code() is None
    assert any(note.startswith("not a rotation: pairs [5, 6, 7]") for note in found.notes), found.notes


def test_a_width_first_2d_rope_is_named_by_what_it_is():
    rope = MultiAxisRotaryEmbedding(HEAD_DIM, (4, 4), order="contiguous", layout="half_split").double()
    found = identify_axes(lambda x, P: rope(x, P[[1, 0]]), HEAD_DIM, axes=2)
    assert found.order == "other", found.report()
    assert any("axis order width, height" in note for note in found.notes), found.notes
    assert "note:" in found.report()
