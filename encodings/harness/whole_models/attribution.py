"""What a model's layers are, read from the model itself, and the two probes a violation's blame
rests on: the model with its position code neutralised, and with its recurrent layers held at zero.

* **Position code.** A rotary module (a class named ``…Rotary…`` or ``…RoPE…`` that answers
  ``(cos, sin)``) is made the identity: it answers ``(1, 0)``. A learned position table (an
  ``nn.Embedding`` named ``wpe``, ``embed_positions`` or ``position_embeddings``) answers zeros,
  and so does a learned relative bias (``relative_attention_bias``, ProphetNet's
  ``relative_pos_embeddings``: :data:`RELATIVE_TABLES`).
  Where a relation still fails on such a model, the positions do not cause the violation.
* **Recurrent layers.** A layer that carries a state along the sequence (Mamba mixers, linear
  or delta-rule attention, short convolutions, RG-LRU blocks): the model's config names them
  (``layer_types``, ``block_types``, ``layers_block_type``) and its modules are classes or
  attributes named so (``MambaMixer``; xLSTM's ``mlstm_layer``), or convolutions along the
  sequence (an ``nn.Conv1d`` wider than one token) outside them.
  Held at zero (their output replaced by zeros), a violation that vanishes is theirs.

Both probes are forward hooks on a copy of the model (a learned table's weights are zeroed on
that copy too, so a path past its ``forward`` reads zeros); nothing here edits a model's code.
"""

from __future__ import annotations

import copy
import re
import weakref
from dataclasses import dataclass

import torch
from torch import nn

#: Class names (less the model's own prefix) of the position code.
ROTARY = re.compile(r"rotary|rope", re.I)
#: Learned position tables, by attribute name.
POSITION_TABLES = ("wpe", "embed_positions", "position_embeddings", "position_embeds_layer")
#: Learned relative-position biases (T5's buckets, ProphetNet's, CpmAnt's), by attribute name: an
#: embedding or a linear map whose output is added to the attention scores.
RELATIVE_TABLES = ("relative_attention_bias", "relative_pos_embeddings", "rel_attn_embed", "rel_pos_bias",
                   "rel_pos_emb", "rel_embeddings")
#: Class names (less the model's own prefix) of layers that carry a state along the sequence.
RECURRENT = re.compile(r"mamba|mixer|lightning|linearattention|linear_attn|deltanet|delta|shortconv|recurrent|rglru"
                       r"|ssm|rwkv|retention|lstm|hyena", re.I)
#: Config layer types of such layers (not ``hybrid``: a word for attention with something else, whose
#: state, if any, its modules show: Zaya's and Inkling 2's convolutions).
RECURRENT_TYPES = re.compile(r"mamba|linear|conv|recurrent|ssm|rnn|delta", re.I)
#: Module paths of a multimodal model's other towers: no text runs through them.
TOWER = re.compile(r"(^|\.)(audio|vision|visual|image|speech)[a-z_]*(\.|$)")
#: Class names of layers that keep no state: a parent's word for its layer (NemotronH names every
#: block's layer ``mixer``) does not make one of these recurrent.
STATELESS = re.compile(r"attention|attn|mlp|moe|expert|ffn|feed_?forward", re.I)
#: The text's own part of a multimodal model (``model.language_model``): outside it, another tower.
TEXT_PART = re.compile(r"(^|\.)(language_model|text_model)$")
#: Normalisations (``norm_mlstm``): named for the layer they feed, never a layer themselves.
NORM = re.compile(r"norm", re.I)


def _short_name(module: nn.Module, prefix: str) -> str:
    name = type(module).__name__
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


#: A model class's name: its prefix, then its task (``…ForCausalLM``, ``…ForConditionalGeneration``).
MODEL_CLASS = re.compile(r"(\w+?)(For[A-Z]\w*|WithLMHeadModel|LMHeadModel|Model)$")


def _prefix(model: nn.Module) -> str:
    """The model's class-name prefix (``RecurrentGemma`` of ``RecurrentGemmaForCausalLM``,
    ``CohereCompass`` of ``CohereCompassForConditionalGeneration``: not ``…CompaSSMlp``'s ``ssm``)."""
    match = MODEL_CLASS.match(type(model).__name__)
    return match.group(1) if match else ""


def _outermost(model: nn.Module, pattern: re.Pattern, skip: re.Pattern | None = None) -> list[tuple[str, nn.Module]]:
    """Submodules whose class name (less the model's prefix) or attribute name matches ``pattern``,
    none inside another. A class-name match that also matches ``skip`` is looked into instead; an
    attribute name (``mamba``, ``mlstm_layer``) is its parent's word for it and is taken as is."""
    prefix, found = _prefix(model), []
    for name, module in model.named_modules():
        if not name or isinstance(module, (nn.Linear, nn.Embedding, nn.ModuleList)) \
                or NORM.search(type(module).__name__):
            continue
        if any(name.startswith(outer + ".") for outer, _ in found):
            continue
        short, attribute = _short_name(module, prefix), name.rsplit(".", 1)[-1]
        if pattern.search(attribute) or (pattern.search(short) and not (skip and skip.search(short))):
            found.append((name, module))
    return found


#: Containers of a recurrent layer with the residual stream inside: looked into, never held at zero.
CONTAINERS = re.compile(r"layer|model|causallm|decoder", re.I)


@dataclass(frozen=True)
class RecurrentLayers:
    """A model's layers that carry a state along the sequence: the config's word and the modules."""

    configured: str  # what the config says ("layer_types: mamba at 0, 2"), or ""
    modules: tuple[str, ...]  # the modules' names

    def __bool__(self) -> bool:
        return bool(self.configured or self.modules)

    def describe(self) -> str:
        parts = [self.configured] if self.configured else []
        if self.modules:
            more = len(self.modules) - 3
            shown = ", ".join(self.modules[:3]) + (f" and {more} more" if more > 0 else "")
            parts.append(f"modules {shown}")
        return "; ".join(parts)


@dataclass(frozen=True)
class _Towers:
    """What tells a model's text from its other towers, read once per model: its text part's name
    (:data:`TEXT_PART`), and the modules a call with text alone runs (None: not known)."""

    text_part: str | None
    ran: frozenset[str] | None


_TOWERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _towers(model: nn.Module) -> _Towers:
    if model not in _TOWERS:
        part = next((n for n, _ in model.named_modules() if TEXT_PART.search(n)), None)
        transformers_like = hasattr(model, "config") and hasattr(model, "generate")
        _TOWERS[model] = _Towers(part, _run_on_text(model) if transformers_like else None)
    return _TOWERS[model]


def _run_on_text(model: nn.Module) -> frozenset[str] | None:
    """The modules of a transformers model that run on a call with text alone (four tokens, on a
    copy); None where it cannot be so called (it needs pixels, say)."""
    ran: set[str] = set()
    probe = copy.deepcopy(model)
    names = {id(m): n for n, m in probe.named_modules()}
    handles = [m.register_forward_pre_hook(lambda m, a: ran.add(names[id(m)])) for m in probe.modules()]
    try:
        with torch.no_grad():
            probe(input_ids=torch.arange(3, 7, device=next(probe.parameters()).device)[None])
        return frozenset(ran)
    except Exception:  # noqa: BLE001 - a model that needs more than text shows nothing
        return None
    finally:
        for handle in handles:
            handle.remove()


def other_tower(model: nn.Module, name: str) -> bool:
    """Whether the module ``name`` of ``model`` belongs to a tower the text never runs through: named
    so (:data:`TOWER`); outside the model's text part (:data:`TEXT_PART`: Granite Speech's
    ``model.encoder``, Music Flamingo's ``model.pos_emb``); or, in a transformers model, idle on a
    call with text alone (Kyutai's ``codec_model``, VibeVoice's speech tokenizers)."""
    if TOWER.search(name):
        return True
    towers = _towers(model)
    part, ran = towers.text_part, towers.ran
    if part is not None and not (name == part or name.startswith(part + ".")):
        return True
    if ran is None or name in ran:
        return False
    parts = name.split(".")  # the outermost module on its path that did not run: a tower if it holds layers
    idle = next(".".join(parts[:k]) for k in range(1, len(parts) + 1) if ".".join(parts[:k]) not in ran)
    return any(True for _ in model.get_submodule(idle).children())  # a leaf read by attribute is no tower


def text_config(config):
    """A config's text part (a multimodal model's ``text_config``), or the config itself."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def declared_bidirectional(model: nn.Module) -> str | None:
    """The config field declaring that the text attends both ways (Gemma's and PaliGemma's
    ``use_bidirectional_attention``: true, or ``"all"``; ``"vision"`` leaves the text causal), or None."""
    config = getattr(model, "config", None)
    for where, part in (("config", config), ("config.text_config", text_config(config))):
        value = getattr(part, "use_bidirectional_attention", None)
        if value is True or value == "all":
            return f"{where}.use_bidirectional_attention={value!r}"
    return None


def recurrent_layers(model: nn.Module) -> RecurrentLayers:
    """The recurrent layers of ``model``, from its config and its modules."""
    configured = ""
    config = getattr(model, "config", None)
    text = text_config(config)
    for field in ("layer_types", "block_types", "layers_block_type"):
        kinds = getattr(text, field, None)
        if isinstance(kinds, (list, tuple)):
            hits = [k for k, kind in enumerate(kinds) if isinstance(kind, str) and RECURRENT_TYPES.search(kind)]
            if hits:
                names = sorted({kinds[k] for k in hits})
                where = "config" if text is config else "config.text_config"
                configured = f"{where}.{field}: {', '.join(names)} at {', '.join(map(str, hits[:6]))}"
                break
    modules = tuple(f"{name} ({type(module).__name__})" for name, module in _state_layers(model))
    return RecurrentLayers(configured, modules)


def _state_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Layers named recurrent (:data:`RECURRENT`), and convolutions along the sequence outside them
    (an ``nn.Conv1d`` wider than one token, outside another tower: Zaya's CCA projections)."""
    prefix = _prefix(model)
    stateless = lambda module: (STATELESS.search(_short_name(module, prefix))  # noqa: E731
                                and not RECURRENT.search(_short_name(module, prefix)))
    named = [(name, module) for name, module in _outermost(model, RECURRENT, CONTAINERS)
             if not _outermost(module, ROTARY) and not other_tower(model, name) and not stateless(module)]
    return named + [(name, module) for name, module in model.named_modules()
                    if isinstance(module, nn.Conv1d) and module.kernel_size[0] > 1 and not other_tower(model, name)
                    and not any(name.startswith(outer + ".") for outer, _ in named)]


def _neutral_rotary(module, args, output):
    if isinstance(output, (tuple, list)) and len(output) == 2 and all(isinstance(t, torch.Tensor) for t in output):
        cos, sin = output
        return type(output)((torch.ones_like(cos), torch.zeros_like(sin)))
    if isinstance(output, torch.Tensor) and output.is_complex():  # freqs_cis
        return torch.ones_like(output)
    return output


def _zeros(module, args, output):
    if isinstance(output, torch.Tensor):
        return torch.zeros_like(output)
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return type(output)((torch.zeros_like(output[0]), *output[1:]))
    return output


def _position_modules(model: nn.Module) -> list[tuple[str, nn.Module, object]]:
    """``(label, module, neutralising hook)`` for each rotary module and learned position table."""
    found = [(f"{name} ({type(module).__name__})", module, _neutral_rotary)
             for name, module in _outermost(model, ROTARY)]
    found += [(name, module, _zeros) for name, module in model.named_modules()
              if isinstance(module, nn.Embedding) and name.rsplit(".", 1)[-1] in POSITION_TABLES]
    tables = {id(m) for _, m, _ in found}  # a table of a class of its own (Reformer's axial embeddings)
    found += [(f"{name} ({type(module).__name__})", module, _zeros) for name, module in model.named_modules()
              if id(module) not in tables and name.rsplit(".", 1)[-1] in POSITION_TABLES
              and not ROTARY.search(type(module).__name__) and not _outermost(module, ROTARY)]
    found += [(f"{name} ({type(module).__name__}, relative)", module, _zeros) for name, module in model.named_modules()
              if isinstance(module, (nn.Embedding, nn.Linear)) and name.rsplit(".", 1)[-1] in RELATIVE_TABLES]
    tables = {id(m) for _, m, _ in found}  # and absolute sinusoids of their own class (TrOCR's, XGLM's)
    found += [(f"{name} ({type(module).__name__})", module, _zeros) for name, module in model.named_modules()
              if id(module) not in tables and "Sinusoid" in type(module).__name__
              and not ROTARY.search(type(module).__name__) and not _outermost(module, ROTARY)]
    return [(label, module, hook) for label, module, hook in found if not other_tower(model, label.split(" ", 1)[0])]


def named_like_position_code(model: nn.Module) -> list[str]:
    """Modules of the text (no other tower's) named like position code, reached by the probes or
    not (Inkling 2's ``relative_position_bias``, by cache slot, is not)."""
    return [name for name, _ in model.named_modules()
            if POSITION_LIKE.search(name.rsplit(".", 1)[-1]) and not other_tower(model, name)]


def position_code(model: nn.Module) -> list[str]:
    """The modules :func:`neutralise_positions` reaches: rotary modules and learned position tables."""
    return [label for label, _, _ in _position_modules(model)]


def neutralise_positions(model: nn.Module) -> list[str]:
    """Make ``model``'s position code the identity (hooks, kept on it): the modules reached."""
    found = _position_modules(model)
    for _, module, hook in found:
        module.register_forward_hook(hook)
        if isinstance(module, (nn.Embedding, nn.Linear)):  # a learned table read past its forward too
            with torch.no_grad():  # (ProphetNet's predicting stream calls its table's ``_forward``)
                for parameter in module.parameters(recurse=False):
                    parameter.zero_()
    return [label for label, _, _ in found]


def hold_recurrent_layers(model: nn.Module) -> list[str]:
    """Replace the output of ``model``'s recurrent layers by zeros (hooks, kept on it): their names."""
    held = []
    for name, module in _state_layers(model):
        module.register_forward_hook(_zeros)
        held.append(name)
    return held


def _has_choice(output) -> bool:
    """Whether a module's output holds an integer tensor: indices it chose (top-k experts or keys)."""
    parts = output if isinstance(output, (tuple, list)) else (output,)
    return any(isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex()
               and t.dtype != torch.bool for t in parts)


def _like(recorded, live):
    """``recorded`` in ``live``'s dtypes: each floating tensor cast to the live one's dtype."""
    if isinstance(recorded, torch.Tensor):
        return recorded.to(live.dtype) if isinstance(live, torch.Tensor) and recorded.is_floating_point() \
            and live.is_floating_point() else recorded
    if isinstance(recorded, (tuple, list)) and isinstance(live, (tuple, list)):
        return type(recorded)(_like(r, l) for r, l in zip(recorded, live))
    return recorded  # None, a number: as recorded


def _held(recorded, live, stream):
    """``recorded`` replayed over ``live``: its choices and scores, but never a tensor of the
    module's input's shape (the hidden states it passes on stay the live model's)."""
    if isinstance(recorded, (tuple, list)) and isinstance(live, (tuple, list)):
        return type(recorded)(l if isinstance(l, torch.Tensor) and tuple(l.shape) == stream and l.is_floating_point()
                              else _like(r, l) for r, l in zip(recorded, live))
    return _like(recorded, live)


class Selections:
    """The discrete choices a model makes in its calls (a router's top-k experts, an indexer's
    top-k keys): each module whose output holds integer indices, recorded on one model and
    replayed, in call order, on a copy of it (floats cast to the copy's dtypes). A violation that
    vanishes with the choices held is one of a choice flipped, not of the precision it measures."""

    def __init__(self):
        self.recorded: dict[str, list] = {}
        self._handles: list = []

    def record(self, model: nn.Module) -> Selections:
        def keep(name):
            def hook(module, args, output):
                if _has_choice(output):
                    self.recorded.setdefault(name, []).append(
                        type(output)(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in output)
                        if isinstance(output, (tuple, list)) else output.detach().clone())
            return hook
        self._handles += [module.register_forward_hook(keep(name)) for name, module in model.named_modules() if name]
        return self

    def modules(self) -> list[str]:
        """The modules that make a choice, not those that pass one on (a layer whose output carries
        its indexer's top-k): replaying a layer would replay its hidden states."""
        return sorted(name for name in self.recorded
                      if not any(other.startswith(name + ".") for other in self.recorded))

    def replay(self, model: nn.Module) -> Selections:
        """Hand ``model``'s choosing modules (:meth:`modules`) the recorded outputs, in call order."""
        queue = {name: list(self.recorded[name]) for name in self.modules()}
        modules = dict(model.named_modules())

        def give(name):
            def hook(module, args, output):
                if not queue[name]:
                    return output
                stream = next((tuple(a.shape) for a in args if isinstance(a, torch.Tensor)), None)
                return _held(queue[name].pop(0), output, stream)
            return hook
        self._handles += [modules[name].register_forward_hook(give(name)) for name in queue if name in modules]
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


#: A key selector's budget: how many keys it keeps (an indexer's ``index_topk``).
BUDGET = re.compile(r"^(index_)?top_?k$")


def keep_every_key(model: nn.Module, selectors: list[str]) -> list[str]:
    """Raise the budget of each module named in ``selectors`` (an indexer's ``index_topk``) past any
    sequence, so it keeps every key: what it chose then no longer matters. The budgets raised,
    as ``name.attribute=value`` (none where no selector has a budget the probe recognises)."""
    modules = dict(model.named_modules())
    raised = []
    for name in selectors:
        module = modules.get(name)
        for attribute, value in list(vars(module).items()) if module is not None else ():
            if BUDGET.match(attribute) and isinstance(value, int) and not isinstance(value, bool):
                setattr(module, attribute, 1 << 30)
                raised.append(f"{name}.{attribute}={value}")
    return raised


#: Names of modules and attributes that may hold position code the probes do not reach.
POSITION_LIKE = re.compile(r"rotary|rope|posit|pos_emb|embed_pos|wpe|relative|rel_pos|alibi|sinus", re.I)


def raised_in(model: nn.Module, error: BaseException) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` whose ``forward`` was running when ``error`` (or the error it was
    raised while handling) was raised, outermost first, read from its traceback's frames."""
    while error.__traceback__ is not None and error.__context__ is not None and not _frames_in(model, error):
        error = error.__context__
    return _frames_in(model, error)


def _frames_in(model: nn.Module, error: BaseException) -> list[tuple[str, nn.Module]]:
    names = {id(m): name for name, m in model.named_modules()}
    chain, tb = [], error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in names and (not chain or chain[-1][1] is not owner):
            chain.append((names[id(owner)], owner))
        tb = tb.tb_next
    return chain


#: A model's own methods that make or pass on its positions (an error there may be theirs).
POSITION_METHODS = re.compile(r"^(forward|generate|prepare_inputs_for_generation|_update_model_kwargs_for_generation"
                              r"|_prepare\w*)$|(^|_)(cos|sin|freqs?|angles?|theta|phase|rot\w*|rope\w*|pos\w*|tables?|"
                              r"cache\w*)(_|$)")


def raising_method(model: nn.Module, error: BaseException) -> str | None:
    """The method of ``model`` itself (not of a submodule) whose frame is the innermost of the
    error's traceback among the model's: ``build_delay_pattern_mask``; None where there is none."""
    found, tb = None, error.__traceback__
    while error.__context__ is not None and not _frames_in(model, error):
        error = error.__context__
        tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module):
            found = tb.tb_frame.f_code.co_name if owner is model else None
        tb = tb.tb_next
    return found


def inside_position_code(model: nn.Module, error: BaseException) -> str | None:
    """Where ``error`` was raised in position code of ``model``: a frame of a module of it that is
    position code (a rotary, a table) or of a method named for positions (Qwen2.5-Omni's
    ``get_rope_index``, ``compute_3d_position_ids``), innermost first, as ``Class.method``; None
    where no such frame ran (an error of the harness's own wrapper has none)."""
    while error.__context__ is not None and not _frames_in(model, error):
        error = error.__context__
    ours = {id(m) for _, m in model.named_modules()}
    code = {id(m) for _, m, _ in _position_modules(model)}
    found, tb = None, error.__traceback__
    while tb is not None:
        owner, method = tb.tb_frame.f_locals.get("self"), tb.tb_frame.f_code.co_name
        if isinstance(owner, nn.Module) and id(owner) in ours and (id(owner) in code or POSITION_LIKE.search(method)):
            found = f"{type(owner).__name__}.{method}"
        tb = tb.tb_next
    return found


class PositionShapes:
    """The calls of a model's rotary modules whose position ids are not one per token of the states
    they rotate (Qwen2.5-Omni's own M-RoPE ids for a step with a mask span the whole mask: 9 ids for
    1 token): a defect of the positions, whatever error it raises further on."""

    def __init__(self):
        self.misshapen: list[str] = []

    def record(self, model: nn.Module) -> PositionShapes:
        def check(label):
            def hook(module, args, kwargs):
                states = args[0] if args else kwargs.get("x")
                positions = args[1] if len(args) > 1 else kwargs.get("position_ids")
                if isinstance(states, torch.Tensor) and isinstance(positions, torch.Tensor) and states.dim() >= 3:
                    tokens = states.shape[-2] if states.dim() == 4 else states.shape[1]
                    if positions.shape[-1] != tokens and not self.misshapen:
                        self.misshapen.append(f"{label} was handed position ids of shape {tuple(positions.shape)} "
                                              f"for {tokens} tokens")
            return hook
        for label, module, hook in _position_modules(model):
            if hook is _neutral_rotary:
                module.register_forward_pre_hook(check(label), with_kwargs=True)
        return self


def outside_position_code(model: nn.Module, chain: list[tuple[str, nn.Module]],
                          error: BaseException | None = None) -> str | None:
    """Where an error raised in ``chain`` (:func:`raised_in`) was raised, where no position code
    can have run there: no module of the chain is position code, and the innermost holds nothing
    named like it (a container of position code the probes do not reach is no evidence). None
    otherwise."""
    if not chain:
        return None
    found = {id(m) for _, m, _ in _position_modules(model)}
    if any(id(m) in found or POSITION_LIKE.search(type(m).__name__) for _, m in chain):
        return None
    name, innermost = chain[-1]
    if innermost is model:  # raised in the model's own method: one that makes no positions is no position code
        method = raising_method(model, error) if error is not None else None
        if method and not POSITION_METHODS.search(method) and not POSITION_LIKE.search(method):
            return f"{type(model).__name__}.{method}"
        return None
    if any(POSITION_LIKE.search(f"{n} {type(m).__name__}")
                                 for n, m in innermost.named_modules()) or any(
            POSITION_LIKE.search(n) for n, _ in innermost.named_buffers()):
        return None
    return f"{name} ({type(innermost).__name__})"


class ExactAngles:
    """The model with its rotary angles formed in float64: each rotary module of transformers'
    form (``forward(x, position_ids)`` answering ``(cos, sin)`` from an ``inv_freq`` buffer, the
    angles duplicated as two halves or interleaved, times ``attention_scaling``) answers the same
    cos and sin from ``p·θ`` taken in float64. The logits' distance from the model's own is what
    float32 angle rounding moves them by, measured rather than bounded. A module of another form,
    or one whose answer is farther from the float64 one than rounding can make it (a module that
    computes its angles otherwise), leaves :attr:`valid` False: no measurement."""

    def __init__(self):
        self.valid = True

    def attach(self, model: nn.Module) -> bool:
        """Hook every rotary module of ``model``; False (nothing hooked) where one is of no known form."""
        modules = [module for name, module in _outermost(model, ROTARY) if not other_tower(model, name)]
        layouts = [_layout(module) for module in modules]
        if not modules or None in layouts:
            self.valid = False
            return False
        for module, layout in zip(modules, layouts):
            module.register_forward_hook(self._hook(layout), with_kwargs=True)
        return True

    def _hook(self, layout: str):
        def exact(module, args, kwargs, output):
            positions = args[1] if len(args) > 1 else kwargs.get("position_ids")
            if not isinstance(positions, torch.Tensor) or not isinstance(output, (tuple, list)) or len(output) != 2:
                self.valid = False
                return output
            cos, sin = _angles(module, positions, layout, output[0].device)
            if cos.shape != output[0].shape:
                self.valid = False
                return output
            rounding = 4 * float(positions.abs().max()) * torch.finfo(torch.float32).eps + 1e-5
            if float((cos - output[0].double()).abs().max()) > rounding * max(1.0, float(cos.abs().max())):
                self.valid = False  # angles formed otherwise than from its inv_freq: no measurement
                return output
            return type(output)((cos.to(output[0].dtype), sin.to(output[1].dtype)))
        return exact


def _angles(module, positions: torch.Tensor, layout: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = positions.to(device, torch.float64)[..., None] * module.inv_freq.to(device, torch.float64)
    angles = torch.cat((freqs, freqs), dim=-1) if layout == "halves" else freqs.repeat_interleave(2, dim=-1)
    scale = float(getattr(module, "attention_scaling", 1.0) or 1.0)
    return angles.cos() * scale, angles.sin() * scale


def _layout(module: nn.Module) -> str | None:
    """How ``module`` lays its angles out (``halves`` or ``interleaved``), checked on positions
    0…63; None where it is of no known form."""
    if not isinstance(getattr(module, "inv_freq", None), torch.Tensor):
        return None
    device = module.inv_freq.device
    positions = torch.arange(64, device=device)[None]
    module = copy.deepcopy(module)  # a module with a state of its own (dynamic NTK's cached length) keeps it
    try:
        with torch.no_grad():
            cos, _ = module(torch.zeros(1, 64, 1, device=device), positions)
    except Exception:  # noqa: BLE001 - another signature: no known form
        return None
    for layout in ("halves", "interleaved"):
        exact, _ = _angles(module, positions, layout, device)
        if exact.shape == cos.shape and float((exact - cos.double()).abs().max()) < 1e-4:
            return layout
    return None
