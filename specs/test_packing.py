"""A collator that packs documents in one row, judged on its own (``specs/claims.md``, PACK). It is
called as ``collate([{'input_ids': [...]} (and 'position_ids' (3, len) for M-RoPE ids), ...])`` and
returns ``input_ids (1, n)``, ``position_ids (1, n)`` or ``(3, 1, n)``, and the boundaries it
declares (``cu_seq_lens``, ``seq_idx``). With documents ``d_0 … d_k`` of lengths ``n_0 … n_k``:

* PACK-1: each document's ids are its own, whatever is packed beside it: ``0 … n_i − 1`` (1D), the
  ids it brought (3D) (OLMo-core #591: positions global across documents; torchtitan #2559:
  positions never set when packing);
* PACK-2: ``cu_seq_lens`` starts ``0, n_0, n_0 + n_1, …`` and ends at the row's length; ``seq_idx``
  is one value a document, no two documents alike (a boundary off by one; values reused); the
  padding after the last document may share its value;
* PACK-3: the ids have the tokens' length on every axis, padding included (LLaMA-Factory #10783:
  packed M-RoPE ids not padded with the tokens);
* PACK-4: the row holds the documents' tokens in their order, padding only after them.

Each document is packed in two orders, so a document's ids are seen after different neighbours.
"""

from __future__ import annotations

import pytest
import torch

from posenc.harness.references import position_ids as P
from specs import support as s

LENGTHS = (5, 1, 7, 2)  # documents of one and two tokens too
ORDERS = ((0, 1, 2, 3), (2, 0, 3, 1))
#: Each document's M-RoPE ids (3D collators): text, then a 2 × 2 picture where it is long enough.
LAYOUTS = {5: [P.Span(P.TEXT, 1), P.Span(P.IMAGE, grid=(1, 4, 4))], 1: [P.Span(P.TEXT, 1)], 2: [P.Span(P.TEXT, 2)],
           7: [P.Span(P.TEXT, 2), P.Span(P.IMAGE, grid=(1, 4, 4)), P.Span(P.TEXT, 1)]}


def _packs(record):
    return record.producer.protocol == "packing"


def _documents(record) -> list[dict]:
    documents = []
    for d, n in enumerate(LENGTHS):
        document = {"input_ids": [100 * (d + 1) + k for k in range(n)]}
        if record.producer.axes == 3:
            document["position_ids"] = P.row_ids(LAYOUTS[n], merge=2)[0]
        documents.append(document)
    return documents


def _own_ids(record, document) -> torch.Tensor:
    if record.producer.axes == 3:
        return document["position_ids"]
    return torch.arange(len(document["input_ids"])).unsqueeze(0)


def _packed(record, order):
    """The collator's answer for the documents in ``order``, its ids as ``(axes, n)``."""
    documents = _documents(record)
    collate = s.build(record)
    batch = collate([documents[d] for d in order])
    tokens = torch.as_tensor(batch["input_ids"]).reshape(-1)
    ids = torch.as_tensor(batch["position_ids"])
    ids = ids.reshape(ids.shape[0], -1) if record.producer.axes == 3 and ids.dim() == 3 else ids.reshape(1, -1)
    return documents, batch, tokens, ids


def _offsets(order) -> list[int]:
    out, at = [], 0
    for d in order:
        out.append(at)
        at += LENGTHS[d]
    return out


def _located(documents, tokens, order):
    """Where each document of ``order`` sits in the row, found by its own tokens (the start most of
    them agree on), or None where it cannot be found: PACK-4 judges the tokens."""
    row = tokens.tolist()
    found = []
    for d in order:
        starts = [k - j for j, t in enumerate(documents[d]["input_ids"]) for k in [i for i, x in enumerate(row) if x == t]]
        if not starts:
            return None
        found.append((d, max(set(starts), key=starts.count)))
    return found


def _located_or_undecided(documents, tokens, order):
    """:func:`_located`, or the spec ends undecided: where documents cannot be found, PACK-4 judges."""
    located = _located(documents, tokens, order)
    if located is None:
        s.undecided(f"documents packed in the order {list(order)} cannot be found in the row by their tokens: "
                    "PACK-4 judges that")
    return located


@pytest.mark.claim("PACK-1", kinds=("producer",), requires=_packs)
def test_each_documents_ids_are_its_own(record):
    for order in ORDERS:
        documents, batch, tokens, ids = _packed(record, order)
        for d, at in _located_or_undecided(documents, tokens, order):
            own = _own_ids(record, documents[d])
            got = ids[:, at:at + LENGTHS[d]]
            if tuple(got.shape) != tuple(own.shape):
                s.undecided(f"ids of shape {tuple(torch.as_tensor(batch['position_ids']).shape)} "
                            f"for {tokens.numel()} tokens: PACK-3 judges that")
            if not torch.equal(got, own):
                s.violated(f"documents packed in the order {list(order)}: document {d} (at {at}, {LENGTHS[d]} "
                           f"tokens) gets ids {got.tolist()}, its own are {own.tolist()}", order=list(order),
                           document=d)


@pytest.mark.claim("PACK-2", kinds=("producer",), requires=_packs)
def test_the_declared_boundaries_agree_with_the_documents(record):
    for order in ORDERS:
        documents, batch, tokens, _ = _packed(record, order)
        located = sorted(_located_or_undecided(documents, tokens, order), key=lambda found: found[1])  # as in the row
        offsets = [*(at for _, at in located), located[-1][1] + LENGTHS[located[-1][0]]]
        if "cu_seq_lens" in record.producer.boundaries:
            cu = torch.as_tensor(batch["cu_seq_lens"]).reshape(-1).tolist()
            if offsets[0] != 0:
                s.violated(f"documents of {[LENGTHS[d] for d, _ in located]} tokens start at {offsets[0]}, after "
                           f"padding: a packed row begins with its first document (cu_seq_lens {cu} starts at 0)",
                           order=list(order))
            if cu[:len(offsets)] != offsets or cu[-1] != tokens.numel() or cu != sorted(cu):
                s.violated(f"documents of {[LENGTHS[d] for d, _ in located]} tokens at {offsets[:-1]} in a row of "
                           f"{tokens.numel()}: cu_seq_lens {cu}, expected {offsets}"
                           + ("" if offsets[-1] == tokens.numel() else " then") + f" ending at {tokens.numel()}",
                           order=list(order))
        if "seq_idx" in record.producer.boundaries:
            # one value a document, no two documents alike (a state indexed by seq_idx would join
            # them); the padding after the last document may share its value
            seq_idx = torch.as_tensor(batch["seq_idx"]).reshape(-1)
            values = []
            for k, (begin, end) in enumerate(zip(offsets, offsets[1:])):
                inside = seq_idx[begin:end].unique().tolist()
                if len(inside) != 1:
                    s.violated(f"documents of {[LENGTHS[d] for d in order]} tokens: seq_idx {seq_idx.tolist()} "
                               f"gives document {k} ({begin}…{end - 1}) the values {inside}, not one",
                               order=list(order))
                if inside[0] in values:
                    s.violated(f"documents of {[LENGTHS[d] for d in order]} tokens: seq_idx {seq_idx.tolist()} "
                               f"gives document {k} ({begin}…{end - 1}) the value {inside[0]} of document "
                               f"{values.index(inside[0])}", order=list(order))
                values.append(inside[0])


@pytest.mark.claim("PACK-3", kinds=("producer",), requires=_packs)
def test_packed_ids_have_the_tokens_length_on_every_axis(record):
    for order in ORDERS:
        _, batch, tokens, _ = _packed(record, order)
        ids = torch.as_tensor(batch["position_ids"])
        expected = (3, 1, tokens.numel()) if record.producer.axes == 3 else (1, tokens.numel())
        if tuple(ids.shape) != expected:
            s.violated(f"{tokens.numel()} packed tokens (documents of {[LENGTHS[d] for d in order]}, and padding) "
                       f"get position ids of shape {tuple(ids.shape)}, expected {expected}", order=list(order))


@pytest.mark.claim("PACK-4", kinds=("producer",), requires=_packs)
def test_the_row_holds_the_documents_tokens_in_order(record):
    for order in ORDERS:
        documents, _, tokens, _ = _packed(record, order)
        expected = torch.tensor([t for d in order for t in documents[d]["input_ids"]])
        if tokens.numel() < expected.numel() or not torch.equal(tokens[:expected.numel()], expected):
            s.violated(f"documents packed in the order {list(order)}: the row's tokens are {tokens.tolist()}, "
                       f"expected {expected.tolist()} then padding", order=list(order))
