"""Mutant models: a tiny pure-torch causal LM (``TinyLM``) and variants of it that each ship one
defect real libraries shipped, so that the model relations (``specs/test_models.py``, MODEL-*)
can show they catch it.

A plug-in, loaded only on request (a module name or this file's path)::

    pytest specs/test_models.py --plugin tests.model_mutants --encoders 'tinylm*'

``tinylm`` is the control: 2 layers, width 64, 4 heads of 16, vocabulary 128, half-split RoPE of
base 10000 with θ recomputed from the base at every call (no buffer a cast can round), angles in
float32 under any dtype or autocast, RMSNorm before each block, causal softmax attention over an
explicit KV cache of rotated keys, a gated MLP, an untied head, weights of standard deviation
0.2 (so that attention depends on position visibly), ``max_position`` 32 with relative positions
extrapolating past it. Every mutant keeps the control's declarations (``model_claims()``): a
relation its defect breaks reads "unexpectedly failing", and the mutant declares exactly which
(``fails=``), with why where several fail.

Two more controls keep TinyLM's declarations but for their design: ``tinylm_dynamic`` (dynamic
NTK, each row's base from its own largest position, the sequence recomputed when a base grows,
so a decode step equals a fresh pass on its prefix; MODEL-7 refuted by design) and
``tinylm_windowed`` (a sliding window of 8 in every pass and a rolling cache). Defects that pure
RoPE cannot see (positions that count a row's pads, or run on across packed documents: a shift
of a whole row or document) live on the dynamic control, whose base can see them.

The defects, one step of a control each, are the classes below: each docstring names the defect
and the bug report of its class, and its ``@mutant`` declaration the relations it fails (in the
regime it lives in: the ``Own…`` mutants, the rolling cache's, the chunk offset's and the packed
positions' only reach the model's own positions), with why where several fail. The clamped
table is the known survivor of a kind: past 31 its decode, chunks and far query agree with fresh
passes that clamp alike, and a position one off moves nothing there, so those relations read
``undecided`` (``undecided=``), never ``holds``; MODEL-7 kills it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc.harness.catalogue.declarations import model_claims
from posenc.harness.whole_models.models import TupleLM
from posenc.harness.catalogue.records import ModelTraits

VOCAB, WIDTH, LAYERS, HEADS, HEAD_DIM, FFN = 128, 64, 2, 4, 16, 128
BASE, MAX_POSITION, INIT, EPS, WINDOW = 10000.0, 32, 0.2, 1e-6, 8
TRAITS = ModelTraits(max_position=MAX_POSITION, vocab_size=VOCAB, extrapolates=True, packing="document_ids",
                     library="TinyLM (tests/model_mutants, pure torch)")
SOURCE = "tests/model_mutants"


class KVCache:
    """Each layer's keys and values, (batch, heads, length, head_dim)."""

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    def layer_length(self, layer: int) -> int:
        return 0 if self.keys[layer] is None else self.keys[layer].shape[2]

    def get_seq_length(self) -> int:
        """Layer 0's length: the whole cache's, between calls."""
        return self.layer_length(0)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k, v = torch.cat((self.keys[layer], k), dim=2), torch.cat((self.values[layer], v), dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.mlp_norm = nn.Parameter(torch.ones(WIDTH)), nn.Parameter(torch.ones(WIDTH))
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(WIDTH, FFN, bias=False), nn.Linear(WIDTH, FFN, bias=False)
        self.down = nn.Linear(FFN, WIDTH, bias=False)


class RotaryEmbedding(nn.Module):
    """The cos and sin of the angles: the model's position code as one module, as transformers'
    models have it (the harness's blame probe makes it the identity)."""

    def forward(self, angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class TinyLM(nn.Module):
    """The correct model, its forward pass split into steps; each mutant overrides one."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.final_norm = nn.Parameter(torch.ones(WIDTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.rotary_emb = RotaryEmbedding()
        for parameter in self.parameters():
            if parameter.dim() == 2:
                nn.init.normal_(parameter, std=INIT)

    # ------------------------------------------------------------ positions and rotation

    def inverse_frequencies(self, device) -> torch.Tensor:
        """θ in float64 from the base, rounded once to float32: no buffer, so no cast reaches it."""
        theta = BASE ** -(torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
        return theta.to(device=device, dtype=torch.float32)

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """(batch, seq, head_dim / 2) in float32, whatever the model's dtype or autocast."""
        return positions.to(torch.float32)[..., None] * self.inverse_frequencies(positions.device)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = self.angles(positions).to(torch.float32)
        both = torch.cat((angles, angles), dim=-1)[:, None]  # half-split, over the heads
        return self.rotary_emb(both)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(positions)
        wide = x.to(torch.float32)
        return (wide * cos + rotate_half(wide) * sin).to(x.dtype)

    def own_positions(self, mask: torch.Tensor, documents, start: int, seq: int) -> torch.Tensor:
        """Positions the model derives when none are given: from 0 in each packed document, else
        from the mask (``cumsum − 1``, so left pads move nothing), which covers the cache."""
        if documents is not None:
            first = torch.cat((torch.ones_like(documents[:, :1], dtype=torch.bool), documents.diff(dim=-1) != 0), -1)
            index = torch.arange(seq, device=mask.device).expand_as(documents)
            return index - torch.cummax(torch.where(first, index, 0), dim=-1).values
        return (mask.cumsum(-1) - 1).clamp(min=0)[:, start : start + seq]

    def rotary_positions(self, layer: int, positions: torch.Tensor, cache: KVCache, continuing: bool) -> torch.Tensor:
        """The positions layer ``layer`` rotates this call's q and k at (before its cache update)."""
        return positions

    # ------------------------------------------------------------ attention

    def allowed_keys(self, mask: torch.Tensor, start: int, seq: int, continuing: bool) -> torch.Tensor:
        """(batch, 1, seq, start + seq): causal, and the mask's keys only."""
        query = torch.arange(start, start + seq, device=mask.device)[:, None]
        key = torch.arange(start + seq, device=mask.device)[None]
        return (key <= query)[None, None] & mask.bool()[:, None, None, :]

    def within_documents(self, allowed: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        """Attention kept inside each packed document (a call without a cache)."""
        return allowed & (documents[:, None, :, None] == documents[:, None, None, :])

    def keys_and_values(self, layer, k, v, positions, cache: KVCache):
        """Rotated keys into the cache; all of this layer's keys and values out."""
        return cache.update(layer, self.rotate(k, positions), v)

    def attention(self, layer, block, x, positions, allowed, cache, continuing):
        batch, seq, _ = x.shape
        q, k, v = (project(x).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
                   for project in (block.q, block.k, block.v))
        rotary = self.rotary_positions(layer, positions, cache, continuing)
        keys, values = self.keys_and_values(layer, k, v, rotary, cache)
        scores = (self.rotate(q, rotary) @ keys.transpose(-1, -2) / math.sqrt(HEAD_DIM)).to(torch.float32)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        weights = torch.where(allowed.any(dim=-1, keepdim=True), weights, 0.0)  # a pad query attends nothing
        out = weights.to(values.dtype) @ values
        return block.o(out.transpose(1, 2).reshape(batch, seq, WIDTH))

    def new_cache(self) -> KVCache:
        return KVCache(LAYERS)

    def prepare(self, positions: torch.Tensor, mask: torch.Tensor, cache: KVCache) -> None:
        """What a call computes from all its positions before the layers run (nothing here)."""

    # ------------------------------------------------------------ the rest

    def normalize(self, weight: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        wide = h.to(torch.float32)
        return (wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + EPS)).to(h.dtype) * weight

    def mlp(self, block, x):
        return block.down(F.silu(block.gate(x)) * block.up(x))

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        batch, seq = input_ids.shape
        continuing = cache is not None
        cache = cache if continuing else self.new_cache()
        start = cache.get_seq_length()
        if attention_mask is None:
            attention_mask = torch.ones(batch, start + seq, dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = self.own_positions(attention_mask, document_ids, start, seq)
        allowed = self.allowed_keys(attention_mask, start, seq, continuing)
        if document_ids is not None:
            allowed = self.within_documents(allowed, document_ids)
        self.prepare(position_ids, attention_mask, cache)
        h = self.embed(input_ids)
        for layer, block in enumerate(self.blocks):
            h = h + self.attention(layer, block, self.normalize(block.attention_norm, h), position_ids, allowed,
                                   cache, continuing)
            h = h + self.mlp(block, self.normalize(block.mlp_norm, h))
        return self.head(self.normalize(self.final_norm, h)), cache


class RollingKVCache(KVCache):
    """A sliding window's cache: each layer keeps its last ``WINDOW − 1`` keys and values (all a
    later query can see), and counts every token it was given."""

    def __init__(self, layers: int):
        super().__init__(layers)
        self.seen = [0] * layers

    def get_seq_length(self) -> int:
        """Tokens seen (layer 0's), not the keys it still holds."""
        return self.seen[0]

    def update(self, layer, k, v):
        self.seen[layer] += k.shape[2]
        k, v = super().update(layer, k, v)
        self.keys[layer], self.values[layer] = k[:, :, -(WINDOW - 1) :], v[:, :, -(WINDOW - 1) :]
        return k, v


class WindowedTinyLM(TinyLM):
    """TinyLM with a sliding window of ``WINDOW`` in every pass (Mistral's) and a rolling cache
    that keeps only the keys the window can still reach; positions count every token seen."""

    def new_cache(self):
        return RollingKVCache(LAYERS)

    def allowed_keys(self, mask, start, seq, continuing):
        held = min(start, WINDOW - 1)  # the keys the rolling cache still holds
        query = torch.arange(start, start + seq, device=mask.device)[:, None]
        key = torch.arange(start - held, start + seq, device=mask.device)[None]
        window = (key <= query) & (key > query - WINDOW)
        return window[None, None] & mask[:, start - held :].bool()[:, None, None, :]


class DynamicTinyLM(TinyLM):
    """TinyLM with dynamic NTK scaling done right: past ``max_position`` a row's base grows with
    the row's largest position so far (factor 2, transformers' formula), each row its own; when a
    continuation grows a row's base, the cache is dropped and the whole sequence recomputed (the
    cached keys, and every upper layer's keys and values, were computed with the old base), so a
    decode step equals a fresh pass on its prefix."""

    FACTOR = 2.0

    def row_lengths(self, positions: torch.Tensor) -> torch.Tensor:
        """Each row's largest position so far, plus one."""
        return positions.amax(dim=-1) + 1

    def theta(self, positions: torch.Tensor) -> torch.Tensor:
        """(batch, head_dim / 2) in float32: each row's base from its largest position."""
        length = self.row_lengths(positions).to(torch.float64)
        growth = (self.FACTOR * length / MAX_POSITION - (self.FACTOR - 1)).clamp(min=1.0)
        base = BASE * torch.where(length > MAX_POSITION, growth, 1.0) ** (HEAD_DIM / (HEAD_DIM - 2))
        exponent = torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device=positions.device) / HEAD_DIM
        return (base[:, None] ** -exponent).to(torch.float32)

    def prepare(self, positions, mask, cache):
        held = getattr(cache, "token_positions", None)
        self.row_theta = self.theta(positions if held is None else torch.cat((held, positions), dim=-1))

    def angles(self, positions):
        return positions.to(torch.float32)[..., None] * self.row_theta[:, None, :]

    def recomputes(self, cache: KVCache, positions: torch.Tensor) -> bool:
        """The base this call needs differs from the one the cache was computed with."""
        return not torch.equal(self.theta(torch.cat((cache.token_positions, positions), dim=-1)), cache.theta)

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        batch, seq = input_ids.shape
        start = 0 if cache is None else cache.get_seq_length()
        if attention_mask is None:
            attention_mask = torch.ones(batch, start + seq, dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = self.own_positions(attention_mask, document_ids, start, seq)
        position_ids = position_ids.expand(batch, seq)
        if cache is not None and self.recomputes(cache, position_ids):
            logits, cache = self.forward(torch.cat((cache.ids, input_ids), dim=1),
                                         torch.cat((cache.token_positions, position_ids), dim=-1), attention_mask)
            return logits[:, -seq:], cache
        logits, returned = super().forward(input_ids, position_ids, attention_mask, cache, document_ids)
        held = cache is not None
        returned.ids = torch.cat((cache.ids, input_ids), dim=1) if held else input_ids
        returned.token_positions = torch.cat((cache.token_positions, position_ids), dim=-1) if held else position_ids
        returned.theta = self.row_theta
        return logits, returned


class RecurrentMixer(nn.Module):
    """A diagonal linear recurrence beside each attention layer: ``h_t = a ⊙ h_(t−1) + (1 − a) ⊙
    W x_t``, out ``U h_t``; its state runs along the sequence (kept in the cache between calls) and
    restarts at each packed document; a pad (mask 0) adds nothing to it."""

    def __init__(self):
        super().__init__()
        self.decay = nn.Parameter(torch.linspace(0.5, 0.95, WIDTH))
        self.into, self.out = nn.Linear(WIDTH, WIDTH, bias=False), nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x, state, keep, starts):
        """``x`` (batch, seq, width); ``state`` (batch, width) or None; ``keep`` (batch, seq) 0 at
        pads; ``starts`` (batch, seq) True where a document starts. Out: (output, last state)."""
        inputs = (1 - self.decay) * self.into(x) * keep[..., None].to(x.dtype)
        h = torch.zeros_like(inputs[:, 0]) if state is None else state
        outputs = []
        for t in range(x.shape[1]):
            h = torch.where(starts[:, t, None], 0.0, h) * self.decay + inputs[:, t]
            outputs.append(h)
        return self.out(torch.stack(outputs, dim=1)), h


class RecurrentTinyLM(TinyLM):
    """TinyLM with a :class:`RecurrentMixer` beside each attention layer (a hybrid, as Jamba's or
    RecurrentGemma's): the mixers' states continue through the cache and restart at each document."""

    def __init__(self):
        super().__init__()
        self.mixers = nn.ModuleList(RecurrentMixer() for _ in range(LAYERS))
        for mixer in self.mixers:
            nn.init.normal_(mixer.into.weight, std=INIT)
            nn.init.normal_(mixer.out.weight, std=INIT)

    def carried_state(self, cache, layer, seq):
        """The state a call of ``seq`` tokens starts from."""
        return getattr(cache, "states", {}).get(layer)

    def document_starts(self, documents, seq):
        if documents is None:
            return torch.zeros(self.call_keep.shape[0], seq, dtype=torch.bool, device=self.call_keep.device)
        return torch.cat((torch.zeros_like(documents[:, :1], dtype=torch.bool), documents.diff(dim=-1) != 0), -1)

    def attention(self, layer, block, x, positions, allowed, cache, continuing):
        out = super().attention(layer, block, x, positions, allowed, cache, continuing)
        seq = x.shape[1]
        mixed, state = self.mixers[layer](x, self.carried_state(cache, layer, seq), self.call_keep[:, -seq:],
                                          self.document_starts(self.call_documents, seq))
        if not hasattr(cache, "states"):
            cache.states = {}
        cache.states[layer] = state
        return out + mixed

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        held = 0 if cache is None else cache.get_seq_length()
        self.call_keep = attention_mask if attention_mask is not None else \
            torch.ones(input_ids.shape[0], held + input_ids.shape[1], dtype=torch.long, device=input_ids.device)
        self.call_documents = document_ids
        return super().forward(input_ids, position_ids, attention_mask, cache, document_ids)


# ------------------------------------------------------------------ declarations


@dataclass(frozen=True)
class ModelMutant:
    """One mutant: its record, the claims it fails (exactly), why where several fail; or, for a
    known survivor, why no relation kills it and the claims it leaves ``undecided`` instead."""

    record: posenc.EncoderRecord
    fails: frozenset[str]
    why: str = ""
    survives: str = ""
    undecided: frozenset[str] = frozenset()
    control: str = "tinylm"  # the control whose declarations it keeps
    regimes: frozenset[str] = frozenset({"given", "own"})  # where a two-regime relation fails
    blame: str = ""  # its violations' blame: "" the positions, else a word the blame names ("model", "recurrent")


def _build(model_class, traits=TRAITS):
    def build(config: posenc.BuildConfig):
        return TupleLM(model_class().to(device=config.device, dtype=config.dtype), traits)

    return build


CONTROL = posenc.EncoderRecord(
    name="tinylm", build=_build(TinyLM), kind="model", model=TRAITS, source=SOURCE, origin="plug-in",
    claims=model_claims(),
    description="TinyLM control: pure-torch causal LM, half-split RoPE with float32 angles, an explicit KV cache",
)
#: The dynamic-NTK control: its design turns a window past the maximum with a larger base.
DYNAMIC_TRAITS = dataclasses.replace(TRAITS, rescales_at=MAX_POSITION)
DYNAMIC_CONTROL = posenc.EncoderRecord(
    name="tinylm_dynamic", build=_build(DynamicTinyLM, DYNAMIC_TRAITS), kind="model", model=DYNAMIC_TRAITS,
    source=SOURCE, origin="plug-in",
    claims=model_claims({"MODEL-7": posenc.refuted(
        "dynamic NTK: a window past the maximum turns with the base of its largest position, the window at 0 with "
        "the original base")}),
    description="TinyLM with dynamic NTK scaling, per-row bases and a cache of unrotated keys re-rotated each call",
)
#: The sliding-window control: a window of 8 in every pass, a rolling cache.
WINDOWED_CONTROL = posenc.EncoderRecord(
    name="tinylm_windowed", build=_build(WindowedTinyLM), kind="model", model=TRAITS, source=SOURCE,
    origin="plug-in", claims=model_claims(),
    description="TinyLM with a sliding window of 8 and a rolling cache of the keys the window still reaches",
)
#: The hybrid control: a recurrent mixer beside each attention layer.
RECURRENT_CONTROL = posenc.EncoderRecord(
    name="tinylm_recurrent", build=_build(RecurrentTinyLM), kind="model", model=TRAITS, source=SOURCE,
    origin="plug-in", claims=model_claims(),
    description="TinyLM with a diagonal linear recurrence beside each attention layer, its state in the cache",
)
CONTROLS = {CONTROL.name: CONTROL, DYNAMIC_CONTROL.name: DYNAMIC_CONTROL, WINDOWED_CONTROL.name: WINDOWED_CONTROL,
            RECURRENT_CONTROL.name: RECURRENT_CONTROL}
MUTANTS: list[ModelMutant] = []


def mutant(*, fails: set[str] = frozenset(), why: str = "", survives: str = "", undecided: set[str] = frozenset(),
           regimes: set[str] = frozenset({"given", "own"}), blame: str = ""):
    """Declare a ``TinyLM`` subclass a mutant named ``tinylm_<its snake-case name>``: its control's
    record and declarations (the dynamic control's for a ``DynamicTinyLM``), its build, and the
    claims it must fail."""

    def decorate(model_class):
        name = "tinylm_" + "".join(f"_{c.lower()}" if c.isupper() else c for c in model_class.__name__).lstrip("_")
        control = DYNAMIC_CONTROL if issubclass(model_class, DynamicTinyLM) else \
            WINDOWED_CONTROL if issubclass(model_class, WindowedTinyLM) else \
            RECURRENT_CONTROL if issubclass(model_class, RecurrentTinyLM) else CONTROL
        record = dataclasses.replace(control, name=name, build=_build(model_class, control.model),
                                     description=" ".join((model_class.__doc__ or "").split()))
        MUTANTS.append(ModelMutant(record, frozenset(fails), why, survives, frozenset(undecided), control.name,
                                   frozenset(regimes), blame))
        return model_class

    return decorate


CACHE_PATH = ("the cached path is wrong in both regimes: a token-by-token decode (MODEL-2) and a chunked prefill "
              "(MODEL-3) continue a cache")
FULL_PASS = ("a fresh pass and a continuation differ: fresh passes are the references of the decode (MODEL-2) and of "
             "the chunked prefill (MODEL-3)")
OWN_CACHE_PATH = ("with the model's own positions only: a token-by-token decode (MODEL-2) and a chunked prefill "
                  "(MODEL-3) continue a cache, and given positions never reach the defect")


# ------------------------------------------------------------------ the cache's offsets


@mutant(fails={"MODEL-2", "MODEL-3", "MODEL-4"},
        why=CACHE_PATH + "; the cache length counts a padded row's pads, so its steps turn otherwise than the row "
            "alone (MODEL-4)")
class DecodeRowsFromZero(TinyLM):
    """a continuation's rotary rows start at 0 instead of at the cache length (executorch #2010)"""

    def rotary_positions(self, layer, positions, cache, continuing):
        return positions - cache.layer_length(layer) if continuing else positions


@mutant(fails={"MODEL-2", "MODEL-3"}, why=CACHE_PATH)
class LayerOffsetAfterUpdate(TinyLM):
    """layers above the first offset their RoPE by the cache length layer 0 already incremented
    (flash-linear-attention #747)"""

    def rotary_positions(self, layer, positions, cache, continuing):
        # the cache's length (layer 0's) instead of this layer's own
        return positions + cache.get_seq_length() - cache.layer_length(layer) if continuing else positions


@mutant(fails={"MODEL-2", "MODEL-3"}, why=OWN_CACHE_PATH, regimes={"own"})
class OwnPositionsFromZero(TinyLM):
    """with no positions given, a continuation counts its positions from 0, not from the cache's
    length (the decode offset of executorch #2010, in the model's own default)"""

    def own_positions(self, mask, documents, start, seq):
        return super().own_positions(mask[:, start:], documents, 0, seq)


@mutant(fails={"MODEL-2", "MODEL-3"}, why=OWN_CACHE_PATH, regimes={"own"})
class OwnOffsetReadAfterUpdate(TinyLM):
    """with no positions given, layers above the first take their offset from the cache that layer
    0 already advanced (flash-linear-attention #766)"""

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        self.own = position_ids is None
        return super().forward(input_ids, position_ids, attention_mask, cache, document_ids)

    def rotary_positions(self, layer, positions, cache, continuing):
        if self.own and continuing:
            return positions + cache.get_seq_length() - cache.layer_length(layer)
        return positions


@mutant(fails={"MODEL-3"}, why="", regimes={"own"})
class ChunkOffsetRoundedToTheChunk(TinyLM):
    """with no positions given, a continuation starts at the cache length rounded down to a
    multiple of this call's length: exact for one-token steps and for chunks of one size"""

    def own_positions(self, mask, documents, start, seq):
        rounded = (start // seq) * seq
        return super().own_positions(mask, documents, start, seq) - (start - rounded)


@mutant(fails={"MODEL-3"})
class EvenChunkRestartsAtZero(TinyLM):
    """a continuation of an even number of tokens (a chunk of 2, 4, 8: chunked prefill, speculative
    verification) rotates from 0 instead of from the cache length; single tokens and odd chunks
    are right"""

    def rotary_positions(self, layer, positions, cache, continuing):
        even = positions.shape[1] % 2 == 0
        return positions - cache.layer_length(layer) if continuing and even else positions


# ------------------------------------------------------------------ padding and batches


@mutant(fails={"MODEL-4"}, regimes={"own"})
class EvenPadMovesTheFirstToken(TinyLM):
    """with no positions given, a row left-padded by an even count puts its first real token at
    position 1, beside the second (a pad arithmetic off by one on one parity)"""

    def own_positions(self, mask, documents, start, seq):
        positions = super().own_positions(mask, documents, start, seq)
        pads = (mask == 0).sum(dim=-1, keepdim=True)
        first = (pads > 0) & (pads % 2 == 0) & (positions == 0) & mask[:, start : start + seq].bool()
        return torch.where(first, 1, positions)


@mutant(fails={"MODEL-5"}, regimes={"own"})
class OwnPositionsOfTheFirstRow(TinyLM):
    """with no positions given, the whole batch takes the first row's positions (a per-row offset
    taken from one row: unsloth #3803's class, in the model's own default)"""

    def own_positions(self, mask, documents, start, seq):
        return super().own_positions(mask, documents, start, seq)[:1].expand(mask.shape[0], seq)


@mutant(fails={"MODEL-5"})
class OnePositionPerBatch(TinyLM):
    """a batched decode step gives every row the first row's position (unsloth #3699)"""

    def rotary_positions(self, layer, positions, cache, continuing):
        return positions[:1].expand_as(positions) if continuing else positions


@mutant(fails={"MODEL-4"}, blame="model")
class MaskIgnored(TinyLM):
    """left padding attended: the attention mask is not applied"""

    def allowed_keys(self, mask, start, seq, continuing):
        return super().allowed_keys(torch.ones_like(mask), start, seq, continuing)


@mutant(fails={"MODEL-5"}, blame="model")
class NormAcrossBatch(TinyLM):
    """RMSNorm's mean taken over the batch and the features, not the features alone"""

    def normalize(self, weight, h):
        wide = h.to(torch.float32)
        return (wide * torch.rsqrt(wide.pow(2).mean(dim=(0, -1), keepdim=True) + EPS)).to(h.dtype) * weight


# ------------------------------------------------------------------ precision


@mutant(fails={"MODEL-6"})
class InvFreqBuffer(TinyLM):
    """θ kept as a float buffer, which model.to(torch.bfloat16) rounds (transformers #29496)"""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", super().inverse_frequencies("cpu"), persistent=False)

    def inverse_frequencies(self, device):
        return self.inv_freq


@mutant(fails={"MODEL-6"})
class AnglesUnderAutocast(TinyLM):
    """angles formed by a matmul that bf16 autocast runs in bf16: positions past 256 round
    (diffusers #13920)"""

    def angles(self, positions):
        theta = self.inverse_frequencies(positions.device)
        return (theta[None, :, None] @ positions.to(torch.float32)[:, None, :]).transpose(1, 2)


# ------------------------------------------------------------------ keys, masks and full passes


@mutant(fails={"MODEL-1", "MODEL-4", "MODEL-7", "MODEL-8"},
        why="a key turns at its slot, its position less the row's start: the logits depend on where the positions "
            "start (MODEL-1, and a window past the maximum, MODEL-7), on how far a row is left-padded (MODEL-4) and "
            "on where a packed document sits (MODEL-8)")
class KeysRotatedAtSlots(TinyLM):
    """keys cached unrotated and rotated, when read, at their slot in the cache instead of their
    positions (re-rotating attention-sink caches)"""

    def keys_and_values(self, layer, k, v, positions, cache):
        keys, values = cache.update(layer, k, v)
        slots = torch.arange(keys.shape[2], device=keys.device).expand(keys.shape[0], -1)
        return self.rotate(keys, slots), values


@mutant(fails={"MODEL-2", "MODEL-3"}, why=FULL_PASS, blame="model")
class CausalOffByOne(TinyLM):
    """the full pass's causal mask lets each token see the next one; a continuation's is right"""

    def allowed_keys(self, mask, start, seq, continuing):
        if continuing:
            return super().allowed_keys(mask, start, seq, continuing)
        query, key = torch.arange(seq, device=mask.device)[:, None], torch.arange(seq, device=mask.device)[None]
        return (key <= query + 1)[None, None] & mask.bool()[:, None, None, :]


@mutant(fails={"MODEL-2", "MODEL-3"}, why=FULL_PASS, blame="model")
class WindowInFullPassOnly(TinyLM):
    """a sliding window of 8 in the full pass, none when continuing a cache"""

    def allowed_keys(self, mask, start, seq, continuing):
        allowed = super().allowed_keys(mask, start, seq, continuing)
        if continuing:
            return allowed
        query, key = torch.arange(seq, device=mask.device)[:, None], torch.arange(seq, device=mask.device)[None]
        return allowed & (key > query - WINDOW)[None, None]


# ------------------------------------------------------------------ past the maximum


@mutant(fails={"MODEL-7"},
        undecided={"MODEL-2", "MODEL-3", "MODEL-6"},
        why="a window across or past position 31 clamps (MODEL-7); decoding, chunks and the far query agree with "
            "fresh passes that clamp alike, and a position one off moves nothing past 31, so they cannot hold "
            "(undecided)")
class ClampedTable(TinyLM):
    """positions clamped to a cos/sin table of max_position = 32 rows (transformers #5611's clamp)"""

    def cos_sin(self, positions):
        cos, sin = super().cos_sin(torch.arange(MAX_POSITION, device=positions.device)[None])
        row = positions.clamp(0, MAX_POSITION - 1)
        return cos[0, 0][row][:, None], sin[0, 0][row][:, None]


@mutant(fails={"MODEL-7"})
class ScaleDroppedPastMaximum(TinyLM):
    """positions divided by a linear scaling factor of 2 up to max_position, and not past it (a
    scaling factor dropped where the table it was folded into ends)"""

    def angles(self, positions):
        wide = positions.to(torch.float32)
        return super().angles(torch.where(positions < MAX_POSITION, wide / 2, wide))


@mutant(fails={"MODEL-2", "MODEL-3", "MODEL-6", "MODEL-7"},
        why="a cos/sin table of 32 rows indexed directly: every relation that reaches past position 31 (a 40-token "
            "decode and its chunks, the far query) meets an IndexError where it says the model answers, and MODEL-7 "
            "because the error names no limit")
class TablePastMaximumRaises(TinyLM):
    """positions read from a cos/sin table of max_position = 32 rows: past it an IndexError naming no limit"""

    def cos_sin(self, positions):
        cos, sin = super().cos_sin(torch.arange(MAX_POSITION, device=positions.device)[None])
        return cos[0, 0][positions][:, None], sin[0, 0][positions][:, None]


# ------------------------------------------------------------------ packing


@mutant(fails={"MODEL-8"}, blame="model")
class AttentionLeaksAcrossDocuments(TinyLM):
    """packed documents attend to the documents before them: the document ids never reach the mask"""

    def within_documents(self, allowed, documents):
        return allowed


# ------------------------------------------------------------------ dynamic NTK
#
# Positions that count a row's pads, or run on across packed documents, are a shift of a whole
# row or document: RoPE alone cannot see one. A dynamic base can: it grows with the largest
# position, so these defects live on the dynamic control.


@mutant(fails={"MODEL-2", "MODEL-3"},
        why="keys and values cached before the base grew keep the old base: a decode step (MODEL-2) and a chunk "
            "(MODEL-3) past the threshold differ from a fresh pass on their prefix, in both regimes")
class DynamicStaleCache(DynamicTinyLM):
    """the cache kept when the base grows: keys rotated, and upper layers' keys and values computed,
    with the base of their call (transformers #25104's class)"""

    def recomputes(self, cache, positions):
        return False


@mutant(fails={"MODEL-5"})
class DynamicBatchMaximumBase(DynamicTinyLM):
    """every row takes the base of the batch's largest position (transformers' dynamic NTK takes
    ``max(position_ids)`` over the batch)"""

    def row_lengths(self, positions):
        return super().row_lengths(positions).amax().expand(positions.shape[0])


@mutant(fails={"MODEL-4"}, regimes={"own"})
class DynamicPadPositionsFromArange(DynamicTinyLM):
    """with no positions given, positions count every column, pads included (transformers #22161's
    class: ``arange`` where the mask's ``cumsum`` is due), so a padded row's base grows early"""

    def own_positions(self, mask, documents, start, seq):
        if documents is not None:
            return super().own_positions(mask, documents, start, seq)
        return torch.arange(start, start + seq, device=mask.device).expand(mask.shape[0], seq)


@mutant(fails={"MODEL-8"}, regimes={"own"})
class DynamicPackedPositionsNotRestarted(DynamicTinyLM):
    """with documents but no positions given, positions run on across the pack instead of
    restarting at each document (torchtitan #2559, OLMo-core #591), so the base follows the pack"""

    def own_positions(self, mask, documents, start, seq):
        return super().own_positions(mask, None, start, seq)


# ------------------------------------------------------------------ a rolling cache


@mutant(fails={"MODEL-2", "MODEL-3", "MODEL-4"},
        why=OWN_CACHE_PATH + "; the keys held count a padded row's pads, so its decode steps start elsewhere than "
            "the row alone's (MODEL-4)", regimes={"own"})
class RollingCachePositionsFromWhatItHolds(WindowedTinyLM):
    """with no positions given, a continuation starts at the number of keys the rolling cache
    still holds, not at the tokens it has seen: positions stop growing once the window is full"""

    def own_positions(self, mask, documents, start, seq):
        held = min(start, WINDOW - 1)
        return super().own_positions(mask, documents, start, seq) - (start - held)


# ------------------------------------------------------------------ the bare call
#
# ``model(ids)``, then ``model(next_id, cache)`` with nothing else: the commonest inference call,
# and the only one these defects reach (a mask, as generate passes it, takes the right path).

BARE_PATH = ("with neither positions nor a mask (bare calls) only: a token-by-token decode (MODEL-2) and a chunked "
             "prefill (MODEL-3) continue a cache; a mask of ones, generate and given positions never reach the defect")


@mutant(fails={"MODEL-2", "MODEL-3"}, why=BARE_PATH, regimes={"own"})
class BareOffsetFromAnEmptyLayer(TinyLM):
    """called with neither positions nor a mask, a continuation counts its positions from the length
    of a layer that keeps no keys, 0 (MiniMax: ``get_seq_length`` reads a linear-attention layer)"""

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        if position_ids is None and attention_mask is None and cache is not None and document_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        return super().forward(input_ids, position_ids, attention_mask, cache, document_ids)


@mutant(fails={"MODEL-2", "MODEL-3"}, why=BARE_PATH, regimes={"own"})
class BareOffsetFromAnotherLayer(TinyLM):
    """called with neither positions nor a mask, each layer offsets its RoPE by the length of the
    layer below it, which this call already updated (a per-layer cache length read from the wrong layer)"""

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        self.bare = position_ids is None and attention_mask is None
        return super().forward(input_ids, position_ids, attention_mask, cache, document_ids)

    def rotary_positions(self, layer, positions, cache, continuing):
        if self.bare and continuing and layer > 0:
            return positions + cache.layer_length(layer - 1) - cache.layer_length(layer)
        return positions


# ------------------------------------------------------------------ recurrent state


@mutant(fails={"MODEL-3"}, blame="recurrent")
class RecurrentStateDroppedOnChunk(RecurrentTinyLM):
    """a continuation of more than one token starts the recurrent state from zero, as a prefill
    does (Jamba's chunked continuation restarts its Mamba scan)"""

    def carried_state(self, cache, layer, seq):
        return super().carried_state(cache, layer, seq) if seq == 1 else None


@mutant(fails={"MODEL-8"}, blame="recurrent")
class RecurrentStateLeaksAcrossDocuments(RecurrentTinyLM):
    """the recurrent state runs on from one packed document into the next (RecurrentGemma's Conv1D
    window across documents, which Google's reference masks)"""

    def document_starts(self, documents, seq):
        return super().document_starts(None, seq)


# ------------------------------------------------------------------ the contract


@mutant(fails={"contract"})
class PaddedVocabularyLogits(TinyLM):
    """the head padded to a multiple of 64 columns for speed, and the padding never sliced off the logits"""

    def __init__(self):
        super().__init__()
        padded = nn.Linear(WIDTH, 64 * math.ceil((VOCAB + 1) / 64), bias=False)
        with torch.no_grad():
            padded.weight.zero_()
            padded.weight[:VOCAB] = self.head.weight
        self.head = padded


RECORDS = [*CONTROLS.values(), *(m.record for m in MUTANTS)]
EXPECTED_CLAIMS: dict[str, set[str]] = {m.record.name: set(m.fails) for m in MUTANTS}
WHY: dict[str, str] = {m.record.name: m.why for m in MUTANTS if m.why}
KNOWN_SURVIVORS: dict[str, str] = {m.record.name: m.survives for m in MUTANTS if m.survives}
EXPECTED_UNDECIDED: dict[str, set[str]] = {m.record.name: set(m.undecided) for m in MUTANTS}

__all__ = ["CONTROL", "CONTROLS", "DYNAMIC_CONTROL", "WINDOWED_CONTROL", "DynamicTinyLM", "WindowedTinyLM", "EXPECTED_CLAIMS", "EXPECTED_UNDECIDED",
           "KNOWN_SURVIVORS", "MUTANTS", "ModelMutant", "RECORDS", "TinyLM", "WHY"]

for _record in RECORDS:
    posenc.register(_record)

