"""Calling a rotary encoder through its record's protocol.

Specs call every encoder as ``f(x, positions=None, offset=0)`` and ask for q and k together with
:func:`encode_pair`. :func:`subject` turns a ``pair`` or ``cos_sin`` module into that call, passing the
library's own code path through untouched: positions go in as the library takes them (int64,
``(batch, seq)``; an offset becomes ``arange(offset, offset + seq)``), nothing is cast, cached or
checked on the way. A single tensor ``x`` is encoded as q (``f(x, x, p, p)[0]``).
"""

from __future__ import annotations

import torch
from torch import nn

from .records import EncoderRecord


def _positions(x: torch.Tensor, positions, offset) -> torch.Tensor:
    """What a pair or cos/sin library receives: explicit positions as given (a ``(seq,)`` tensor
    expanded over the batch), or ``arange(offset, offset + seq)`` for an offset."""
    batch, seq = x.shape[0], x.shape[1]
    if positions is None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        positions = torch.arange(offset, offset + seq, device=x.device)
    elif offset != 0:
        raise ValueError("give either positions or offset, not both")
    if isinstance(positions, torch.Tensor) and positions.dim() == 1:
        positions = positions.unsqueeze(0).expand(batch, -1)
    return positions


class ProtocolSubject(nn.Module):
    """A ``pair`` or ``cos_sin`` encoder seen as ``f(x, positions=None, offset=0)`` (q's side), with
    :meth:`pair` for q and k. The library's module is a submodule, so ``parameters()``, buffers and
    ``.to()`` reach it as they are."""

    def __init__(self, record: EncoderRecord, library: nn.Module):
        super().__init__()
        self.record, self.library = record, library

    def pair(self, q, k, q_positions, k_positions):
        if self.record.protocol == "pair":
            return self.library(q, k, q_positions, k_positions)
        if q_positions is k_positions or (q.shape[:2] == k.shape[:2] and torch.equal(q_positions, k_positions)):
            cos, sin = self.library(q, q_positions)
            return self.record.apply(q, k, cos, sin)
        q_cos, q_sin = self.library(q, q_positions)
        k_cos, k_sin = self.library(k, k_positions)
        return self.record.apply(q, q, q_cos, q_sin)[0], self.record.apply(k, k, k_cos, k_sin)[1]

    def forward(self, x, positions=None, offset=0):
        p = _positions(x, positions, offset)
        return self.pair(x, x, p, p)[0]


def subject(record: EncoderRecord, module: nn.Module) -> nn.Module:
    """``module`` as the specs call it: itself for the ``single`` protocol, wrapped otherwise."""
    return module if record.protocol == "single" else ProtocolSubject(record, module)


def encode_pair(module: nn.Module, q, k, q_positions=None, k_positions=None, *, q_offset=0, k_offset=0):
    """``(f_q(q, m), f_k(k, n))`` through the richest protocol the encoder has, in one call: a ``pair``
    or ``cos_sin`` call, or a single-tensor call on q and k stacked along the batch (each row at its
    own positions). One call, as a model's layer makes for its q and k: state an encoder keeps
    between calls cannot leak from q's call into k's (ROPE-9 judges that), and a length-dependent
    schedule sees one length for both. q and k of different lengths take two single calls."""
    m = _positions(q, q_positions, q_offset)
    n = _positions(k, k_positions, k_offset)
    if isinstance(module, ProtocolSubject):
        return module.pair(q, k, m, n)
    if q.shape[1:] != k.shape[1:] or not isinstance(m, torch.Tensor) or not isinstance(n, torch.Tensor):
        return module(q, q_positions, offset=q_offset), module(k, k_positions, offset=k_offset)
    m, n = (p.expand(t.shape[0], -1) if p.shape[0] == 1 else p for p, t in ((m, q), (n, k)))
    out = module(torch.cat((q, k)), torch.cat((m.to(q.device), n.to(q.device))))
    return out[: q.shape[0]], out[q.shape[0] :]


def build_subject(record: EncoderRecord, **config) -> nn.Module:
    """``record.make(**config)`` as the specs call it (see :func:`subject`)."""
    return subject(record, record.make(**config))
