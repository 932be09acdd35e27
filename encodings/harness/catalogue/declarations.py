"""Declarations shared by families of records: what a correct design of each kind claims.

A record starts from its family's defaults and overrides what differs
(:func:`posenc.harness.catalogue.records.with_defaults`). Plug-ins use :func:`rotary_claims`.
"""

from __future__ import annotations

from .claims import CLAIMS, PRODUCER_CLAIMS, VLM_CLAIMS
from .records import HOLDS, not_applicable, with_defaults


def family(prefixes: tuple[str, ...], reason: str) -> dict:
    """``n/a`` for every claim whose ID starts with one of ``prefixes``."""
    return {c: not_applicable(reason) for c in CLAIMS if c.startswith(prefixes)}


NOT_PERF = {
    "PERF-1": not_applicable("the documents' timing table covers learnable, sinusoidal and RoPE only"),
    "PERF-2": not_applicable("the documents' memory table covers learnable, sinusoidal and RoPE only"),
    "ROPE-12": not_applicable("RoPE overhead is measured inside softmax attention"),
    "ROPE-10b": not_applicable("the length-extrapolation experiment trains softmax attention with RoPE"),
}
NOT_ATTENTION_MODULE = {
    "ATT-1": not_applicable("not an attention module"),
    "ATT-2": not_applicable("not an attention module"),
    "ATT-3": not_applicable("not a causal attention module"),
    "ATT-5": not_applicable("takes no head count"),
    "ROPE-6": not_applicable("applied to q and k only; the V path is checked on attention modules"),
}

#: A correct RoPE on (batch, seq, heads, head_dim): every rotary claim holds.
ROTARY_DEFAULTS = {
    **{c: HOLDS for c in CLAIMS},
    **family(("ABS-", "LIN-", "HYB-", "DYN-", "EXT-", "ALIBI-"), "not a claim about this design"),
    **family(("MODEL-", "VLM-"), "a relation of a whole model"),
    **family(("IDS-", "PACK-", "CP-"), "a claim about the code that makes position ids"),
    **family(("MROPE-",), "one position per token: the multi-axis claims are about M-RoPE and 2D RoPE"),
    **NOT_ATTENTION_MODULE,
    **NOT_PERF,
    "ROPE-13": not_applicable("ROPE-13 is about 004 §3.2's code (the published_*_004 encoders)"),
    "ROPE-14": not_applicable("no position scaling"),
}

#: The length experiment trains designs, not records: the built-in record whose cell carries each of
#: its claims (specs/test_extrapolation.py judges them there; README's findings name them).
EXPERIMENT_CELLS = {"ROPE-10b": "attention_rope_causal", "EXT-1": "attention_rope_causal", "EXT-2": "learnable",
                    "EXT-3": "sinusoidal", "ROPE-14": "rope_linear_scaled"}

NOT_ROTARY_PATHS = family(("PATH-",), "call paths are checked on rotary encoders")

ADDITIVE_DEFAULTS = {
    **{c: not_applicable("not a claim about absolute encodings") for c in CLAIMS},
    **NOT_ROTARY_PATHS,
}

#: ALiBi's bias (the length experiment's baseline): only its own claims and the contract.
BIAS_DEFAULTS = {
    **{c: not_applicable("a claim about the documents' designs; ALiBi is the experiment's baseline") for c in CLAIMS},
    **{c: HOLDS for c in CLAIMS if c.startswith("ALIBI-")},
}

ATTENTION_DEFAULTS = {
    **{c: not_applicable("checked on the rotary encoder this module uses") for c in CLAIMS},
    **NOT_PERF,
    **NOT_ROTARY_PATHS,
    "ATT-1": HOLDS,
    "ATT-2": HOLDS,
    "ATT-3": not_applicable("no causal mask"),
    "ATT-4": HOLDS,
    "ATT-5": HOLDS,
    "ROPE-6": HOLDS,
}


def rotary_claims(overrides=None) -> dict:
    """Declarations for a correct per-head RoPE; pass overrides for what differs."""
    return with_defaults(ROTARY_DEFAULTS, overrides)


#: A correct multi-axis RoPE: a 1D RoPE at equal ids, and every multi-axis claim holds.
MULTIAXIS_DEFAULTS = {**ROTARY_DEFAULTS, **{c: HOLDS for c in CLAIMS if c.startswith("MROPE-")}}


def multiaxis_claims(overrides=None) -> dict:
    """Declarations for a correct multi-axis RoPE (M-RoPE, 2D); pass overrides for what differs."""
    return with_defaults(MULTIAXIS_DEFAULTS, overrides)


#: A whole causal LM: the model relations hold; the encoders' claims are judged on encoders.
MODEL_DEFAULTS = {
    **{c: not_applicable("a claim about an encoder; the model's relations are MODEL-*") for c in CLAIMS},
    **{c: HOLDS for c in CLAIMS if c.startswith("MODEL-")},
    **{c: not_applicable("not run as a vision-language model with M-RoPE ids (traits.vision)") for c in VLM_CLAIMS},
}


def model_claims(overrides=None) -> dict:
    """Declarations for a correct causal LM (every model relation holds); pass overrides for what differs."""
    return with_defaults(MODEL_DEFAULTS, overrides)


def model_claims_for(traits, overrides=None) -> dict:
    """:func:`model_claims` with what ``traits`` exclude declared ``n/a``: shifts and bf16 far
    queries need position ids, padding needs a mask, a shift means nothing to absolute positions,
    MODEL-7 needs a maximum and MODEL-8 a declared way to pack documents; the VLM relations hold
    where the model takes pictures."""
    excluded = {}
    if not traits.takes_position_ids:
        excluded["MODEL-1"] = excluded["MODEL-6"] = not_applicable(
            "ALiBi counted from the sequence and its mask: the model reads no position ids"
            if traits.positions == "alibi" else "the model takes no position ids")
    elif traits.positions == "absolute":
        excluded["MODEL-1"] = not_applicable("absolute positions: a shift changes every embedding")
    if not traits.takes_attention_mask:
        excluded["MODEL-4"] = not_applicable("the model takes no attention mask: no padding")
    if traits.max_position is None:
        excluded["MODEL-7"] = not_applicable("the model has no maximum length")
    if traits.packing == "none":
        excluded["MODEL-8"] = not_applicable("the model declares no way to pack documents (traits.packing)")
    if traits.vision:
        excluded.update({c: HOLDS for c in VLM_CLAIMS})
    return model_claims({**excluded, **(overrides or {})})


def producer_claims(protocol: str, overrides=None) -> dict:
    """Declarations for a correct position producer of ``protocol`` (its family's claims hold,
    every other claim is ``n/a``); pass overrides for what differs."""
    defaults = {c: not_applicable("a claim about encodings; a position producer is judged on its own claims")
                for c in CLAIMS}
    defaults.update({c: HOLDS for c in PRODUCER_CLAIMS[protocol]})
    return with_defaults(defaults, overrides)


def producer_claims_for(traits, overrides=None) -> dict:
    """:func:`producer_claims` with what ``traits`` exclude declared ``n/a``: time ids need a
    video, 3D cuts need 3D ids, restoring needs a ``restore``."""
    excluded = {}
    if traits.protocol == "mrope_ids" and traits.time is None:
        excluded["IDS-4"] = not_applicable("the builder takes no video")
    if traits.protocol == "packing" and not traits.boundaries:
        excluded["PACK-2"] = not_applicable("the collator declares no boundaries besides the positions")
    if traits.protocol == "cp_shard":
        if traits.axes != 3:
            excluded["CP-3"] = not_applicable("1D ids: no axis to cut on")
        if not traits.restores:
            excluded["CP-4"] = not_applicable("the sharder has no restore(shards)")
    return producer_claims(traits.protocol, {**excluded, **(overrides or {})})
