"""torchtune's ``TransformerDecoder`` (llama3, llama3_1, qwen2, …) in the harness's convention
(:mod:`.models`), with no wrapper of the user's.

torchtune (0.6) keeps its KV caches inside the attention modules. With caches set up it demands a
boolean ``mask`` of shape ``(batch, seq, cache slots)`` (True: query i may attend key slot j) and
``input_pos`` of shape ``(batch, seq)``; the cache only appends. :class:`TorchtuneLM` owns the
caches of the model it wraps:

* **Every call goes through the KV cache** (a one-pass reference is a prefill into a fresh
  cache): one path for references and continuations, and none of torchtune's trap that a model
  whose caches are set up but disabled attends bidirectionally when no mask is given.
* **Capacity.** A new sequence gets ``next_pow2(max(needed, 16))`` slots; caches are reused
  (``reset_caches()``) where batch, dtype and device match and the capacity lies in
  ``[target, 4·target]``, else deleted and set up again (``setup_caches`` skips while a cache
  exists). A continuation that needs more slots grows them, copying what they hold.
* **Cache dtype.** What the k/v projections produce: the autocast dtype under autocast, else the
  parameters' dtype (so ``model.to(torch.bfloat16)`` works); a continuation in another dtype casts
  the held cache.
* **Positions.** Given ones as they are; without them each row continues from its last real
  position + 1 (``cumsum(mask) − 1`` under left padding, the cache's length without pads), and
  packed documents (``document_ids``) restart at 0.
* **Mask.** Key slot j is visible to query i where j holds a real token of this sequence, is no
  later than i's own slot and, when packed, of i's document; every query also sees its own slot
  (an all-False row gives NaN out of SDPA, which would reach the real rows through the pads).

Positions past torchtune's RoPE table (``max_seq_len`` rows) reach torchtune as they are: what it
does there is the model's behaviour, for MODEL-7 to judge.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn

from .model_subject import ModelSubject, NotInConvention
from ..catalogue.records import ModelTraits

MIN_CAPACITY = 16
SHRINK_FACTOR = 4


def is_torchtune_model(model) -> bool:
    """A torchtune decoder: its class lives in ``torchtune.``, or it has torchtune's cache API."""
    if isinstance(model, ModelSubject):
        return False
    return type(model).__module__.startswith("torchtune.") or (
        callable(getattr(model, "setup_caches", None)) and callable(getattr(model, "caches_are_enabled", None)))


@dataclass
class TorchtuneCursor:
    """The state of one sequence in the model's own caches."""

    length: int  # cache slots used
    key_mask: torch.Tensor  # (batch, length) bool: slot holds a real token
    next_position: torch.Tensor  # (batch,) long: the next position of each row without position_ids
    epoch: int  # which sequence (cache=None call) this belongs to


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


_epochs = itertools.count(1)


class TorchtuneLM(ModelSubject):
    """A torchtune ``TransformerDecoder`` (llama3, llama3_1, qwen2, …) in the harness's convention."""

    def __init__(self, model: nn.Module, traits: ModelTraits | None = None):
        super().__init__(model, traits if traits is not None else torchtune_traits(model))
        self._epoch = 0

    # --- the model's caches ------------------------------------------------------------------
    def _kv_caches(self):
        return [m.kv_cache for m in self.model.modules()
                if isinstance(getattr(m, "kv_cache", None), nn.Module) and hasattr(m.kv_cache, "k_cache")]

    def _cache_shape(self):
        caches = self._kv_caches()
        if not caches or not self.model.caches_are_setup():
            return None
        k = caches[0].k_cache
        return k.shape[0], k.shape[2], k.dtype, k.device

    def _setup(self, batch: int, capacity: int, dtype, device):
        from torchtune.modules.common_utils import delete_kv_caches

        if self.model.caches_are_setup():
            delete_kv_caches(self.model)  # setup_cache skips (with a warning) while a cache exists
        with torch.device(device):  # KVCache allocates with torch.zeros, on the default device otherwise
            self.model.setup_caches(batch, dtype, decoder_max_seq_len=capacity)

    def _grow(self, capacity: int):
        """More slots mid-sequence: set up bigger caches and copy what the old ones hold."""
        caches = self._kv_caches()
        held = [(c.k_cache, c.v_cache, c.size) for c in caches]
        batch, _, dtype, device = self._cache_shape()
        self._setup(batch, capacity, dtype, device)
        for cache, (k, v, size) in zip(self._kv_caches(), held, strict=True):
            cache.k_cache[:, :, : k.shape[2]].copy_(k)
            cache.v_cache[:, :, : v.shape[2]].copy_(v)
            cache.cache_pos.add_(size)

    def _cast(self, dtype):
        for cache in self._kv_caches():
            cache.k_cache = cache.k_cache.to(dtype)
            cache.v_cache = cache.v_cache.to(dtype)

    def _rewind(self, length: int):
        for cache in self._kv_caches():
            size = cache.size
            if size < length:
                raise ValueError(f"the model's cache holds {size} slots, the cursor {length}: it was reset elsewhere")
            cache.cache_pos.sub_(size - length)

    def _kv_dtype(self, device) -> torch.dtype:
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
        return next(p.dtype for p in self.model.parameters() if p.is_floating_point())

    # --- the call ------------------------------------------------------------------------------
    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, document_ids=None):
        batch, n = input_ids.shape
        if document_ids is not None and cache is not None:
            raise NotInConvention("packed documents start a sequence: no cache to continue")
        device = input_ids.device
        dtype = self._kv_dtype(device)
        if cache is None:
            start = 0
            target = _next_pow2(max(n, MIN_CAPACITY))
            shape = self._cache_shape()
            if shape is not None and shape[0] == batch and shape[2] == dtype and shape[3] == device \
                    and target <= shape[1] <= SHRINK_FACTOR * target:
                self.model.reset_caches()
            else:
                self._setup(batch, target, dtype, device)
            self._epoch = next(_epochs)
            held_mask = torch.zeros(batch, 0, dtype=torch.bool, device=device)
            next_position = torch.zeros(batch, dtype=torch.long, device=device)
        else:
            if not isinstance(cache, TorchtuneCursor) or cache.epoch != self._epoch:
                raise ValueError("this cache belongs to an earlier sequence: the torchtune model keeps one cache, "
                                 "reset by the latest cache=None call")
            if cache.key_mask.shape[0] != batch:
                raise ValueError(f"the cache holds {cache.key_mask.shape[0]} rows, the call has {batch}")
            start, held_mask, next_position = cache.length, cache.key_mask, cache.next_position
            shape = self._cache_shape()
            if shape is None:
                raise ValueError("the model's caches were deleted since this sequence started")
            if self._kv_caches()[0].size != start:
                self._rewind(start)
            if shape[2] != dtype:
                self._cast(dtype)
            if start + n > shape[1]:
                self._grow(_next_pow2(start + n))
        capacity = self._cache_shape()[1]

        # which slots hold real tokens: cache + new
        if attention_mask is None:
            keys = torch.cat((held_mask, torch.ones(batch, n, dtype=torch.bool, device=device)), dim=1)
        else:
            given = attention_mask.to(device=device).bool()
            if given.shape == (batch, start + n):
                keys = given
            elif given.shape == (batch, n):
                keys = torch.cat((held_mask, given), dim=1)
            else:
                raise ValueError(f"attention_mask of shape {tuple(given.shape)}: expected ({batch}, {start + n}) "
                                 f"(cache and new tokens) or ({batch}, {n})")
        new_real = keys[:, start:]

        if position_ids is None and document_ids is not None:
            index = torch.arange(n, device=device).expand(batch, n)
            first = torch.cat((torch.ones_like(document_ids[:, :1], dtype=torch.bool),
                               document_ids.diff(dim=-1) != 0), dim=-1)
            positions = index - torch.cummax(torch.where(first, index, 0), dim=-1).values
        elif position_ids is None:
            positions = next_position[:, None] + new_real.long().cumsum(dim=1) - 1
            positions = torch.where(new_real, positions, torch.zeros_like(positions))
        else:
            positions = position_ids.to(device=device, dtype=torch.long)
            if positions.dim() == 1:
                positions = positions[None]
            positions = positions.expand(batch, n)
        slots = torch.arange(capacity, device=device)
        own = start + torch.arange(n, device=device)  # each query's own slot
        real = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        real[:, : start + n] = keys
        visible = real[:, None, :] & (slots[None, :] <= own[:, None])[None]
        if document_ids is not None:  # no cache before: slots 0 … n − 1 are this call's tokens
            same = torch.zeros(batch, n, capacity, dtype=torch.bool, device=device)
            same[:, :, :n] = document_ids[:, :, None] == document_ids[:, None, :]
            visible = visible & same
        mask = visible | (slots[None, :] == own[:, None])[None]

        out = self.model(input_ids, mask=mask, input_pos=positions)
        logits = _logits_of(self.model, out)

        seen = torch.where(new_real, positions, torch.full_like(positions, -1)).amax(dim=1) if n else None
        if n:
            next_position = torch.where(new_real.any(dim=1), seen + 1, next_position)
        return logits, TorchtuneCursor(start + n, keys, next_position, self._epoch)


def _logits_of(model, out) -> torch.Tensor:
    """The logits out of torchtune's answer: a tensor, chunks (``set_num_output_chunks``), or hidden
    states followed by the output (``output_hidden_states``)."""
    if isinstance(out, torch.Tensor):
        return out
    if getattr(model, "output_hidden_states", None):
        out = out[-1]
        if isinstance(out, torch.Tensor):
            return out
    return torch.cat(list(out), dim=1)


def torchtune_traits(model: nn.Module, **given) -> ModelTraits:
    """RoPE (relative) with a precomputed table of ``max_seq_len`` rows: positions past it fail,
    so ``extrapolates=False``; positions and masks are taken."""
    from importlib.metadata import version

    embeddings = getattr(model, "tok_embeddings", None)
    found = {
        "positions": "relative",
        "max_position": int(model.max_seq_len) if getattr(model, "max_seq_len", None) else None,
        "extrapolates": False,
        "takes_position_ids": True,
        "takes_attention_mask": True,
        "packing": "document_ids",
        "library": f"torchtune {version('torchtune')} {type(model).__name__}",
    }
    if isinstance(embeddings, nn.Embedding):
        found["vocab_size"] = int(embeddings.num_embeddings)
    return ModelTraits(**{**found, **given})
