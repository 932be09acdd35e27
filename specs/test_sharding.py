"""Code that cuts a sequence across context-parallel ranks, judged on its own (``specs/claims.md``,
CP). A sharder is called as ``shard({'input_ids': (1, n), 'position_ids': (1, n) or (3, 1, n)},
rank, world)`` and returns that rank's ``input_ids`` and ``position_ids``; ``restore(shards)``,
where declared, puts the ranks' ids back in order. Every token is told apart by its id, so:

* CP-1: a token on rank r has the position id it has in the whole sequence (sglang #28463: a
  round-robin shard fed local positions);
* CP-2: the ranks' shards hold every token exactly once;
* CP-3: 3D ids keep their three axes and are cut where the tokens are (NVIDIA-NeMo Automodel
  #1482: M-RoPE ids sharded on the axis dimension);
* CP-4: ``restore`` of the ranks' ids gives the sequence's ids in order.

The ids are a continuation (positions 100 … 123) in 1D and a row with a picture in 3D, so that
local ids ``0 … n/W − 1`` are never the global ones. World sizes 2 and 4.
"""

from __future__ import annotations

import pytest
import torch

from posenc.harness.references import position_ids as P
from specs import support as s

LENGTH = 24
WORLDS = (2, 4)
#: A length no 2 × world divides (26 over 4 ranks): shards that drop the remainder are caught.
UNEVEN = 26
START = 100


def _shards(record):
    return record.producer.protocol == "cp_shard"


def _sequences(record) -> dict[str, dict]:
    tokens = (1000 + torch.arange(LENGTH)).unsqueeze(0)
    out = {"1D": {"input_ids": tokens, "position_ids": (START + torch.arange(LENGTH)).unsqueeze(0)}}
    # a sharder may refuse this length with an error (it asks for padding); it may not drop tokens
    uneven = (1000 + torch.arange(UNEVEN)).unsqueeze(0)
    out[f"1D of {UNEVEN}"] = {"input_ids": uneven, "position_ids": (START + torch.arange(UNEVEN)).unsqueeze(0)}
    if record.producer.axes == 3:
        spans = [P.Span(P.TEXT, 4), P.Span(P.IMAGE, grid=(1, 4, 6)), P.Span(P.TEXT, 14)]
        out["3D"] = {"input_ids": tokens, "position_ids": P.row_ids(spans, merge=2)[0].unsqueeze(1)}
    return out


def _each_rank(record):
    """``(name, sequence, world, [each rank's answer])`` for every sequence and world size."""
    shard = s.build(record)
    for name, sequence in _sequences(record).items():
        for world in WORLDS:
            try:
                answers = [shard({k: v.clone() for k, v in sequence.items()}, rank, world) for rank in range(world)]
            except Exception:  # noqa: BLE001 - a length it does not shard, refused: no shards to judge
                if name.startswith("1D of "):
                    continue
                raise
            yield shard, name, sequence, world, answers


def _as_columns(ids: torch.Tensor) -> torch.Tensor:
    """Ids as ``(axes, tokens)``."""
    ids = torch.as_tensor(ids)
    return ids.reshape(ids.shape[0], -1) if ids.dim() == 3 else ids.reshape(1, -1)


@pytest.mark.claim("CP-1", kinds=("producer",), requires=_shards)
def test_every_token_keeps_its_global_position_id(record):
    for _, name, sequence, world, answers in _each_rank(record):
        where = {int(t): k for k, t in enumerate(sequence["input_ids"][0])}
        full = _as_columns(sequence["position_ids"])
        for rank, answer in enumerate(answers):
            tokens = torch.as_tensor(answer["input_ids"]).reshape(-1)
            ids = _as_columns(answer["position_ids"])
            if ids.shape != (full.shape[0], tokens.numel()):
                s.undecided(f"{name} ids of shape {tuple(torch.as_tensor(answer['position_ids']).shape)} for "
                            f"{tokens.numel()} tokens on rank {rank}: CP-3 judges that")
            for j, token in enumerate(tokens.tolist()):
                k = where.get(token)
                if k is not None and not torch.equal(ids[:, j], full[:, k]):
                    s.violated(f"{name} ids over {world} ranks: rank {rank}'s token {j} (token {k} of the sequence) "
                               f"has position id {ids[:, j].tolist()}, its global id is {full[:, k].tolist()}",
                               world=world, rank=rank, ids=name)


@pytest.mark.claim("CP-2", kinds=("producer",), requires=_shards)
def test_the_shards_hold_every_token_exactly_once(record):
    for _, name, sequence, world, answers in _each_rank(record):
        held = torch.cat([torch.as_tensor(a["input_ids"]).reshape(-1) for a in answers])
        expected = sequence["input_ids"].reshape(-1)
        if not torch.equal(held.sort().values, expected.sort().values):
            known = bool(held.numel()) and int(held.min()) >= 1000 and int(held.max()) < 1000 + expected.numel()
            said = (f"count of each token {torch.bincount(held - 1000, minlength=expected.numel()).tolist()}" if known
                    else f"the tokens held {held.tolist()} (the sequence's are {int(expected.min())}…"
                         f"{int(expected.max())})")
            s.violated(f"{name} ids over {world} ranks: the shards hold {held.numel()} tokens for {expected.numel()}; "
                       f"{said}", world=world, ids=name)


@pytest.mark.claim("CP-3", kinds=("producer",), requires=lambda r: _shards(r) and r.producer.axes == 3)
def test_3d_ids_are_cut_on_the_sequence_axis(record):
    for _, name, sequence, world, answers in _each_rank(record):
        if name != "3D":
            continue
        for rank, answer in enumerate(answers):
            n = torch.as_tensor(answer["input_ids"]).numel()
            shape = tuple(torch.as_tensor(answer["position_ids"]).shape)
            if shape != (3, 1, n):
                s.violated(f"3D ids (3, 1, {LENGTH}) over {world} ranks: rank {rank} holds {n} tokens and ids of "
                           f"shape {shape}, expected (3, 1, {n})", world=world, rank=rank)


@pytest.mark.claim("CP-4", kinds=("producer",), requires=lambda r: _shards(r) and r.producer.restores)
def test_restoring_the_shards_gives_the_sequence_in_order(record):
    for shard, name, sequence, world, answers in _each_rank(record):
        # each rank's true ids for the tokens it holds: restore is judged on its own, not on CP-1's ids
        held = [torch.as_tensor(a["input_ids"]).reshape(-1) - 1000 for a in answers]
        if any(h.min() < 0 or h.max() >= sequence["input_ids"].numel() for h in held if h.numel()):
            s.undecided("a rank holds tokens that are not the sequence's: CP-2 judges that")
        if sum(h.numel() for h in held) != sequence["input_ids"].numel():
            s.undecided(f"{name} ids over {world} ranks: the shards hold {sum(h.numel() for h in held)} tokens of "
                        f"{sequence['input_ids'].numel()}, nothing a restore could order: CP-2 judges that")
        truth = [sequence["position_ids"][..., h] for h in held]
        restored = torch.as_tensor(shard.restore(truth))
        if restored.shape != sequence["position_ids"].shape:
            s.violated(f"{name} ids over {world} ranks: restore(shards) gives shape {tuple(restored.shape)}, the "
                       f"sequence's is {tuple(sequence['position_ids'].shape)}", world=world, ids=name)
        if not torch.equal(restored, sequence["position_ids"]):
            s.violated(f"{name} ids over {world} ranks: restore(shards) gives {_as_columns(restored)[0].tolist()}, "
                       f"the sequence's are {_as_columns(sequence['position_ids'])[0].tolist()}", world=world, ids=name)
