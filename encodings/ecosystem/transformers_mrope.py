"""transformers' multi-axis rotary classes (M-RoPE, 2D vision RoPE) through the cos/sin protocol.

``cos, sin = Rotary(config)(x, position_ids)``, then the model's own ``apply_rotary_pos_emb(q, k, cos,
sin, unsqueeze_dim=2)`` on ``(batch, seq, heads, head_dim)``. The specs' positions ``(axes, batch,
seq)`` go in as they are: they are the ``(3, batch, seq)`` rows ``[T, H, W]`` the text classes take;
text positions ``(batch, seq)`` go in too, and the class expands them to every axis itself
(``position_ids.expand(3, -1, -1)``). The vision classes take one ``[h, w]`` row per patch,
``(patches, 2)``: :class:`PatchGrid` flattens ``(2, batch, seq)`` to that, gives text positions the
same id on both axes, and reads cos and sin back as ``(batch, seq, head_dim)``; nothing else is
touched (no dtype, cache or bound).

What each class computes, from its code (transformers 5.24): θ_i = ``rope_theta^(−2i/r)`` over the
rotated width ``r = head_dim · partial_rotary_factor``, pair ``i`` turned by the position of the axis
that owns it, angles in float32:

* Qwen2-VL, Qwen2.5-VL: half-split, the ``mrope_section`` pairs of T, H, W contiguous;
* Qwen3-VL, Qwen3.5: half-split, interleaved T H W T H W … then T (``mrope_section[1:]`` bound
  the H and W turns); Qwen3.5 rotates ``partial_rotary_factor`` of the head (0.25 published);
* GLM-4.1V: adjacent pairs (``rotate_half_llm``), contiguous sections, half the head rotated;
  GLM-4.5V (``glm4v_moe``): the same sections, half-split;
* Ernie 4.5 VL: adjacent pairs, ``mrope_section = [h, w, t]``: H and W take turns over the first
  ``h + w`` pairs, then T (``axis_order="spatial_interleaved"``); cos and sin float32, q cast to
  float32 by ``apply_rotary_pos_emb``;
* Qwen2-VL's vision tower (``rope_type="axial"``): the first half of the pairs H, the second W,
  each axis θ_j = ``θ^(−2j/(r/2))`` of its own (``axis_schedule="per_axis"``), float32 throughout;
* Pixtral's vision tower: the first half of the pairs H with the even θ_k of ``θ^(−2k/r)``, the
  second W with the odd ones (Mistral's 2D frequency grid).

Sizes at the specs' head_dim 16: the published sections keep their proportions where 8 pairs
allow (Qwen2-VL's 16:24:24 is 2:3:3); GLM's half-rotated head has 4 pairs, split 1:2:1 (8:12:12
needs 8 pairs); Qwen3.5's quarter is 2 pairs, too few for three axes: ``hf_qwen3_5_mrope`` keeps
the published 0.25 and computes head_dim 32 and up (judged by the specs that size the head for the
record, the multi-axis claims among them; ``n/a`` elsewhere), ``hf_qwen3_5_half_mrope`` rotates half
of a 16-dim head through the same class, judged everywhere. The position ids themselves
(``get_rope_index``) are the model's, not the class's: not judged here.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

import posenc
from posenc.harness.catalogue.multiaxis_records import multiaxis_record

from .support import ORIGIN, available, missing, validates_no_input, version

ANGLES = torch.float32
SOURCE = "transformers {} (models/{})"


def _text_config(config_class: str, module: str, config: posenc.BuildConfig, sections, **rope) -> object:
    """A one-layer text config of the specs' sizes whose ``rope_parameters`` name the sections."""
    configs = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    return getattr(configs, config_class)(
        hidden_size=config.d_model, num_attention_heads=config.n_heads, num_key_value_heads=config.n_heads,
        head_dim=config.head_dim, num_hidden_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": config.base, "mrope_section": list(sections), **rope})


def _library(module: str, name: str):
    return getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)


def _text_build(module: str, config_class: str, rotary_class: str, geometry: posenc.RotaryGeometry,
                library_sections=None, **rope):
    """``rotary_class(config)``, its ``mrope_section`` the geometry's sections at the head size built."""

    def build(config: posenc.BuildConfig):
        sections = geometry.sections(geometry.rotary_dim(config.head_dim))  # a head size it cannot share raises
        sections = library_sections(sections) if library_sections else sections
        text = _text_config(config_class, module, config, sections, **rope)
        return _library(module, rotary_class)(text).to(config.device)

    return build


def _apply(module: str, function: str = "apply_rotary_pos_emb", **arguments):
    """The model's own apply function, with the library's argument for ``(batch, seq, heads, head_dim)``."""

    def apply(q, k, cos, sin):
        return _library(module, function)(q, k, cos, sin, **arguments)

    apply.__qualname__ = apply.__name__ = f"{module}.{function}"
    return apply


def _text_rotary(module: str, prefix: str, geometry: posenc.RotaryGeometry, rotary_class: str | None = None,
                 **rope) -> tuple:
    """A text M-RoPE row of :data:`CONFIGURATIONS` up to its description: its geometry, design, build
    (``{prefix}TextConfig``, ``rotary_class`` or ``{prefix}TextRotaryEmbedding``), the model's apply
    function and its modelling file."""
    rotary_class = rotary_class or f"{prefix}TextRotaryEmbedding"
    return (geometry, ("mrope",), _text_build(module, f"{prefix}TextConfig", rotary_class, geometry, **rope),
            _apply(module, unsqueeze_dim=2), f"{module}/modeling_{module}.py")


class PatchGrid(nn.Module):
    """A vision rotary class, which takes ``[h, w]`` per patch (``(patches, 2)``), on the specs'
    positions: ``(2, batch, seq)`` flattened to patches, text ids ``(batch, seq)`` the same on both
    axes; cos and sin read back as ``(batch, seq, head_dim)``. The class is a submodule, so
    ``.to()`` reaches its buffers as it is."""

    def __init__(self, rotary: nn.Module):
        super().__init__()
        self.rotary = rotary

    def forward(self, x, position_ids):
        batch, seq = x.shape[0], x.shape[1]
        grid = position_ids if position_ids.dim() == 3 else position_ids.unsqueeze(0).expand(2, -1, -1)
        patches = grid.expand(-1, batch, -1).permute(1, 2, 0).reshape(batch * seq, grid.shape[0])
        cos, sin = self.rotary(x, patches)
        return cos.reshape(batch, seq, -1), sin.reshape(batch, seq, -1)


def _qwen2_vl_vision(config: posenc.BuildConfig):
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

    rope = {"rope_type": "axial", "rope_theta": config.base}
    vision = Qwen2VLVisionConfig(depth=1, embed_dim=config.d_model, hidden_size=config.d_model,
                                 num_heads=config.n_heads, rope_parameters=rope)
    return PatchGrid(_library("qwen2_vl", "Qwen2VLVisionRotaryEmbedding")(vision)).to(config.device)


def _pixtral_vision(config: posenc.BuildConfig):
    from transformers import PixtralVisionConfig

    vision = PixtralVisionConfig(hidden_size=config.d_model, num_attention_heads=config.n_heads, num_hidden_layers=1,
                                 intermediate_size=config.d_model, image_size=64, patch_size=16,
                                 rope_parameters={"rope_type": "axial", "rope_theta": config.base})
    return PatchGrid(_library("pixtral", "PixtralVisionRotaryEmbedding")(vision)).to(config.device)


def pixtral_frequencies(rotary_dim: int, base: float) -> torch.Tensor:
    """Pixtral's θ per pair: ``base^(−2k/r)`` at the even ``k`` (H's pairs), then at the odd ones (W's)."""
    theta = base ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    return torch.cat((theta[0::2], theta[1::2]))


def _geometry(**fields) -> posenc.RotaryGeometry:
    return posenc.RotaryGeometry(angle_dtype=ANGLES, **fields)


QWEN2_VL = _geometry(layout="half_split", axis_sections=(2, 3, 3))
QWEN3_VL = _geometry(layout="half_split", axis_sections=(4, 2, 2), axis_order="interleaved")
QWEN3_5 = _geometry(layout="half_split", axis_sections=(2, 1, 1), axis_order="interleaved", rotary_fraction=0.25)
QWEN3_5_HALF = _geometry(layout="half_split", axis_sections=(2, 1, 1), axis_order="interleaved", rotary_fraction=0.5)
GLM4V = _geometry(layout="interleaved", axis_sections=(1, 2, 1), rotary_fraction=0.5)
GLM4V_MOE = _geometry(layout="half_split", axis_sections=(1, 2, 1), rotary_fraction=0.5)
ERNIE4_5_VL = _geometry(layout="interleaved", axis_sections=(2, 3, 3), axis_order="spatial_interleaved")
QWEN2_VL_VISION = _geometry(layout="half_split", axis_sections=(1, 1), axis_schedule="per_axis")
PIXTRAL_VISION = _geometry(layout="half_split", axis_sections=(1, 1), frequencies=pixtral_frequencies)


def _ernie_sections(sections):
    """Ernie's ``mrope_section`` is ``[h, w, t]``; the geometry's sections are ``(t, h, w)``."""
    t, h, w = sections
    return [h, w, t]


_COMMON = {
    "PATH-1": posenc.not_applicable("cos/sin take explicit position_ids only"),
    posenc.CONTRACT: validates_no_input(
        "the rotary classes and apply functions validate no input: integer q is promoted, an extra dimension "
        "broadcasts, a negative position is rotated by −p"),
}
_PER_AXIS = posenc.refuted("each axis has a schedule of its own over its own pairs: with equal ids θ is not "
                           "base^(−2i/d)", specs=("test_frequencies_follow_the_formula",))
_FREQUENCY_GRID = posenc.refuted("H takes the even θ_k of base^(−2k/d), W the odd ones: with equal ids θ is not "
                                 "base^(−2i/d) in pair order", specs=("test_frequencies_follow_the_formula",))

#: name -> (geometry, designs, build, apply, model file, description, claims beyond _COMMON)
CONFIGURATIONS = {
    "qwen2vl_mrope": (
        *_text_rotary("qwen2_vl", "Qwen2VL", QWEN2_VL, "Qwen2VLRotaryEmbedding"),
        "Qwen2VLRotaryEmbedding, mrope_section 2:3:3 (16:24:24 of a 128 head), with apply_rotary_pos_emb", {}),
    "qwen2_5vl_mrope": (
        *_text_rotary("qwen2_5_vl", "Qwen2_5_VL", QWEN2_VL, "Qwen2_5_VLRotaryEmbedding"),
        "Qwen2_5_VLRotaryEmbedding, mrope_section 2:3:3, with apply_rotary_pos_emb", {}),
    "qwen3vl_mrope": (
        *_text_rotary("qwen3_vl", "Qwen3VL", QWEN3_VL, mrope_interleaved=True),
        "Qwen3VLTextRotaryEmbedding, mrope_section [4, 2, 2] interleaved (T H W T H W T T), "
        "with apply_rotary_pos_emb", {}),
    "qwen3_5_mrope": (
        *_text_rotary("qwen3_5", "Qwen3_5", QWEN3_5, mrope_interleaved=True, partial_rotary_factor=0.25),
        "Qwen3_5TextRotaryEmbedding at the published partial_rotary_factor 0.25, interleaved T H W T: head_dim 32 "
        "and up (a quarter of 16 is 2 pairs, too few for three axes), with apply_rotary_pos_emb", {}),
    "qwen3_5_half_mrope": (
        *_text_rotary("qwen3_5", "Qwen3_5", QWEN3_5_HALF, mrope_interleaved=True, partial_rotary_factor=0.5),
        "Qwen3_5TextRotaryEmbedding with partial_rotary_factor 0.5 (0.25 published) so that head_dim 16 has 4 "
        "rotated pairs, interleaved T H W T, the rest passed through", {}),
    "glm4v_mrope": (
        *_text_rotary("glm4v", "Glm4v", GLM4V, partial_rotary_factor=0.5),
        "Glm4vTextRotaryEmbedding (GLM-4.1V): adjacent pairs over half the head, mrope_section [1, 2, 1] "
        "(8:12:12 of 64 pairs needs 8), with apply_rotary_pos_emb", {}),
    "glm4v_moe_mrope": (
        *_text_rotary("glm4v_moe", "Glm4vMoe", GLM4V_MOE, partial_rotary_factor=0.5),
        "Glm4vMoeTextRotaryEmbedding (GLM-4.5V): half-split over half the head, mrope_section [1, 2, 1], "
        "with apply_rotary_pos_emb", {}),
    "ernie4_5vl_mrope": (
        *_text_rotary("ernie4_5_vl_moe", "Ernie4_5_VLMoe", ERNIE4_5_VL, library_sections=_ernie_sections),
        "Ernie4_5_VLMoeTextRotaryEmbedding: adjacent pairs, mrope_section [h, w, t] = [3, 3, 2] (22:22:20 of a "
        "128 head): H W H W H W then T T, with apply_rotary_pos_emb", {}),
    "qwen2vl_vision_rope2d": (
        QWEN2_VL_VISION, ("rope_2d",), _qwen2_vl_vision, _apply("qwen2_vl", "apply_rotary_pos_emb_vision"),
        "qwen2_vl/modeling_qwen2_vl.py",
        "Qwen2VLVisionRotaryEmbedding (axial) on [h, w] per patch, with apply_rotary_pos_emb_vision",
        {"ROPE-2": _PER_AXIS}),
    "pixtral_rope2d": (
        PIXTRAL_VISION, ("rope_2d",), _pixtral_vision, _apply("pixtral", unsqueeze_dim=2),
        "pixtral/modeling_pixtral.py",
        "PixtralVisionRotaryEmbedding on [h, w] per patch, with apply_rotary_pos_emb",
        {"ROPE-2": _FREQUENCY_GRID}),
}

_INSTALLED = available("transformers")
if _INSTALLED:
    from transformers.utils import logging as _logging

    _logging.set_verbosity_error()  # configuration advice on every build would drown the report

for _name, (_geometry_of, _designs, _build, _apply_of, _file, _description, _overrides) in CONFIGURATIONS.items():
    posenc.register(multiaxis_record(
        f"hf_{_name}", _geometry_of, designs=_designs, origin=ORIGIN,
        build=_build if _INSTALLED else missing("transformers"),
        apply=_apply_of, protocol="cos_sin",
        source=SOURCE.format(version("transformers") or "(not installed)", _file),
        description=_description, claims={**_COMMON, **_overrides}))
