"""The built-in multi-axis RoPEs: a position per axis (time, height, width), as vision-language
models use them. Not in the documents: their claims are the literature's (MROPE-*), and at equal
ids on every axis each is a 1D RoPE, judged by the rotary claims as a cross-check.

Sections are shares of the pairs (:class:`~.records.RotaryGeometry`'s ``axis_sections``), so that
every head size the specs draw keeps the design's proportions: Qwen2-VL's 16:24:24 of a 128-dim
head is 2:3:3.
"""

from __future__ import annotations

import torch

from ..encoders.multiaxis import MixedRotaryEmbedding, MultiAxisRotaryEmbedding, mixed_frequencies
from .declarations import multiaxis_claims
from .record_builders import placed
from .records import EncoderRecord, RotaryGeometry, not_applicable, refuted

_NOT_THE_SCHEDULE = refuted("each axis has a schedule of its own over its own pairs: with equal ids θ is not "
                            "base^(−2i/d)", specs=("test_frequencies_follow_the_formula",))
_MIXED_THETA = "θ_{a,i} are learned, mixed over the axes"
_LEARNED_IN_HALF = "θ_{a,i} is a trainable parameter: in half precision it is rounded like any weight"


def _multiaxis_build(geometry: RotaryGeometry):
    def build(c):
        r = geometry.rotary_dim(c.head_dim)
        return placed(MultiAxisRotaryEmbedding(c.head_dim, geometry.sections(r), base=c.base,
                                               order=geometry.axis_order, schedule=geometry.axis_schedule,
                                               layout=geometry.layout, rotary_dim=r), c)
    return build


def multiaxis_record(name: str, geometry: RotaryGeometry, *, designs: tuple[str, ...], source: str,
                     description: str, claims=None, build=None, **fields) -> EncoderRecord:
    """A multi-axis record: head sizes whose pairs the axes can share in the geometry's proportions."""
    multiple = round(2 * sum(geometry.axis_sections) / geometry.rotary_fraction)
    return EncoderRecord(name=name, build=build or _multiaxis_build(geometry), kind="rotary", source=source,
                         description=description, geometry=geometry, designs=designs,
                         claims=multiaxis_claims(claims), head_dim_multiple=multiple, min_head_dim=multiple, **fields)


QWEN2_VL = RotaryGeometry(layout="half_split", axis_sections=(2, 3, 3))
QWEN3_VL = RotaryGeometry(layout="half_split", axis_sections=(4, 2, 2), axis_order="interleaved")
GLM4V = RotaryGeometry(layout="interleaved", axis_sections=(2, 3, 3))
AXIAL_2D = RotaryGeometry(layout="half_split", axis_sections=(1, 1), axis_schedule="per_axis")
MIXED_2D = RotaryGeometry(layout="interleaved", axis_sections=(1, 1),
                          mixed_frequencies=lambda rotary_dim: mixed_frequencies(rotary_dim, 10.0, 0))

MULTIAXIS_RECORDS: tuple[EncoderRecord, ...] = (
    multiaxis_record(
        "mrope_qwen2vl", QWEN2_VL, designs=("mrope",),
        source="Qwen2-VL (arXiv 2409.12191 §2.1; transformers' Qwen2VLRotaryEmbedding), sections 16:24:24 of a head",
        description="M-RoPE: time, height, width ids each turning a contiguous section of the pairs, half-split"),
    multiaxis_record(
        "mrope_qwen3vl", QWEN3_VL, designs=("mrope",),
        source="Qwen3-VL / Qwen3.5 interleaved M-RoPE (transformers' Qwen3VLTextRotaryEmbedding), THW… then T",
        description="M-RoPE with the axes interleaved over the pairs (T H W T H W T T at 8 pairs), half-split"),
    multiaxis_record(
        "mrope_glm4v", GLM4V, designs=("mrope",),
        source="GLM-4.1V's pairing (transformers' Glm4vTextRotaryEmbedding): adjacent pairs (2i, 2i+1), sections "
               "8:12:12 (GLM rotates half of each head; at the specs' head_dim 16 the whole head is rotated)",
        description="contiguous M-RoPE sections 2:3:3 over adjacent pairs"),
    multiaxis_record(
        "rope_2d_axial", AXIAL_2D, designs=("rope_2d",),
        source="axial 2D RoPE (Heo et al., ECCV 2024 §3.2; Qwen2-VL's vision tower), height then width",
        description="height ids turn the first half of the pairs, width ids the second, each with its own schedule",
        claims={"ROPE-2": _NOT_THE_SCHEDULE}),
    multiaxis_record(
        "rope_2d_mixed", MIXED_2D, designs=("rope_2d",),
        source="RoPE-Mixed (Heo et al., ECCV 2024 §3.3): θ_{x,i}·p_x + θ_{y,i}·p_y, θ learned (initialised as "
               "the paper's code: magnitudes 10^(−4j/d), one random direction per head)",
        description="every pair turns with both axes by learned frequencies",
        build=lambda c: placed(MixedRotaryEmbedding(c.head_dim), c),
        dtypes=(torch.float32, torch.float64),  # the declared θ is float64; a half θ is another module
        claims={"ROPE-2": refuted(f"{_MIXED_THETA}: with equal ids pair i turns by θ_x,i + θ_y,i, neither "
                                  "base^(−2i/d) nor a bound that decays in trend"),
                "ROPE-5": refuted(f"{_MIXED_THETA}: they are trainable parameters by design"),
                "PATH-3": refuted(f"{_LEARNED_IN_HALF}: module.to(dtype) rounds it below float64",
                                  dtypes=(torch.float32, torch.bfloat16, torch.float16)),
                "MROPE-2": not_applicable(f"{_MIXED_THETA}: every pair turns with both axes, no section owns it")}),
)
