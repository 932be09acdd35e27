"""Context-parallel shards of a sequence (the ``cp_shard`` protocol): contiguous, head-tail
(zigzag, Ring Attention's load balance) and round-robin layouts."""

from __future__ import annotations

import torch


class ContextParallelSharder:
    """A rank's share of a sequence (tokens and their global ids, on the sequence axis) under a
    ``layout``; :meth:`restore` puts the ranks' shards back in order."""

    def __init__(self, layout: str = "head_tail"):
        if layout not in ("contiguous", "head_tail", "round_robin"):
            raise ValueError(f"layout must be contiguous, head_tail or round_robin, got {layout!r}")
        self.layout = layout

    def order(self, length: int, world: int) -> torch.Tensor:
        """The token indices in rank order: rank r holds the r-th of ``world`` equal pieces."""
        if length % (2 * world if self.layout == "head_tail" else world):
            raise ValueError(f"a sequence of {length} tokens does not divide into {world} ranks' equal shards "
                             f"({self.layout})")
        if self.layout == "contiguous":
            return torch.arange(length)
        if self.layout == "round_robin":
            return torch.arange(length).reshape(-1, world).T.flatten()
        chunks = torch.arange(length).chunk(2 * world)
        return torch.cat([torch.cat([chunks[r], chunks[2 * world - 1 - r]]) for r in range(world)])

    def __call__(self, batch: dict, rank: int, world: int) -> dict:
        length = batch["input_ids"].shape[-1]
        mine = self.order(length, world).chunk(world)[rank]
        return {name: value[..., mine] for name, value in batch.items()}

    def restore(self, shards: list[torch.Tensor]) -> torch.Tensor:
        joined = torch.cat(shards, dim=-1)
        return joined[..., torch.argsort(self.order(joined.shape[-1], len(shards)))]
