"""The calling contract of a position producer: it answers its protocol
(``posenc.harness.catalogue.records.PRODUCER_PROTOCOLS``) with integer ids of the protocol's rank,
so that every IDS, PACK and CP relation reads what it expects; an answer of another kind is the
contract's failure, not a claim's. How many ids, and which, the claims judge.
"""

from __future__ import annotations

import pytest
import torch

from posenc.harness.catalogue.claims import CONTRACT
from posenc.harness.references import position_ids as P
from specs import support as s

ROW = [P.Span(P.TEXT, 3), P.Span(P.IMAGE, grid=(1, 4, 4)), P.Span(P.TEXT, 2)]


def _integer(what: str, value, shape: tuple) -> None:
    """An integer tensor of ``len(shape)`` dimensions; ``shape``'s leading sizes, all but the last."""
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype == torch.bool:
        s.violated(f"{what}: {type(value).__name__} {getattr(value, 'dtype', '')}, expected an integer tensor")
    if value.dim() != len(shape) or tuple(value.shape[:-1]) != tuple(shape[:-1]):
        expected = ", ".join([*map(str, shape[:-1]), "n"])
        s.violated(f"{what}: shape {tuple(value.shape)}, expected ({expected})")


def _answers(record):
    producer, traits = s.build(record), record.producer
    if traits.protocol == "mrope_ids":
        called = P.builder_inputs([ROW, ROW], traits)
        answer = producer(**called)
        if not isinstance(answer, tuple) or len(answer) != 2:
            s.violated(f"an id builder returns {type(answer).__name__}, expected (position_ids, deltas)")
        _integer("position_ids", answer[0], (3, 2, called["input_ids"].shape[1]))
        _integer("deltas", torch.as_tensor(answer[1]).reshape(2, -1)[:, :1].contiguous(), (2, 1))
    elif traits.protocol == "vision_grid":
        ids = producer(torch.tensor([[1, 4, 4]]))
        _integer("grid ids", ids, (ids.shape[0] if isinstance(ids, torch.Tensor) and ids.dim() else 0, 2))
    elif traits.protocol == "packing":
        example = {"input_ids": [5, 6, 7]}
        if traits.axes == 3:
            example["position_ids"] = torch.arange(3).expand(3, -1)
        batch = producer([example, dict(example)])
        tokens = torch.as_tensor(batch["input_ids"])
        _integer("input_ids", tokens, (1, tokens.shape[-1]))
        _integer("position_ids", batch["position_ids"],
                 (3, 1, tokens.shape[-1]) if traits.axes == 3 else (1, tokens.shape[-1]))
        for name in traits.boundaries:
            if name not in batch:
                s.violated(f"the collator declares {name} and returns {sorted(batch)}")
    else:
        batch = {"input_ids": torch.arange(8).unsqueeze(0), "position_ids": torch.arange(8).unsqueeze(0)}
        answer = producer(batch, 0, 2)
        _integer("a rank's input_ids", torch.as_tensor(answer["input_ids"]), (1, 4))
        _integer("a rank's position_ids", torch.as_tensor(answer["position_ids"]), (1, 4))


@pytest.mark.claim(CONTRACT, kinds=("producer",))
def test_a_producer_answers_its_protocol_with_integer_ids(record):
    _answers(record)
