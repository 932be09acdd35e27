"""Defects of a multi-axis RoPE: sections split, ordered or owned wrong, an axis ignored or swapped,
text ids that differ across axes, a 2D grid transposed, RoPE-Mixed's frequencies not mixed.

Each is the built-in record it imitates with a broken module; at equal ids on every axis most are
still the 1D RoPE they imitate, so only the multi-axis claims fail.
"""

from __future__ import annotations

import dataclasses

import torch

import posenc

from posenc.encoders.multiaxis import MixedRotaryEmbedding, MultiAxisRotaryEmbedding, axis_positions
from posenc.encoders.positions import angle_dtype
from posenc.encoders.rotary import _check_heads_input, rotate

from ._scaffold import mutant, placed

SECTIONS = "a section's pairs turn with the wrong axis: the formula at per-axis positions (MROPE-1) and the " \
           "sections read off the outputs (MROPE-2)"


def _sections(c, parts, rotary_dim=None):
    pairs = (rotary_dim or c.head_dim) // 2
    return tuple(n * pairs // sum(parts) for n in parts)


def _multiaxis(c, parts, **options):
    return placed(MultiAxisRotaryEmbedding(c.head_dim, _sections(c, parts), base=c.base, **options), c)


class AxisMap(MultiAxisRotaryEmbedding):
    """Positions read through ``axis_map``: ``axis_map[a]`` is the axis whose ids axis ``a``'s pairs get."""

    def __init__(self, *args, axis_map, **kwargs):
        super().__init__(*args, **kwargs)
        self.axis_map = list(axis_map)

    def angles(self, positions, dtype):
        return super().angles(positions[self.axis_map], dtype)


class TextIdsDiffer(MultiAxisRotaryEmbedding):
    """Text (ids without an axis dimension) gets the id on the time axis and 0 on the others."""

    def forward(self, x, positions=None, *, offset=0):
        if positions is None or positions.dim() < 3:
            text = axis_positions(x, positions, offset, self.axes)
            positions = torch.stack([text[0], *torch.zeros_like(text[1:])]).expand(self.axes, x.shape[0], -1)
        return super().forward(x, positions)


@mutant("mrope_qwen2vl", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_sections_split_3_3_2(c):
    """M-RoPE sections split 3:3:2 where 2:3:3 is declared"""
    # reference: mrope_section read from the wrong config field, or summed over a different head_dim.
    return _multiaxis(c, (3, 3, 2))


@mutant("mrope_qwen2vl", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_interleaved_where_contiguous_is_declared(c):
    """Qwen3-VL's interleaved sections where Qwen2-VL's contiguous ones are declared"""
    # reference: a shared rotary class whose mrope_interleaved flag is ignored (transformers 5.24 ignores it).
    return placed(MultiAxisRotaryEmbedding(c.head_dim, _sections(c, (4, 2, 2)), base=c.base, order="interleaved"), c)


@mutant("mrope_qwen3vl", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_contiguous_where_interleaved_is_declared(c):
    """Qwen2-VL's contiguous sections where Qwen3-VL's interleaved ones are declared"""
    return _multiaxis(c, (6, 5, 5))


@mutant("mrope_qwen2vl", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_width_axis_ignored(c):
    """the width pairs turn with the height ids: one axis ignored"""
    return placed(AxisMap(c.head_dim, _sections(c, (2, 3, 3)), base=c.base, axis_map=(0, 1, 1)), c)


@mutant("mrope_qwen2vl", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_height_and_width_swapped(c):
    """the height and width ids swapped: each turns the other's pairs"""
    # reference: position_ids built as [t, w, h] from a (w, h) grid.
    return placed(AxisMap(c.head_dim, _sections(c, (2, 3, 3)), base=c.base, axis_map=(0, 2, 1)), c)


@mutant("mrope_glm4v", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def mrope_time_pairs_turn_with_width(c):
    """the time pairs turn with the width ids (GLM-4V's pairing)"""
    half = c.head_dim // 2  # GLM-4V rotates half of each head
    return placed(AxisMap(c.head_dim, _sections(c, (2, 3, 3), half), base=c.base, layout="interleaved",
                          rotary_dim=half, axis_map=(2, 1, 2)), c)


@mutant("rope_2d_axial", fails={"MROPE-1", "MROPE-2"}, why=SECTIONS)
def rope_2d_grid_transposed(c):
    """a patch grid read transposed: rows turn the width pairs, columns the height pairs"""
    # reference: get_vision_position_ids' meshgrid indexed "xy" where "ij" is meant.
    return placed(AxisMap(c.head_dim, _sections(c, (1, 1)), base=c.base, schedule="per_axis", axis_map=(1, 0)), c)


@mutant("mrope_qwen2vl", fails={"MROPE-3", "ROPE-1", "ROPE-2"},
        why="text ids not repeated on every axis: the text call is no 1D RoPE (MROPE-3), and the rotary claims "
            "judged on text see a RoPE whose height and width pairs never turn: the formula (ROPE-1) and "
            "the frequencies read off the map (ROPE-2); offsets still hold, on the time pairs alone; the complex "
            "form holds at the angles it turns by (ROPE-8)")
def mrope_text_ids_not_equal_across_axes(c):
    """text ids on the time axis only, 0 on height and width"""
    # reference: LLaMA-Factory #10783 class: packed or padded text rows given ids on one axis only.
    return placed(TextIdsDiffer(c.head_dim, _sections(c, (2, 3, 3)), base=c.base), c)


class UnmixedRotary(MixedRotaryEmbedding):
    """RoPE-Mixed with θ_x used for both axes: the y frequencies never reach the angles."""

    def forward(self, x, positions=None, *, offset=0):
        _check_heads_input(x, self.head_dim)
        adt = angle_dtype(x.dtype)
        p = axis_positions(x, positions, offset, self.axes).to(adt)
        theta = torch.stack([self.theta[0], self.theta[0]]).to(adt)
        angles = torch.einsum("abs,ai->bsi", p, theta).unsqueeze(-2)
        return rotate(x.to(adt), angles.cos(), angles.sin(), self.layout).to(x.dtype)


@mutant("rope_2d_mixed", fails={"MROPE-1", "MROPE-3", "ROPE-1"},
        why="θ_x stands in for θ_y: the angles at per-axis positions are wrong (MROPE-1), and with equal ids pair "
            "i turns by 2·θ_x,i, not by θ_x,i + θ_y,i (MROPE-3), which the formula's rotary claim sees too "
            "(ROPE-1); the complex form holds at the angles it turns by (ROPE-8)")
def rope_2d_mixed_ignores_its_y_frequencies(c):
    """RoPE-Mixed with the x frequencies standing in for the y ones"""
    return placed(UnmixedRotary(c.head_dim), c)


class FarHeightClamped(MultiAxisRotaryEmbedding):
    """Height ids given per axis are clamped at 8192 (an image table's size); text ids are not."""

    def forward(self, x, positions=None, *, offset=0):
        if positions is not None and positions.dim() == 3:
            positions = torch.stack([positions[0], positions[1].clamp(max=8192), *positions[2:]])
        return super().forward(x, positions, offset=offset)


@mutant("mrope_qwen2vl", fails={"MROPE-3", "MROPE-4"},
        why="height ids past 8192 are clamped: equal far ids on every axis are no longer 1D RoPE (MROPE-3), and a "
            "far shift along height changes the logits (MROPE-4); ids below 8192 turn right")
def mrope_height_ids_clamped_at_8192(c):
    """height ids clamped at 8192 on the per-axis path"""
    # reference: a vision position table sized for the largest image, indexed with video-length ids.
    return placed(FarHeightClamped(c.head_dim, _sections(c, (2, 3, 3)), base=c.base), c)


class WidthPairsScaled(MultiAxisRotaryEmbedding):
    """The width pairs scaled by 1.01 on the per-axis path: a rotation no more."""

    def forward(self, x, positions=None, *, offset=0):
        y = super().forward(x, positions, offset=offset)
        if positions is None or positions.dim() < 3:
            return y
        scale = torch.ones(self.head_dim, dtype=y.dtype, device=y.device)
        width = (self.pair_axis == 2).nonzero().flatten()
        scale[width] = scale[width + self.head_dim // 2] = 1.01  # half-split: pair i is (i, i + d/2)
        return y * scale


@mutant("mrope_qwen2vl", fails={"MROPE-1", "MROPE-3", "MROPE-5"},
        why="the width pairs are scaled by 1.01: the value at per-axis positions is wrong (MROPE-1), equal ids given "
            "per axis are no longer the text call's 1D RoPE (MROPE-3), and norms grow (MROPE-5); a constant scale "
            "leaves offsets alone (MROPE-4)")
def mrope_width_pairs_scaled(c):
    """the width pairs scaled by 1.01 when positions come per axis"""
    return placed(WidthPairsScaled(c.head_dim, _sections(c, (2, 3, 3)), base=c.base), c)


class FirstRowsIds(MultiAxisRotaryEmbedding):
    """Every row of a batch given per axis takes the first row's ids."""

    def forward(self, x, positions=None, *, offset=0):
        if positions is not None and positions.dim() == 3:
            positions = positions[:, :1].expand_as(positions)
        return super().forward(x, positions, offset=offset)


@mutant("mrope_qwen2vl", fails={"MROPE-1"})
def mrope_rows_take_the_first_rows_ids(c):
    """every batch row takes the first row's per-axis ids"""
    # reference: mlx-vlm #1095 class, a row inheriting another row's M-RoPE ids; within a row the offsets,
    # the sections and the norms stay right, so only the value at per-axis positions (MROPE-1) is wrong.
    return placed(FirstRowsIds(c.head_dim, _sections(c, (2, 3, 3)), base=c.base), c)


class KeysInOneDimension(torch.nn.Module):
    """q through M-RoPE; k through a 1D RoPE at its time ids (a q-and-k call whose key path was
    never given the axes)."""

    def __init__(self, mrope, rope):
        super().__init__()
        self.mrope, self.rope, self.head_dim = mrope, rope, mrope.head_dim

    def forward(self, q, k, q_positions, k_positions):
        one_dimensional = k_positions[0] if k_positions.dim() == 3 else k_positions
        return self.mrope(q, q_positions), self.rope(k, one_dimensional)


@mutant("mrope_qwen2vl", fails={"MROPE-4"},
        calling=dataclasses.replace(posenc.get("mrope_qwen2vl").calling, protocol="pair"),
        claims={**posenc.get("mrope_qwen2vl").claims,
                "PATH-1": posenc.not_applicable("the offset path is checked on single-tensor encoders")})
def mrope_keys_rotated_in_one_dimension(c):
    """a q-and-k call that rotates keys with 1D RoPE at their time ids"""
    # q's side is M-RoPE (MROPE-1, 2, 3, 5 read it); text ids are 1D on both sides (the ROPE claims hold);
    # with per-axis positions only the q·k logits, read through the pair call, see the keys' axes lost.
    layout = posenc.get("mrope_qwen2vl").geometry.layout
    mrope = _multiaxis(c, (2, 3, 3), layout=layout)
    return KeysInOneDimension(mrope, placed(posenc.RotaryEmbedding(c.head_dim, base=c.base, layout=layout), c))
