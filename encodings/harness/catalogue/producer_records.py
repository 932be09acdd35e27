"""The built-in position producers (``kind="producer"``): the project's own M-RoPE id builders,
vision-tower grid ids, packing collators and context-parallel sharders
(:mod:`posenc.encoders.producers`), each judged on its family's claims (IDS-*, PACK-*,
CP-*) against the exact references of :mod:`..references.position_ids`. Plug-ins register their
own with :func:`producer_record`.
"""

from __future__ import annotations

import functools

from ...encoders.producers import ContextParallelSharder, MRopeIdBuilder, PackingCollator, vision_grid_ids
from .declarations import producer_claims_for
from .records import Declared, EncoderRecord, ProducerTraits


def producer_record(name: str, traits: ProducerTraits, build, *, source: str, description: str,
                    claims: dict[str, Declared] | None = None, **fields) -> EncoderRecord:
    """A producer record: ``build(config)`` returns the producer; ``claims`` are the overrides of a
    correct producer's of its protocol (:func:`~.declarations.producer_claims_for`)."""
    return EncoderRecord(name=name, build=build, kind="producer", source=source, description=description,
                         producer=traits, claims=producer_claims_for(traits, claims), **fields)


def _builder(time: str, tokens_per_second: float = 2.0):
    return lambda config: MRopeIdBuilder(merge=2, time=time, tokens_per_second=tokens_per_second)


PRODUCER_RECORDS = [
    producer_record("ids_mrope_frames", ProducerTraits("mrope_ids", time="frames"), _builder("frames"),
                    source="posenc.encoders.producers.MRopeIdBuilder (Qwen2-VL §2.1)",
                    description="M-RoPE ids, video time by frame index"),
    producer_record("ids_mrope_seconds", ProducerTraits("mrope_ids", time="seconds", tokens_per_second=2.0),
                    _builder("seconds"), source="posenc.encoders.producers.MRopeIdBuilder (Qwen2.5-VL §2.1.3)",
                    description="M-RoPE ids, video time in seconds × tokens per second"),
    producer_record("ids_mrope_split", ProducerTraits("mrope_ids", time="split"), _builder("split"),
                    source="posenc.encoders.producers.MRopeIdBuilder (Qwen3-VL's frames framed by text)",
                    description="M-RoPE ids, each video frame a block of its own"),
    producer_record("ids_vision_grid", ProducerTraits("vision_grid", merge=2),
                    lambda config: functools.partial(vision_grid_ids, merge=2),
                    source="posenc.encoders.producers.vision_grid_ids",
                    description="a vision tower's (row, col) patch ids in 2 × 2 merge blocks"),
    producer_record("pack_flat", ProducerTraits("packing", boundaries=("cu_seq_lens", "seq_idx")),
                    lambda config: PackingCollator(axes=1, pad_to_multiple_of=8),
                    source="posenc.encoders.producers.PackingCollator",
                    description="documents in one row, positions restarting, padded to a multiple of 8"),
    producer_record("pack_mrope", ProducerTraits("packing", axes=3, boundaries=("cu_seq_lens", "seq_idx")),
                    lambda config: PackingCollator(axes=3, pad_to_multiple_of=8),
                    source="posenc.encoders.producers.PackingCollator",
                    description="documents with M-RoPE ids in one row, padded on every axis"),
    *(producer_record(f"shard_{layout}", ProducerTraits("cp_shard", axes=3, restores=True),
                      (lambda layout: lambda config: ContextParallelSharder(layout))(layout),
                      source="posenc.encoders.producers.ContextParallelSharder",
                      description=f"context-parallel shards, {layout.replace('_', '-')} layout")
      for layout in ("contiguous", "head_tail", "round_robin")),
]
