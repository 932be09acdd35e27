"""A whole causal LM as the model relations call it (``specs/test_models.py``).

Every model is seen through one convention::

    logits, cache = subject(input_ids, position_ids=None, attention_mask=None, cache=None)

``cache=None`` starts a new sequence; passing the returned cache continues it (a decode step, or
the next chunk of a prefill); ``attention_mask`` covers the cache and the new tokens, as
transformers takes it. Adapters map a model's own convention onto it:

* :class:`HFCausalLM`: transformers' ``*ForCausalLM`` (``position_ids=``, ``attention_mask=``,
  a ``DynamicCache``);
* :class:`InputPosLM`: ``model(tokens, input_pos=positions)`` with a KV cache the model keeps
  itself, reset at a new sequence (torchtune, litgpt, gpt-fast; no attention mask);
* :class:`TupleLM`: a model that already answers ``(logits, cache)`` in the convention above.

:func:`adapt` picks one for any model object (``--model FILE.py:NAME``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from .records import ModelTraits


class NotInConvention(Exception):
    """The model's call convention cannot express what a relation needs (a mask, explicit positions):
    the relation is not applicable to it, which the spec reports as such."""


class ModelSubject(nn.Module):
    """A causal LM in the harness's convention; ``.to()`` reaches the model as it is."""

    def __init__(self, model: nn.Module, traits: ModelTraits):
        super().__init__()
        self.model, self.traits = model.eval(), traits

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):  # pragma: no cover
        raise NotImplementedError


def _logits(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return out[0]
    return out.logits


class HFCausalLM(ModelSubject):
    """transformers' causal LM: ``model(input_ids, position_ids=, attention_mask=, cache=, use_cache=True)``."""

    def __init__(self, model: nn.Module, traits: ModelTraits):
        super().__init__(model, traits)
        parameters = inspect.signature(model.forward).parameters
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.takes_position_ids = "position_ids" in parameters

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
        from transformers import DynamicCache

        arguments = {"input_ids": input_ids, "use_cache": True}
        if position_ids is not None:
            if not self.takes_position_ids:
                raise NotInConvention(f"{type(self.model).__name__} takes no position_ids")
            arguments["position_ids"] = position_ids
        if attention_mask is not None:
            arguments["attention_mask"] = attention_mask
        arguments[self.cache_argument] = DynamicCache(config=self.model.config) if cache is None else cache
        out = self.model(**arguments)
        returned = getattr(out, "cache", None)
        return out.logits, returned if returned is not None else out.past_key_values


@dataclass
class _Cursor:
    """The cache of a model that keeps its own: how many positions it holds."""

    length: int


class InputPosLM(ModelSubject):
    """``model(tokens, input_pos=positions)``, a KV cache kept inside the model: ``reset`` (the first
    of ``reset_cache``, ``reset_caches``, ``clear_cache`` it has) starts a new sequence."""

    RESETS = ("reset_cache", "reset_caches", "clear_cache")

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise NotInConvention(f"{type(self.model).__name__} takes no attention mask (input_pos convention)")
        start = 0 if cache is None else cache.length
        if cache is None:
            reset = next((getattr(self.model, name) for name in self.RESETS if hasattr(self.model, name)), None)
            if reset is not None:
                reset()
        n = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(start, start + n, device=input_ids.device)
        elif position_ids.dim() == 2 and bool((position_ids == position_ids[:1]).all()):
            position_ids = position_ids[0]  # one row of positions for the batch, as such models take them
        return _logits(self.model(input_ids, input_pos=position_ids)), _Cursor(start + n)


class TupleLM(ModelSubject):
    """A model that already answers ``(logits, cache)`` in the harness's convention."""

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None):
        logits, cache = self.model(input_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache)
        return logits, cache


def is_transformers_model(model) -> bool:
    return any(cls.__module__.startswith("transformers.") for cls in type(model).__mro__)


def adapt(model: nn.Module, traits: ModelTraits) -> ModelSubject:
    """The adapter for ``model``'s convention: transformers' models, ``input_pos`` models, or a
    model that already follows the harness's."""
    if isinstance(model, ModelSubject):
        return model
    if is_transformers_model(model):
        return HFCausalLM(model, traits)
    if "input_pos" in inspect.signature(model.forward).parameters:
        return InputPosLM(model, traits)
    return TupleLM(model, traits)


#: transformers' model types whose position tables stop at the configured maximum.
FIXED_TABLES = ("gptj", "codegen", "mpt")


def rope_parameters(parameters) -> dict:
    """transformers' ``rope_parameters``, flat; per layer type (Gemma 3), the first type's."""
    parameters = parameters or {}
    if "rope_type" not in parameters and parameters:
        parameters = next(iter(parameters.values()))
    return parameters if isinstance(parameters, dict) else {}


def _rope_type(config) -> str:
    return rope_parameters(getattr(config, "rope_parameters", None)).get("rope_type", "default")


def rope_type_designs(kind: str) -> dict[str, str]:
    """The model relations a transformers rope type breaks on purpose, with why: ``dynamic``
    recomputes its base from a call's largest position and ``longrope`` switches its factors past
    the original length (for the whole batch), as transformers documents."""
    threshold = ("a call's largest position picks {what}: {path} crosses the threshold where the other path does "
                 "not (transformers documents it)")
    if kind == "dynamic":
        return {"MODEL-1": threshold.format(what="the base", path="a shift past the maximum"),
                "MODEL-2": threshold.format(what="the base", path="one full pass"),
                "MODEL-3": threshold.format(what="the base", path="one full pass")}
    if kind == "longrope":
        return {"MODEL-1": threshold.format(what="short or long factors", path="a shift past the original length"),
                "MODEL-2": threshold.format(what="short or long factors", path="one full pass"),
                "MODEL-3": threshold.format(what="short or long factors", path="one full pass"),
                "MODEL-4": "the factors follow the batch's largest position: a short row beside a row past the "
                           "original length gets the long factors, alone the short ones"}
    return {}


def transformers_designs(model) -> dict[str, str]:
    """:func:`rope_type_designs` of a transformers model's config (nothing for other models)."""
    config = getattr(model, "config", None)
    return rope_type_designs(_rope_type(config)) if config is not None and is_transformers_model(model) else {}


def vocabulary_of(model: nn.Module) -> int:
    """The size of the logits' last axis, read off one call on token 0."""
    subject = adapt(model, ModelTraits(takes_attention_mask=False))
    with torch.no_grad():
        logits, _ = subject(torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device))
    return int(logits.shape[-1])


def traits_of(model: nn.Module, **given) -> ModelTraits:
    """What a model's config says of it (transformers' ``config``; else ``vocab_size`` and
    ``max_position``/``max_seq_len`` attributes), completed by ``given``."""
    config = getattr(model, "config", None)
    found = {}
    if config is not None and is_transformers_model(model):
        found["vocab_size"] = int(config.vocab_size)
        found["max_position"] = next((int(getattr(config, a)) for a in (
            "max_position_embeddings", "n_positions", "max_seq_len") if getattr(config, a, None)), None)
        rope = rope_parameters(getattr(config, "rope_parameters", None))
        if rope.get("original_max_position_embeddings"):
            found["original_max_position"] = int(rope["original_max_position_embeddings"])
        takes = inspect.signature(model.forward).parameters
        found["takes_position_ids"] = "position_ids" in takes
        # GPT-J's sin/cos table and MPT's ALiBi table have n_positions / max_seq_len rows: no extrapolation.
        found["extrapolates"] = getattr(config, "model_type", "") not in FIXED_TABLES
        alibi = getattr(config, "alibi", False) or getattr(getattr(config, "attn_config", None), "alibi", False) \
            or type(model).__name__.startswith("Bloom")
        absolute = any(isinstance(m, nn.Embedding) and n.endswith(("wpe", "embed_positions", "position_embeddings"))
                       for n, m in model.named_modules())
        found["positions"] = "alibi" if alibi else "absolute" if absolute else "relative"
        found["library"] = f"transformers {_version('transformers')} {type(model).__name__}"
    else:
        if "vocab_size" not in given:
            found["vocab_size"] = int(model.vocab_size) if hasattr(model, "vocab_size") else vocabulary_of(model)
        for attribute in ("max_position", "max_seq_len", "max_position_embeddings"):
            if getattr(model, attribute, None):
                found["max_position"] = int(getattr(model, attribute))
                break
        if "input_pos" in inspect.signature(model.forward).parameters:
            found["takes_attention_mask"] = False
        found["library"] = type(model).__name__
    return ModelTraits(**{**found, **given})


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"
