"""transformers' Llama RoPE through the cos/sin protocol, one record per rope type.

``cos, sin = LlamaRotaryEmbedding(config)(x, position_ids)``, then
``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)`` on ``(batch, seq, heads, head_dim)``
(``unsqueeze_dim=2`` is the library's own argument for that layout). The rope types are those
of ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``: default, linear, dynamic, yarn,
longrope and llama3, at published settings.

What the library promises, from its code and docstrings (``modeling_rope_utils``): half-split
pairs (``rotate_half``); angles ``position_ids.float() · inv_freq`` in float32; cos and sin times
``attention_scaling`` (YaRN's ``0.1·ln s + 1``, LongRoPE's ``√(1 + ln s / ln L)``), returned in
``x``'s dtype. ``dynamic`` recomputes θ "when growing beyond the cached sequence length" and
resets it for sequences "in the original scale"; ``longrope`` uses its long factors when the call
is longer than ``original_max_position_embeddings``.
"""

from __future__ import annotations

from functools import partial

import torch

import posenc
from posenc.encoders.scaling import frequencies as schedules

from .support import ORIGIN, available, missing, validates_no_input, version

SOURCE = "transformers {} (models/llama/modeling_llama.py, modeling_rope_utils.py)"
ANGLES = torch.float32
#: LongRoPE's pre-trained length here: half the specs' max_len, so both factor sets are reached.
LONGROPE_ORIGINAL = 64


def _long_factors(pairs: int) -> list[float]:
    return [4.0 ** (i / max(pairs - 1, 1)) for i in range(pairs)]


def longrope_frequencies(rotary_dim: int, base: float, *, length: int) -> torch.Tensor:
    """LongRoPE as transformers applies it: short factors (1) up to the original length, long ones past it."""
    factors = _long_factors(rotary_dim // 2) if length > LONGROPE_ORIGINAL else [1.0] * (rotary_dim // 2)
    return schedules.longrope(rotary_dim, base, factors=factors)


def _parameters(rope_type: str, config: posenc.BuildConfig) -> tuple[dict, int]:
    """``rope_parameters`` and ``max_position_embeddings`` for a rope type at the specs' size."""
    base = {"rope_type": rope_type, "rope_theta": config.base}
    pairs = config.head_dim // 2
    return {
        "default": (base, config.max_len),
        "linear": ({**base, "factor": 4.0}, config.max_len),
        "dynamic": ({**base, "factor": 2.0}, config.max_len),
        "yarn": ({**base, "factor": 4.0, "original_max_position_embeddings": 2048}, 4 * 2048),
        "llama3": ({**base, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192}, 8 * 8192),
        "longrope": ({**base, "short_factor": [1.0] * pairs, "long_factor": _long_factors(pairs),
                      "original_max_position_embeddings": LONGROPE_ORIGINAL}, config.max_len),
    }[rope_type]


def _build(rope_type: str):
    def build(config: posenc.BuildConfig):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        parameters, max_positions = _parameters(rope_type, config)
        llama = LlamaConfig(hidden_size=config.d_model, num_attention_heads=config.n_heads,
                            max_position_embeddings=max_positions, rope_parameters=parameters)
        return LlamaRotaryEmbedding(llama).to(config.device)

    return build


def apply(q, k, cos, sin):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)


def _geometry(**fields) -> posenc.RotaryGeometry:
    return posenc.RotaryGeometry(layout="half_split", angle_dtype=ANGLES, **fields)


_HALF_SPLIT = posenc.refuted("rotate_half pairs (i, i + d/2): a permutation of the formula's coordinates",
                             specs=("test_output_equals_formula_elementwise",))
_SCHEDULE = posenc.refuted("the rope type changes θ on purpose for long context",
                           specs=("test_frequencies_follow_the_formula",))
_SCALED = posenc.refuted("cos and sin are multiplied by attention_scaling on purpose: norms grow by it")
_LENGTH = "θ follows the call's length on purpose ({})"
_COMMON = {
    "ROPE-13": _HALF_SPLIT,
    "PATH-1": posenc.not_applicable("cos/sin take explicit position_ids only"),
    posenc.CONTRACT: validates_no_input(
        "apply_rotary_pos_emb and the rotary module validate no input: integer q is promoted, an extra dimension "
        "broadcasts, a negative position is rotated by −p"),
}


def _length_dependent(why: str, *, grows: bool) -> dict:
    """What a θ that follows the call's length changes. ``grows``: θ keeps changing with the length
    (dynamic NTK); otherwise it switches once (LongRoPE), and calls past the switch share one θ."""
    reason = _LENGTH.format(why)
    changed = {
        "ROPE-1": posenc.refuted(reason + ": R_m (at length m+1) · R_n ≠ R_(m+n)", specs=("test_rotations_compose",)),
        "ROPE-4": posenc.refuted(reason + ": calls of different length turn at different rates"),
        "PATH-2": posenc.refuted(reason + ": keys cached at step j were rotated at length j + 1"),
        "ATT-4": posenc.refuted(reason + ": a shift past the original length changes every angle"),
    }
    if grows:
        changed |= {
            "ROPE-10a": posenc.refuted(reason + ": far positions are long calls"),
        }  # ROPE-11 holds: the length dependence is the same in every dtype, ROPE-10a's
    return changed


CONFIGURATIONS = {
    "default": (_geometry(), {}),
    "linear": (_geometry(scaling_factor=4.0), {"ROPE-14": posenc.HOLDS}),
    "dynamic": (_geometry(frequencies=partial(schedules.dynamic_ntk, factor=2.0, max_position=128),
                          length_dependent=True),
                _length_dependent("dynamic NTK: base grown past max_position_embeddings", grows=True)),
    "yarn": (_geometry(frequencies=partial(schedules.yarn, factor=4.0, original_max_position=2048),
                       magnitude=schedules.yarn_attention_factor(4.0)),
             {"ROPE-2": _SCHEDULE, "ROPE-3": _SCALED}),
    "llama3": (_geometry(frequencies=partial(schedules.llama3, factor=8.0, low_freq_factor=1.0,
                                             high_freq_factor=4.0, original_max_position=8192)),
               {"ROPE-2": _SCHEDULE}),
    "longrope": (_geometry(frequencies=longrope_frequencies, length_dependent=True,
                           magnitude=schedules.longrope_attention_factor(128 / LONGROPE_ORIGINAL, LONGROPE_ORIGINAL)),
                 {**_length_dependent("LongRoPE: long factors past original_max_position_embeddings", grows=False),
                  "ROPE-3": _SCALED}),  # θ at short lengths is the formula's: ROPE-2 holds
}

_INSTALLED = available("transformers")
if _INSTALLED:
    from transformers.utils import logging as _logging

    _logging.set_verbosity_error()  # configuration advice on every build would drown the report

for _rope_type, (_geometry_of, _overrides) in CONFIGURATIONS.items():
    posenc.register(posenc.EncoderRecord(
        origin=ORIGIN,
        name=f"hf_{_rope_type}",
        build=_build(_rope_type) if _INSTALLED else missing("transformers"),
        apply=apply,
        kind="rotary",
        protocol="cos_sin",
        source=SOURCE.format(version("transformers") or "(not installed)") + f", rope_type={_rope_type!r}",
        geometry=_geometry_of,
        description=f"LlamaRotaryEmbedding, rope_type {_rope_type!r}, with apply_rotary_pos_emb",
        claims=posenc.rotary_claims({**_COMMON, **_overrides}),
        min_head_dim=4 if _rope_type == "dynamic" else 2,  # its base formula divides by d − 2
    ))
