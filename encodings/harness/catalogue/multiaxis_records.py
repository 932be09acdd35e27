"""The built-in multi-axis RoPEs: a position per axis (time, height, width), as vision-language
models use them. Not in the documents: their claims are the literature's (MROPE-*), and at equal
ids on every axis each is a 1D RoPE, judged by the rotary claims as a cross-check.

Sections are shares of the pairs (:class:`~.records.RotaryGeometry`'s ``axis_sections``), so that
every head size the specs draw keeps the design's proportions: Qwen2-VL's 16:24:24 of a 128-dim
head is 2:3:3.
"""

from __future__ import annotations

import math

import torch

from ...encoders.multiaxis import MixedRotaryEmbedding, MultiAxisRotaryEmbedding
from .declarations import multiaxis_claims
from .record_builders import placed
from .records import EncoderRecord, RotaryGeometry, not_applicable, refuted

_NOT_THE_SCHEDULE = refuted("each axis has a schedule of its own over its own pairs: with equal ids θ is not "
                            "base^(−2i/d)", specs=("test_frequencies_follow_the_formula",))
_MIXED_THETA = "θ_{a,i} are learned, mixed over the axes"


def _multiaxis_build(geometry: RotaryGeometry):
    def build(c):
        r = geometry.rotary_dim(c.head_dim)
        return placed(MultiAxisRotaryEmbedding(c.head_dim, geometry.sections(r), base=c.base,
                                               order=geometry.axis_order, schedule=geometry.axis_schedule,
                                               layout=geometry.layout, rotary_dim=r), c)
    return build


#: The rotary claims whose specs build at the specs' head_dim 16 only: ``n/a`` for sections that need more.
AT_HEAD_DIM_16 = ("ROPE-1", "ROPE-3", "ROPE-4", "ROPE-5", "ROPE-7", "ROPE-8", "ROPE-9", "ROPE-10a", "ROPE-11",
                  "ATT-4", "PATH-1", "PATH-2", "PATH-3")


def multiaxis_record(name: str, geometry: RotaryGeometry, *, designs: tuple[str, ...], source: str,
                     description: str, claims=None, build=None, **fields) -> EncoderRecord:
    """A multi-axis record: head sizes whose pairs the axes can share in the geometry's proportions
    (where that excludes head_dim 16, the rotary claims judged there read ``n/a``, with the reason)."""
    multiple = round(2 * sum(geometry.axis_sections) / geometry.rotary_fraction)
    if multiple > 16:
        why = not_applicable(f"its sections {':'.join(map(str, geometry.axis_sections))} need head_dim {multiple}; "
                             "the specs judge this rotary claim at head_dim 16 (the MROPE claims run at its size)")
        claims = {**{c: why for c in AT_HEAD_DIM_16}, **(claims or {})}
    return EncoderRecord(name=name, build=build or _multiaxis_build(geometry), kind="rotary", source=source,
                         description=description, geometry=geometry, designs=designs,
                         claims=multiaxis_claims(claims), head_dim_multiple=multiple, min_head_dim=multiple, **fields)


def heo_mixed_init(rotary_dim: int, theta: float = 10.0, seed: int = 0) -> torch.Tensor:
    """RoPE-Mixed's initial ``(θ_x, θ_y)`` per pair for one head, written from Heo et al.'s
    ``init_random_2d_freqs`` (not from the module's code): magnitudes ``theta^(−4j/d)``, pair ``j``
    along a random ``φ`` and pair ``j + d/4`` along ``φ + π/2``; ``φ`` is the seed's first uniform draw."""
    quarter = rotary_dim // 4
    phi = float(torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)) * 2 * math.pi
    magnitudes = [theta ** (-4.0 * j / rotary_dim) for j in range(quarter)] * 2
    directions = [phi] * quarter + [phi + math.pi / 2] * quarter
    return torch.tensor([[m * math.cos(d) for m, d in zip(magnitudes, directions, strict=True)],
                         [m * math.sin(d) for m, d in zip(magnitudes, directions, strict=True)]], dtype=torch.float64)


QWEN2_VL = RotaryGeometry(layout="half_split", axis_sections=(2, 3, 3))
QWEN3_VL = RotaryGeometry(layout="half_split", axis_sections=(6, 5, 5), axis_order="interleaved")
GLM4V = RotaryGeometry(layout="interleaved", axis_sections=(2, 3, 3), rotary_fraction=0.5)
AXIAL_2D = RotaryGeometry(layout="half_split", axis_sections=(1, 1), axis_schedule="per_axis")
MIXED_2D = RotaryGeometry(layout="interleaved", axis_sections=(1, 1), mixed_frequencies=heo_mixed_init)

MULTIAXIS_RECORDS: tuple[EncoderRecord, ...] = (
    multiaxis_record(
        "mrope_qwen2vl", QWEN2_VL, designs=("mrope",),
        source="Qwen2-VL (arXiv 2409.12191 §2.1; transformers' Qwen2VLRotaryEmbedding), sections 16:24:24 of a head",
        description="M-RoPE: time, height, width ids each turning a contiguous section of the pairs, half-split"),
    multiaxis_record(
        "mrope_qwen3vl", QWEN3_VL, designs=("mrope",),
        source="Qwen3-VL's interleaved M-RoPE, sections 24:20:20 (transformers' Qwen3VLTextRotaryEmbedding); "
               "its shares 6:5:5 need head_dim 32, where the rotary claims at head_dim 16 read n/a",
        description="M-RoPE with the axes interleaved over the pairs (T H W … then T), half-split"),
    multiaxis_record(
        "mrope_glm4v", GLM4V, designs=("mrope",),
        source="GLM-4.1V (transformers' Glm4vTextRotaryEmbedding): half of each head rotated, adjacent pairs "
               "(2i, 2i+1), sections 8:12:12; from head_dim 32",
        description="contiguous M-RoPE sections 2:3:3 over adjacent pairs of the rotated half"),
    multiaxis_record(
        "rope_2d_axial", AXIAL_2D, designs=("rope_2d",),
        source="axial 2D RoPE in Qwen2-VL's vision tower convention (half-split, height first, base 10^4); Heo et "
               "al. (ECCV 2024) use the same schedule per axis with adjacent pairs, width first, base 100",
        description="height ids turn the first half of the pairs, width ids the second, each with its own schedule",
        claims={"ROPE-2": _NOT_THE_SCHEDULE}),
    multiaxis_record(
        "rope_2d_mixed", MIXED_2D, designs=("rope_2d",),
        source="RoPE-Mixed (Heo et al., ECCV 2024): θ_{x,i}·p_x + θ_{y,i}·p_y, θ learned; initialised as the "
               "paper's code does for one head (magnitudes 10^(−4j/d), one random direction), shared by the heads",
        description="every pair turns with both axes by learned frequencies",
        build=lambda c: placed(MixedRotaryEmbedding(c.head_dim), c),
        dtypes=(torch.float32, torch.float64),  # θ is a weight: in half precision it is rounded like any
        claims={"ROPE-2": refuted(f"{_MIXED_THETA}: with equal ids pair i turns by θ_x,i + θ_y,i, neither "
                                  "base^(−2i/d) nor a bound that decays in trend"),
                "ROPE-5": refuted(f"{_MIXED_THETA}: they are trainable parameters by design"),
                "MROPE-2": not_applicable(f"{_MIXED_THETA}: every pair turns with both axes, no section owns it")}),
)
