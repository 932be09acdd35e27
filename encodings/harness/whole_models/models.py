"""A whole causal LM as the model relations call it (``specs/test_models.py``).

Every model is seen through one convention::

    logits, cache = subject(input_ids, position_ids=None, attention_mask=None, cache=None,
                            document_ids=None)

``cache=None`` starts a new sequence; passing the returned cache continues it (a decode step, or
the next chunk of a prefill); ``attention_mask`` covers the cache and the new tokens, as
transformers takes it. ``position_ids=None`` is the model's *own* regime: it derives its
positions itself, from the cache's length while continuing and from the mask under padding.
``document_ids`` marks documents packed in one row (MODEL-8) for a model that takes them.
``subject.generate(ids, mask, prompt)`` decodes ``ids[:, prompt:]`` one token at a time after a
prompt, the model choosing every position; it returns the logits of the prompt's last token and
of each decoded token but the last. Adapters map a model's own convention onto it:

* :class:`HFCausalLM`: transformers' ``*ForCausalLM`` (``position_ids=``, ``attention_mask=``,
  the cache the model makes on its first call, of whatever class it is);
* :class:`InputPosLM`: ``model(tokens, input_pos=positions)`` with a KV cache the model keeps
  itself, reset at a new sequence (litgpt, gpt-fast; no attention mask);
* :class:`~.torchtune_lm.TorchtuneLM`: torchtune's decoders (caches set up and reset by the
  adapter, its mask built from the harness's);
* :class:`TupleLM`: a model that already answers ``(logits, cache)`` in the convention above.

:func:`adapt` picks one for any model object (``--model FILE.py:NAME``).
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass

import torch
from torch import nn

# another tower's tables read no text positions
from .attribution import POSITION_TABLES, TOWER, other_tower, text_config
from .model_subject import ModelSubject, NotInConvention  # noqa: F401  (specs and adapters import them here)
from ..catalogue.records import ModelTraits
from .torchtune_lm import TorchtuneLM, is_torchtune_model, torchtune_traits


def _logits(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return out[0]
    return _answered_logits(out)


def _answered_logits(out) -> torch.Tensor:
    """A transformers output's logits; one without (a bare decoder's hidden states) is no causal LM."""
    logits = getattr(out, "logits", None)
    if logits is None:
        fields = out.items() if callable(getattr(out, "items", None)) else getattr(out, "__dict__", {}).items()
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in fields if isinstance(v, torch.Tensor))
        raise TypeError(f"it answers no logits ({type(out).__name__}: {shapes or 'no tensors'}); "
                        "--model judges a causal LM with its LM head")
    return logits


#: The names transformers' models give the cache they take and return (RWKV's ``state``, Reformer's
#: ``past_buckets_states``), in the order they are looked for in a forward's parameters.
CACHE_ARGUMENTS = ("cache", "past_key_values", "cache_params", "state", "past_buckets_states")


def _module_state(model: nn.Module) -> set[str]:
    """The tensors a model's modules keep as plain attributes (RecurrentGemma's ``conv1d_state``,
    ``recurrent_states``: a state kept in its modules), neither parameters nor buffers."""
    return {f"{name}.{attribute}" for name, module in model.named_modules()
            for attribute, value in vars(module).items() if isinstance(value, torch.Tensor)}


class HFCausalLM(ModelSubject):
    """transformers' causal LM: ``model(input_ids, position_ids=, attention_mask=, cache=, use_cache=True)``."""

    #: A step that answers logits of another shape than its new tokens continues the cache by a
    #: convention of the model's own (CpmAnt takes the full ids each call): its cached relations
    #: are ``n/a``, not blocked (a user's model in the harness's convention has no such excuse).
    continues_by_its_own_convention = True

    def __init__(self, model: nn.Module, traits: ModelTraits):
        super().__init__(model, traits)
        parameters = inspect.signature(model.forward).parameters
        self.cache_argument = next((a for a in CACHE_ARGUMENTS if a in parameters), "past_key_values")
        #: Its forward names a cache (a ``**kwargs`` that would swallow one is no cache: OpenAI GPT).
        self.takes_cache = self.cache_argument in parameters
        self.takes_position_ids = traits.takes_position_ids  # its signature, or passed on by **kwargs
        #: The model returns no cache (its state in its modules): the harness keeps the one it passes.
        self.caller_keeps_cache = False
        #: Of such a model, whether the cache it is handed grows with its calls (Granite 4 Vision keeps
        #: its keys there and counts its own positions from its length: it only never returns it), or
        #: stays empty (RecurrentGemma's state is in its modules). None until known.
        self.fills_handed_cache = None
        self._state_before = _module_state(model)  # what its modules keep before any call
        #: Its position table skips its pad token (RoBERTa's ``padding_idx``): it counts its own
        #: positions past its pads, so none are derived for it from the mask.
        self.counts_past_its_pads = any(
            isinstance(m, nn.Embedding) and m.padding_idx is not None and name.rsplit(".", 1)[-1] in POSITION_TABLES
            for name, m in model.named_modules())

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        if document_ids is not None:
            raise NotInConvention("transformers tells packed documents by position ids that restart, not by ids")
        # transformers detects packed documents only without a cache and a mask (a training call)
        packed = cache is None and attention_mask is None and position_ids is not None and self._packed(position_ids)
        arguments = {"input_ids": input_ids, "use_cache": not packed}
        if position_ids is None and cache is not None and self.caller_keeps_cache and not self.fills_handed_cache:
            raise NotInConvention(f"{type(self.model).__name__} returns no cache (its state stays in its modules): "
                                  "only its generate continues a sequence with positions of its own")
        if position_ids is None and self.takes_position_ids and attention_mask is not None \
                and not self.counts_past_its_pads and not bool(attention_mask.bool().all()):
            # Under padding transformers' forward counts from the cache alone; its generation derives
            # the positions from the mask (the model's own code, as generate runs it).
            if not hasattr(self.model, "_prepare_position_ids_for_generation"):
                raise NotInConvention(f"{type(self.model).__name__} has no transformers generation of its own to "
                                      "derive positions from a padded mask")
            derived = self.model._prepare_position_ids_for_generation(input_ids, {"attention_mask": attention_mask})
            if derived is not None and self._generation_drops_position_ids(input_ids, attention_mask, derived):
                derived = None  # its generate lets it count its own (Kosmos-2)
            position_ids = None if derived is None else derived[..., -input_ids.shape[1]:]  # None: its own (Reformer)
        if position_ids is not None:
            if not self.takes_position_ids and self.traits.packing != "positions":  # Falcon's ALiBi: for its mask
                raise NotInConvention(f"{type(self.model).__name__} takes no position_ids")
            if packed and position_ids.ndim == 2 and self._packs_by_text_row():
                position_ids = position_ids[None].expand(4, *position_ids.shape)  # text row, then t, h, w alike
            arguments["position_ids"] = position_ids
        if attention_mask is not None:
            arguments["attention_mask"] = attention_mask
        return self._answer(arguments, cache)

    def _packs_by_text_row(self) -> bool:
        """Whether the model's mask reads packed documents only from a text row put before its
        M-RoPE ids, (4, batch, seq), as Qwen2-VL's does, and not from (batch, seq) ids."""
        if getattr(self, "_text_row", None) is None:
            self._text_row = not reads_packed_positions(self.model) and reads_packed_positions(self.model, True)
        return self._text_row

    def _generation_drops_position_ids(self, input_ids, attention_mask, position_ids) -> bool:
        """Whether the model's ``prepare_inputs_for_generation`` drops the position ids ``generate``
        derives from the mask (Kosmos-2's pops them): then generate lets the model count its own."""
        if not hasattr(self, "_drops_position_ids"):
            try:
                prepared = self.model.prepare_inputs_for_generation(
                    input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                    is_first_iteration=True)
                self._drops_position_ids = "position_ids" not in prepared or prepared["position_ids"] is None
            except Exception:  # noqa: BLE001 - it cannot say: as generate derives them
                self._drops_position_ids = False
        return self._drops_position_ids

    def _answer(self, arguments: dict, cache):
        """``model(**arguments)`` continuing ``cache``: ``(logits, cache)``. A new sequence passes no
        cache, so the model makes its own (MiniMax's class, a hybrid's); a model that makes one and
        returns none (its state kept in its modules, RecurrentGemma) is handed, from then on, the cache
        transformers' ``generate`` would pass it, kept by the harness."""
        if arguments["use_cache"] and (cache is not None or self.caller_keeps_cache):
            arguments[self.cache_argument] = cache if cache is not None else self._generation_cache()
        out = self.model(**arguments)
        returned = next((r for r in (getattr(out, name, None) for name in (self.cache_argument, *CACHE_ARGUMENTS))
                         if r is not None), None)
        handed = arguments.get(self.cache_argument) if cache is None else None
        if handed is not None and self.fills_handed_cache is None and hasattr(handed, "get_seq_length"):
            self.fills_handed_cache = (int(handed.get_seq_length()) >= arguments["input_ids"].shape[1]
                                       and _module_state(self.model) == self._state_before)
        if returned is None and arguments["use_cache"]:
            if self.cache_argument in arguments:
                return _answered_logits(out), arguments[self.cache_argument]
            if not self.caller_keeps_cache and self.takes_cache:
                self.caller_keeps_cache = True  # found on its first call: answer it again, the cache kept
                try:
                    return self._answer(arguments, None)
                except (TypeError, ValueError):  # it takes no cache at all: it returns none, as it said
                    self.caller_keeps_cache = False
                    arguments.pop(self.cache_argument, None)
        return _answered_logits(out), returned

    def _generation_cache(self):
        """The cache ``generate`` makes for a model with no cache class of its own."""
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @staticmethod
    def _packed(position_ids) -> bool:
        """Position ids that restart inside a row: transformers' packed format (no cache, no mask)."""
        return position_ids.dim() == 2 and bool((position_ids.diff(dim=-1) != 1).any())

    def generate(self, input_ids, attention_mask, prompt: int, **inputs) -> torch.Tensor:
        """transformers' own ``generate`` (greedy, each next token forced to ``input_ids``'), so that
        its position logic runs: positions from the mask, the cache's length, a model's own
        ``prepare_inputs_for_generation``; ``inputs`` go to it as they are (pixels, grids)."""
        from transformers import LogitsProcessor, LogitsProcessorList

        wanted = input_ids[:, prompt:]

        class Forced(LogitsProcessor):
            def __call__(self, ids, scores):
                forced = torch.full_like(scores, float("-inf"))
                return forced.scatter(1, wanted[:, ids.shape[1] - prompt : ids.shape[1] - prompt + 1], 0.0)

        steps = input_ids.shape[1] - prompt
        if not callable(getattr(self.model, "generate", None)):  # a text model without GenerationMixin
            raise NotInConvention(f"{type(self.model).__name__} has no generate: its own positions are judged "
                                  "through its forward calls")
        calls = []
        hook = self.model.register_forward_pre_hook(lambda module, args: calls.append(1))
        try:
            out = self.model.generate(input_ids[:, :prompt], attention_mask=attention_mask[:, :prompt],
                                      max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                                      logits_processor=LogitsProcessorList([Forced()]), output_logits=True,
                                      return_dict_in_generate=True, pad_token_id=0, eos_token_id=None, **inputs)
        except ImportError as missing:  # a speech generator's (VibeVoice's needs diffusers)
            raise NotInConvention(f"its generate needs what is not installed: {missing}") from None
        except (ValueError, TypeError) as refused:  # an audio generate refuses a text prompt (Pocket TTS's)
            from .attribution import inside_position_code

            if calls or inside_position_code(self.model, refused):
                raise
            line = str(refused).strip().partition("\n")[0][:160]
            raise NotInConvention(f"its generate refuses a prompt of text tokens before any forward call "
                                  f"({type(refused).__name__}: {line})") from None
        finally:
            hook.remove()
        sequences = getattr(out, "sequences", None)
        if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
            shape = tuple(sequences.shape) if isinstance(sequences, torch.Tensor) else type(sequences).__name__
            raise NotInConvention(f"its generate answers sequences {shape}, not token ids (batch, length): "
                                  "it generates something else than text tokens (CSM's audio frames)")
        if not torch.equal(out.sequences[:, prompt:], wanted):
            raise RuntimeError("generate did not follow the forced tokens: it does not apply the logits_processor it "
                               "is given (each next token is forced through one)")
        return torch.stack(out.logits, dim=1)


@dataclass
class _Cursor:
    """The cache of a model that keeps its own: how many positions it holds."""

    length: int


class InputPosLM(ModelSubject):
    """``model(tokens, input_pos=positions)``, a KV cache kept inside the model: ``reset`` (the first
    of ``reset_cache``, ``reset_caches``, ``clear_cache`` it has) starts a new sequence."""

    RESETS = ("reset_cache", "reset_caches", "clear_cache")

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        if document_ids is not None:
            raise NotInConvention(f"{type(self.model).__name__} takes no documents (input_pos convention)")
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
    """A model that already answers ``(logits, cache)`` in the harness's convention; a bare tensor it
    answers is its logits with no cache (the model contract blocks the relations that need one)."""

    def __init__(self, model: nn.Module, traits: ModelTraits):
        super().__init__(model, traits)
        # declared (MODEL_TRAITS, a wrapper's ``**kwargs``) or in the signature
        self.takes_documents = traits.packing == "document_ids" or \
            "document_ids" in inspect.signature(model.forward).parameters

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        documents = {}
        if document_ids is not None:
            if not self.takes_documents:
                raise NotInConvention(f"{type(self.model).__name__}.forward takes no document_ids")
            documents["document_ids"] = document_ids
        out = self.model(input_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache, **documents)
        if isinstance(out, torch.Tensor):  # the logits alone: no cache (its rows are not a pair)
            self.logits_only = True
            return out, None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            said = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
            raise TypeError(f"{type(self.model).__name__}.forward returned {said}; the convention is (logits, cache)")
        logits, cache = out
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
    if is_torchtune_model(model):
        return TorchtuneLM(model, traits)
    if "input_pos" in inspect.signature(model.forward).parameters:
        return InputPosLM(model, traits)
    return TupleLM(model, traits)


#: transformers' model types whose position tables stop at the configured maximum.
FIXED_TABLES = ("gptj", "codegen", "mpt")


def rope_parameters(parameters) -> dict:
    """transformers' ``rope_parameters``, flat; per layer type (Gemma 3, Olmo 3), the type whose
    rope scales (Olmo 3's YaRN on its full layers, listed after its sliding ones), else the full
    layers', else the first type's."""
    parameters = parameters or {}
    if "rope_type" not in parameters and parameters:
        kinds = [parameters.get("full_attention"), *parameters.values()]
        kinds = [kind for kind in kinds if isinstance(kind, dict)]
        parameters = next((kind for kind in kinds if kind.get("rope_type", "default") != "default"),
                          kinds[0] if kinds else {})
    return parameters if isinstance(parameters, dict) else {}


def rope_type_of(parameters: dict) -> str:
    """The rope type of flat ``rope_parameters``; HunYuan's ``dynamic`` with ``alpha`` is a fixed
    NTK-alpha base (it never rescales by length), so it reads ``default``."""
    kind = parameters.get("rope_type", "default")
    return "default" if kind == "dynamic" and parameters.get("alpha") else kind


def _rope(config) -> dict:
    """A config's flat rope parameters: its text config's (a vision-language model's YaRN or dynamic
    NTK lives there; Music Flamingo's top level holds its audio's), else its own."""
    return rope_parameters(getattr(text_config(config), "rope_parameters", None)
                           or getattr(config, "rope_parameters", None))


def _rope_type(config) -> str:
    return rope_type_of(_rope(config))


def rescaling_threshold(kind: str, traits: ModelTraits) -> int | None:
    """Where a rope type rescales by a call's largest position: dynamic NTK past the maximum,
    longrope past the original length; None for the others."""
    if kind == "dynamic":
        return traits.max_position
    if kind == "longrope":
        return traits.original_max_position or traits.max_position
    return None


def transformers_designs(model, traits: ModelTraits) -> dict[str, tuple[str, tuple[str, ...]]]:
    """:func:`~.model_plan.designs_reached` of a transformers model's rope type and
    :func:`~.model_plan.configured_designs` of its config, on ``traits`` (which carry its
    threshold: :func:`traits_of`); nothing for other models."""
    from .model_plan import configured_designs, designs_reached

    config = getattr(model, "config", None)
    if config is None or not is_transformers_model(model):
        return {}
    return {**designs_reached(_rope_type(config), traits),
            **configured_designs({**text_config(config).to_dict(), "model_type": config.model_type}, traits)}


def _configured_vocabulary(model: nn.Module, config, text, width: int | None) -> int:
    """The vocabulary a transformers model answers over: of its config's and its text config's
    ``vocab_size``, the one its output layer has (``width``; Ovis2's top-level default is used by
    nothing), else the text config's, no more than its input embedding's rows."""
    sizes = [int(v) for v in (getattr(text, "vocab_size", None), getattr(config, "vocab_size", None)) if v]
    vocab = next((v for v in sizes if v == width), sizes[0] if sizes else width)
    rows = getattr(_layer(model, "get_input_embeddings"), "num_embeddings", None)
    if vocab is None:  # no vocabulary said anywhere (PI0's): ids its embedding takes, else a few; its call decides
        return int(rows or 4)
    return int(min(vocab, rows) if rows else vocab)


def _output_width(model: nn.Module) -> int | None:
    """The width of the model's output layer (its logits), where it has one."""
    output = _layer(model, "get_output_embeddings")
    width = getattr(output, "out_features", None) or getattr(getattr(output, "weight", None), "shape", [None])[0]
    return int(width) if width else None


def _layer(model: nn.Module, getter: str):
    """``model.get_…_embeddings()``, or None where it has none or cannot say."""
    try:
        return getattr(model, getter)()
    except Exception:  # noqa: BLE001 - not implemented for this model
        return None


def vocabulary_of(model: nn.Module) -> int:
    """The size of the logits' last axis, read off one call on token 0."""
    subject = adapt(model, ModelTraits(takes_attention_mask=False))
    with torch.no_grad():
        logits, _ = subject(torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device))
    return int(logits.shape[-1])


def _rotary_table(model: nn.Module) -> bool:
    """Whether the model's rotary angles come from a fixed table: a sinusoid or rotary module that is
    an ``nn.Embedding`` (RoFormer's), with its rows and no more."""
    return any(isinstance(module, nn.Embedding) and re.search(r"sinus|rotary|rope", type(module).__name__, re.I)
               for module in model.modules())


def traits_of(model: nn.Module, **given) -> ModelTraits:
    """What a model's config says of it (transformers' ``config``; else ``vocab_size`` and
    ``max_position``/``max_seq_len`` attributes), completed by ``given``."""
    if is_torchtune_model(model):
        return torchtune_traits(model, **given)
    config = getattr(model, "config", None)
    found = {}
    if config is not None and is_transformers_model(model):
        text = text_config(config)  # Fuyu's, GOT-OCR2's
        width = _output_width(model)
        found["vocab_size"] = _configured_vocabulary(model, config, text, width)
        if width and width != found["vocab_size"]:
            found["logits_width"] = width
        found["max_position"] = next((int(getattr(c, a)) for c in (text, config) for a in (  # XLNet's -1: none
            "max_position_embeddings", "n_positions", "max_seq_len", "max_target_positions")  # Whisper's decoder
            if (getattr(c, a, None) or 0) > 0), None)
        rope = _rope(config)
        if rope.get("original_max_position_embeddings"):
            found["original_max_position"] = int(rope["original_max_position_embeddings"])
        takes = inspect.signature(model.forward).parameters
        positions = torch.arange(8)[None]
        found["takes_position_ids"] = "position_ids" in takes or _passes_on(
            model, takes, found["vocab_size"], "position_ids", positions, positions + torch.tensor([[0] * 7 + [5]]))
        found["takes_attention_mask"] = "attention_mask" in takes or _passes_on(  # xLSTM's forward takes none
            model, takes, found["vocab_size"], "attention_mask", torch.ones(1, 8, dtype=torch.long),
            torch.tensor([[0] + [1] * 7]))
        # GPT-J's sin/cos table and MPT's ALiBi table have n_positions / max_seq_len rows: no extrapolation.
        # RoFormer's rotary reads a sinusoid nn.Embedding of max_position_embeddings rows: no extrapolation either.
        found["extrapolates"] = getattr(config, "model_type", "") not in FIXED_TABLES and not _rotary_table(model)
        alibi = getattr(config, "alibi", False) or getattr(getattr(config, "attn_config", None), "alibi", False) \
            or type(model).__name__.startswith("Bloom")
        absolute = any(_absolute_table(n, m) and not other_tower(model, n) for n, m in model.named_modules()) \
            or any(n.endswith("pos_encoding") for n, _ in model.named_buffers())  # CTRL keeps its sinusoid as a buffer
        if getattr(config, "rotary_value", None) is not None:  # RoFormer: its sinusoidal table feeds a rotary
            absolute = False
        found["positions"] = "alibi" if alibi else "absolute" if absolute else "relative"
        found["library"] = f"transformers {_version('transformers')} {type(model).__name__}"
        # transformers tells packed documents by position ids that restart, where the model's mask reads them
        found["packing"] = "positions" if found["takes_position_ids"] else "none"
        if alibi and found["takes_position_ids"]:  # Falcon's ALiBi counts the mask: its ids feed the mask alone
            found["takes_position_ids"] = _moves_logits(model, found["vocab_size"], "position_ids", positions,
                                                        positions + torch.tensor([[0] * 7 + [5]]))
        found["table_grows"] = absolute and _computed_sinusoids(model)
        found["quadratic_attention"] = getattr(config, "_attn_implementation", None) == "eager"
        threshold = rescaling_threshold(_rope_type(config), ModelTraits(**{
            k: v for k, v in found.items() if k in ("max_position", "original_max_position")}))
        if threshold:
            found["rescales_at"] = threshold
    else:
        if "vocab_size" not in given:
            found["vocab_size"] = int(model.vocab_size) if hasattr(model, "vocab_size") else vocabulary_of(model)
        for attribute in ("max_position", "max_seq_len", "max_position_embeddings"):
            if getattr(model, attribute, None):
                found["max_position"] = int(getattr(model, attribute))
                break
        takes = inspect.signature(model.forward).parameters
        if "input_pos" in takes:
            found["takes_attention_mask"] = False
        if "document_ids" in takes:
            found["packing"] = "document_ids"
        found["library"] = type(model).__name__
    return ModelTraits(**{**found, **given})


def _attends(kind) -> bool:
    """A config layer type of softmax attention (not linear attention, a Mamba or a conv layer)."""
    return isinstance(kind, str) and "attention" in kind and "linear" not in kind


def _slides(kind) -> bool:
    """A config layer type that slides a window over every key. Unlimited-OCR's
    ``reference_sliding_attention`` (R-SWA) keeps every prefill key and slides over the decoded ones
    alone: a query far from a prompt's keys still sees them, as a layer that attends every key."""
    return isinstance(kind, str) and "sliding" in kind and "reference" not in kind


def _windows(model: nn.Module) -> tuple[int, list | None] | None:
    """``(sliding_window, layer_types)`` of a transformers model that slides a window (``layer_types``
    None where the config lists none: every layer slides); None where none does."""
    if not is_transformers_model(model):
        return None
    text = text_config(getattr(model, "config", None))
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0 \
            or getattr(text, "use_sliding_window", True) is False:
        return None
    kinds = getattr(text, "layer_types", None)
    return window, list(kinds) if isinstance(kinds, (list, tuple)) and kinds else None


def sliding_reach(model: nn.Module) -> int | None:
    """The window every attention layer of ``model`` slides (its ``layer_types``, if any, name no
    attention layer but sliding ones): no query attends a key that many positions back or more.
    None where a layer attends every key before it."""
    found = _windows(model)
    if found is None:
        return None
    window, kinds = found
    attention = [kind for kind in kinds or () if _attends(kind)]
    if not (kinds is None or (attention and all(_slides(kind) for kind in attention))):
        return None
    return window if _slides_in_fact(model, window) else None


#: Windows up to this many keys are checked in one call before a model is taken to slide them.
CHECKED_WINDOW = 8192


class _FirstAttention(Exception):
    """Raised from the first attention layer's hook once its output is read: the call stops there."""


def _slides_in_fact(model: nn.Module, window: int) -> bool:
    """Whether the first attention layer, on ``window + 1`` tokens, gives the last an output blind
    to the first token, as a window of ``window`` keys makes it (Kyutai's config declares a window
    its mask never applies). Only that layer runs (the call stops there); a window too long to
    check, or a model that cannot be so called, is taken at its config's word."""
    if window > CHECKED_WINDOW:
        return True
    vocab = _output_width(model) or 256
    ids = (torch.arange(window + 1) % max(vocab - 3, 1) + 3)[None].to(next(model.parameters()).device)
    other = ids.clone()
    other[0, 0] = 3 + (int(other[0, 0]) - 2) % max(vocab - 3, 1)
    probe = copy.deepcopy(model).eval()
    layers = [probe.get_submodule(n) for n, m in model.named_modules()
              if "Attention" in type(m).__name__ and not other_tower(model, n)]
    outputs = []

    def stop(module, args, output):
        first = output[0] if isinstance(output, (tuple, list)) else output
        outputs.append(first[:, -1].double())
        raise _FirstAttention

    handles = [m.register_forward_hook(stop) for m in layers]
    try:
        for row in (ids, other):
            try:
                with torch.no_grad():
                    probe(input_ids=row)
            except _FirstAttention:
                pass
    except Exception:  # noqa: BLE001 - a model that cannot be so called: its config's word
        return True
    finally:
        for handle in handles:
            handle.remove()
    if len(outputs) != 2:
        return True
    return float((outputs[0] - outputs[1]).abs().max()) <= 1e-6 * max(1.0, float(outputs[0].abs().max()))


def wide_layers(model: nn.Module) -> list[str] | None:
    """The layer types that attend every key, in a model whose other layers (all of softmax
    attention) slide a window: the models :func:`window_masks` masks by layer type. None otherwise."""
    found = _windows(model)
    kinds = found[1] if found else None
    if not kinds or not all(_attends(kind) for kind in kinds):
        return None
    wide = sorted({kind for kind in kinds if not _slides(kind)})
    return wide if wide and len(wide) < len(set(kinds)) else None


def window_masks(model: nn.Module, queries: torch.Tensor, keys: torch.Tensor, cached: int = 0) -> dict | None:
    """Attention masks by position for each of ``model``'s layer types, where some layers slide a
    window and others attend every key (:func:`wide_layers`): a sliding layer sees a key less than
    its window back, the others every key up to the query (``(1, 1, queries, keys)``, boolean for
    SDPA, additive for eager attention). transformers takes such a dict in place of its own masks,
    which count a window by a key's slot, not its position. ``keys`` starts with the ``cached`` keys
    of a cache, whose sliding layers keep the last ``window − 1`` of them. None where the layers do
    not differ so."""
    wide = wide_layers(model)
    if wide is None:
        return None
    window, kinds = _windows(model)
    eager = getattr(model.config, "_attn_implementation", None) == "eager"
    dtype = next(model.parameters()).dtype
    masks = {}
    for kind in set(kinds):
        sliding = kind not in wide
        seen = keys[max(0, cached - (window - 1)):] if sliding else keys
        distance = queries[:, None] - seen[None, :]
        allowed = ((distance >= 0) & ((distance < window) if sliding else True))[None, None]
        masks[kind] = allowed if not eager else \
            torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return masks


def reads_packed_positions(model: nn.Module, text_row: bool = False) -> bool:
    """Whether the model's mask reads packed documents off restarting position ids: transformers'
    ``masking_utils`` looks for them only where a model hands its mask the position ids (BERT's,
    BioGPT's and XGLM's do not: no packed-sequence support). One call on tokens 0…2 twice; a model
    that cannot be so called is taken to read them (its relation then blames the positions).
    ``text_row``: the ids as an M-RoPE model takes packed ones, a text row before its three axes,
    (4, batch, seq) (Qwen2-VL's mask reads that row alone); a model that cannot be so called does not."""
    import transformers.masking_utils as masking

    if not hasattr(masking, "find_packed_sequence_indices"):
        return True
    original, seen = masking.find_packed_sequence_indices, []

    def spy(position_ids):
        seen.append(True)
        return original(position_ids)

    device = next(model.parameters()).device
    masking.find_packed_sequence_indices = spy
    try:
        with torch.no_grad():
            positions = torch.tensor([[0, 1, 2, 0, 1, 2]], device=device)
            model(torch.ones(1, 6, dtype=torch.long, device=device), use_cache=False,
                  position_ids=positions[None].expand(4, 1, 6) if text_row else positions)
    except Exception:  # noqa: BLE001 - not callable so: judged by the relation itself
        return not text_row
    finally:
        masking.find_packed_sequence_indices = original
    return bool(seen)


def _computed_sinusoids(model: nn.Module) -> bool:
    """Its absolute positions are sinusoids computed for any position (XGLM's, TrOCR's grow with the
    call), not a table of fixed rows: no parameters, and no buffer of the model's (CTRL's)."""
    tables = [m for n, m in model.named_modules() if _absolute_table(n, m) and not other_tower(model, n)]
    return bool(tables) and all("Sinusoid" in type(m).__name__ and not list(m.parameters()) for m in tables) \
        and not any(n.endswith("pos_encoding") for n, _ in model.named_buffers())


#: A module of absolute positions, by its class name (OPT's learned, XGLM's sinusoidal table).
ABSOLUTE_CLASS = re.compile(r"Positional(Embedding|Encoding)|PositionEmbedding")
#: Classes so named that are relative biases, not tables of absolute positions (CpmAnt's buckets).
RELATIVE_CLASS = re.compile(r"Relative|Segment|Bias|Bucket")


def _passes_on(model: nn.Module, parameters, vocab: int, argument: str, plain, changed) -> bool:
    """Whether a forward that names no ``argument`` passes it on through ``**kwargs`` to a language
    model that reads it: ``changed`` in place of ``plain`` moves the last logits, on a copy of the
    model. Position ids (MOSS-Transcribe-Diarize's): the last one moved by 5; a mask (VibeVoice's):
    the first token masked out."""
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return False
    return _moves_logits(model, vocab, argument, plain, changed)


def _moves_logits(model: nn.Module, vocab: int, argument: str, plain, changed) -> bool:
    """Whether ``changed`` in place of ``plain`` as ``argument`` moves the last logits (on a copy);
    a call that raises says so only where the model answers ids alone."""
    probe = copy.deepcopy(model).eval()
    ids = (torch.arange(8) % max(vocab - 3, 1) + 3)[None]
    try:
        with torch.no_grad():
            moved = _logits(probe(ids, **{argument: plain}))[:, -1] - _logits(probe(ids, **{argument: changed}))[:, -1]
    except Exception:  # noqa: BLE001 - it takes none, or cannot be called with ids alone
        return not _answers_ids(probe, ids)
    return bool(moved.abs().max() > 1e-6)


def _answers_ids(model: nn.Module, ids: torch.Tensor) -> bool:
    """Whether ``model(ids)`` answers: a model that cannot be called with ids alone (BLIP-2 needs
    pixels) says nothing of what it takes, and its contract blocks every relation, naming why."""
    try:
        with torch.no_grad():
            model(ids)
    except Exception:  # noqa: BLE001
        return False
    return True


def _absolute_table(name: str, module: nn.Module) -> bool:
    """A table of absolute positions: an embedding named as GPT-2's and OPT's are, or a module of
    any class so named or so called (XGLM's sinusoidal table is no ``nn.Embedding``); never a rotary."""
    kind = type(module).__name__
    if "Rotary" in kind or "RoPE" in kind or "Rope" in kind or RELATIVE_CLASS.search(kind) or TOWER.search(name):
        return False
    named = name.endswith(("wpe", "embed_positions", "position_embeddings", "positions_embed", "position_embeds_layer"))
    return (named and (isinstance(module, nn.Embedding) or "Embedding" in kind)) or bool(ABSOLUTE_CLASS.search(kind))


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"
