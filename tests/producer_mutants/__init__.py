"""Mutant position producers: the project's own id builders, grid ids, packing collator and
context-parallel sharder, each with one defect of the bug reports planted, so that the IDS, PACK and
CP specs can show they catch it and blame the claim it breaks. A plug-in, loaded on request::

    pytest specs --plugin tests.producer_mutants --encoders 'mut_*'

The id builder here is written independently of the project's (one method a step), so that each
mutant overrides one step. Each ``@mutant`` names the claims it fails, with why where several fail.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import torch

import posenc
from posenc.encoders.producers import ContextParallelSharder, PackingCollator, vision_grid_ids
from posenc.harness.catalogue.declarations import producer_claims_for
from posenc.harness.catalogue.producer_records import producer_record
from posenc.harness.catalogue.records import ProducerTraits

TEXT, IMAGE, VIDEO = 0, 1, 2


@dataclass(frozen=True)
class Mutant:
    record: posenc.EncoderRecord
    fails: frozenset[str]
    why: str = ""
    undecided: frozenset[str] = frozenset()  # cells the defect leaves without a verdict (not a kill)


MUTANTS: list[Mutant] = []
CONTROLS = ("ctl_ids_seconds", "ctl_ids_frames", "ctl_grid", "ctl_pack_flat", "ctl_pack_mrope", "ctl_shard_head_tail",
            "ctl_shard_round_robin")


class Builder:
    """An M-RoPE id builder, one method a step (Qwen2-VL §2.1, Qwen2.5-VL §2.1.3)."""

    def __init__(self, merge=2, time="seconds", tokens_per_second=2.0):
        self.merge, self.time, self.tokens_per_second = merge, time, tokens_per_second

    def text(self, current, n):
        return torch.arange(current, current + n).expand(3, -1)

    def time_ids(self, frames, seconds):
        k = torch.arange(frames, dtype=torch.float64)
        return (k * seconds * self.tokens_per_second).long() if self.time == "seconds" else k.long()

    def vision(self, current, grid, seconds, kind):
        t, h, w = grid[0], grid[1] // self.merge, grid[2] // self.merge
        times = self.time_ids(t, seconds) if kind == VIDEO else torch.zeros(t, dtype=torch.long)
        tt, hh, ww = torch.meshgrid(times, torch.arange(h), torch.arange(w), indexing="ij")
        return torch.stack([tt, hh, ww]).reshape(3, -1) + current

    def after(self, block, grid):
        return int(block.max()) + 1

    def delta(self, ids, length, b, deltas):
        return int(ids.max()) + 1 - length

    def __call__(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None,
                 second_per_grid_ts=None):
        batch, seq = input_ids.shape
        out = torch.zeros(3, batch, seq, dtype=torch.long)
        deltas = []
        images = iter([] if image_grid_thw is None else image_grid_thw.tolist())
        videos = iter([] if video_grid_thw is None else video_grid_thw.tolist())
        seconds = iter([] if second_per_grid_ts is None else second_per_grid_ts.tolist())
        for b in range(batch):
            kept = torch.ones(seq, dtype=torch.bool) if attention_mask is None else attention_mask[b].bool()
            pieces, current = [], 0
            for kind, run in itertools.groupby(mm_token_type_ids[b][kept].tolist()):
                n = len(list(run))
                while n > 0:
                    if kind == TEXT:
                        block, n = self.text(current, n), 0
                        current = int(block.max()) + 1
                    else:
                        grid = next(images) if kind == IMAGE else next(videos)
                        block = self.vision(current, grid, next(seconds) if kind == VIDEO else 1.0, kind)
                        n -= block.shape[1]
                        current = self.after(block, grid)
                    pieces.append(block)
            row = torch.cat(pieces, dim=1)
            out[:, b, kept] = row
            deltas.append(self.delta(row, row.shape[1], b, deltas))
        return out, torch.tensor(deltas).unsqueeze(1)


def mutant(imitates: str, *, fails=frozenset(), why="", undecided=frozenset(), **traits):
    """Declare ``build`` a mutant named after the function, with the record of control ``imitates``."""

    def decorate(build):
        control = CONTROL_RECORDS[imitates]
        changed = dataclasses.replace(control.producer, **traits)
        record = dataclasses.replace(control, name=build.__name__, build=build,
                                     description=(build.__doc__ or "").strip(), producer=changed,
                                     claims=producer_claims_for(changed))
        MUTANTS.append(Mutant(record, frozenset(fails), why, frozenset(undecided)))
        return build

    return decorate


SOURCE = "tests/producer_mutants"
CONTROL_RECORDS = {r.name: r for r in (
    producer_record("ctl_ids_seconds", ProducerTraits("mrope_ids", time="seconds"), lambda c: Builder(time="seconds"),
                    source=SOURCE, description="the control: ids by the papers' rule, time in seconds"),
    producer_record("ctl_ids_frames", ProducerTraits("mrope_ids", time="frames"), lambda c: Builder(time="frames"),
                    source=SOURCE, description="the control: ids by the papers' rule, time by frame"),
    producer_record("ctl_grid", ProducerTraits("vision_grid"), lambda c: lambda g: vision_grid_ids(g, 2),
                    source=SOURCE, description="the control: merge-block grid ids"),
    producer_record("ctl_pack_flat", ProducerTraits("packing", boundaries=("cu_seq_lens", "seq_idx")),
                    lambda c: PackingCollator(1, 8), source=SOURCE, description="the control: a packing collator"),
    producer_record("ctl_pack_mrope", ProducerTraits("packing", axes=3, boundaries=("cu_seq_lens", "seq_idx")),
                    lambda c: PackingCollator(3, 8), source=SOURCE, description="the control: M-RoPE ids packed"),
    producer_record("ctl_shard_head_tail", ProducerTraits("cp_shard", axes=3, restores=True),
                    lambda c: ContextParallelSharder("head_tail"), source=SOURCE, description="the control: zigzag"),
    producer_record("ctl_shard_round_robin", ProducerTraits("cp_shard", axes=3, restores=True),
                    lambda c: ContextParallelSharder("round_robin"), source=SOURCE,
                    description="the control: round-robin"),
)}


# ---------------------------------------------------------------- id builders

class _FromOne(Builder):
    def text(self, current, n):
        return torch.arange(current, current + n).expand(3, -1) + (1 if current == 0 else 0)


@mutant("ctl_ids_seconds", fails={"IDS-1"})
def mut_ids_text_from_one(c):
    """a row's ids start at 1 (a padding offset carried over from a learned table)"""
    return _FromOne()


class _Transposed(Builder):
    def vision(self, current, grid, seconds, kind):
        t, h, w = grid
        return super().vision(current, (t, w, h), seconds, kind)[[0, 2, 1]]


@mutant("ctl_ids_seconds", fails={"IDS-2"})
def mut_ids_grid_transposed(c):
    """a picture's rows and columns swapped (the grid read as width × height)"""
    return _Transposed()


class _ResumeAtMaxHW(Builder):
    def after(self, block, grid):
        return int(block[1].min()) + max(grid[1], grid[2]) // self.merge


@mutant("ctl_ids_seconds", fails={"IDS-3", "IDS-6"},
        why="text after a video long in time resumes below the video's time ids (IDS-3); the delta is still "
            "read from the row's largest id, so text appended later jumps past where the row continues (IDS-6)")
def mut_ids_resume_at_max_hw(c):
    """text after a picture or video resumes at start + max(h, w) (transformers 5.24's regression)"""
    return _ResumeAtMaxHW()


class _FrameIndexTime(Builder):
    def time_ids(self, frames, seconds):
        return torch.arange(frames)


@mutant("ctl_ids_seconds", fails={"IDS-4"})
def mut_ids_frame_index_time(c):
    """video time ids by frame index where seconds are declared"""
    return _FrameIndexTime()


class _RowZeroDelta(Builder):
    def delta(self, ids, length, b, deltas):
        own = super().delta(ids, length, b, deltas)
        return deltas[0] if deltas else own


@mutant("ctl_ids_seconds", fails={"IDS-5"})
def mut_ids_row_zero_delta(c):
    """every row of a batch takes row 0's delta (mlx-vlm #1095)"""
    return _RowZeroDelta()


class _NoDelta(Builder):
    def delta(self, ids, length, b, deltas):
        return 0


@mutant("ctl_ids_frames", fails={"IDS-6"})
def mut_ids_no_delta(c):
    """a delta of 0 (decoding continues at the cache length, as for text)"""
    return _NoDelta(time="frames")


# ---------------------------------------------------------------- vision grid


@mutant("ctl_grid", fails={"IDS-7"})
def mut_grid_transposed(c):
    """(col, row) for (row, col)"""
    return lambda g: vision_grid_ids(g, 2)[:, [1, 0]]


@mutant("ctl_grid", fails={"IDS-7"})
def mut_grid_merged_twice(c):
    """the spatial merge applied twice: a grid of h/m × w/m patches listed"""
    return lambda g: vision_grid_ids(torch.as_tensor(g) // torch.tensor([1, 2, 2]) * torch.tensor([1, 1, 1]), 1)


# ---------------------------------------------------------------- packing


class _Global(PackingCollator):
    def __call__(self, examples):
        batch = super().__call__(examples)
        batch["position_ids"] = torch.arange(batch["input_ids"].shape[-1]).unsqueeze(0)
        return batch


@mutant("ctl_pack_flat", fails={"PACK-1"})
def mut_pack_not_restarted(c):
    """positions run on across documents (OLMo-core #591, torchtitan #2559)"""
    return _Global(1, 8)


class _OffByOne(PackingCollator):
    def __call__(self, examples):
        batch = super().__call__(examples)
        cu = batch["cu_seq_lens"].clone()
        cu[1:-1] += 1
        batch["cu_seq_lens"] = cu
        return batch


@mutant("ctl_pack_flat", fails={"PACK-2"})
def mut_pack_boundaries_off_by_one(c):
    """cu_seq_lens one past each document's end"""
    return _OffByOne(1, 8)


class _Unpadded(PackingCollator):
    def __call__(self, examples):
        batch = super().__call__(examples)
        n = sum(len(e["input_ids"]) for e in examples)
        batch["position_ids"] = batch["position_ids"][..., :n]
        return batch


@mutant("ctl_pack_mrope", fails={"PACK-3"})
def mut_pack_3d_ids_unpadded(c):
    """the tokens padded to a multiple of 8, the M-RoPE ids not (LLaMA-Factory #10783)"""
    return _Unpadded(3, 8)


class _SeparatorFirst(PackingCollator):
    def __call__(self, examples):
        return super().__call__([{**e, "input_ids": [2, *e["input_ids"][1:]]} for e in examples])


@mutant("ctl_pack_flat", fails={"PACK-4"}, undecided={"PACK-1", "PACK-2"})
def mut_pack_separator_over_first_token(c):
    """each document's first token overwritten by a separator"""
    # a document of one token is then nowhere in the row: its ids and boundaries cannot be judged (undecided)
    return _SeparatorFirst(1, 8)


# ---------------------------------------------------------------- context-parallel shards


class _NotInverse(ContextParallelSharder):
    def restore(self, shards):
        return torch.cat(shards, dim=-1)  # the ranks' pieces joined, the layout's order never undone


@mutant("ctl_shard_head_tail", fails={"CP-4"})
def mut_shard_restore_not_inverse(c):
    """restore joins the ranks' shards without undoing the zigzag"""
    return _NotInverse("head_tail")



class _Local(ContextParallelSharder):
    def __call__(self, batch, rank, world):
        out = super().__call__(batch, rank, world)
        ids = out["position_ids"]
        out["position_ids"] = torch.arange(ids.shape[-1]).expand(ids.shape).clone()
        return out


@mutant("ctl_shard_round_robin", fails={"CP-1"})
def mut_shard_local_ids(c):
    """a round-robin shard fed local positions 0 … n/W − 1 (sglang #28463)"""
    return _Local("round_robin")


class _AxisCut(ContextParallelSharder):
    def __call__(self, batch, rank, world):
        out = super().__call__(batch, rank, world)
        ids = batch["position_ids"]
        out["position_ids"] = ids.tensor_split(world, dim=0)[rank] if ids.dim() == 3 else out["position_ids"]
        return out


@mutant("ctl_shard_head_tail", fails={"CP-3"}, undecided={"CP-1"}, restores=False)
def mut_shard_3d_on_the_axis(c):
    """3D ids cut on the axis dimension instead of the sequence (NVIDIA-NeMo Automodel #1482)"""
    return _AxisCut("head_tail")


class _WrongSecondHalf(ContextParallelSharder):
    def __call__(self, batch, rank, world):
        out = super().__call__(batch, rank, world)
        chunks = torch.arange(batch["input_ids"].shape[-1]).chunk(2 * world)
        wrong = torch.cat([chunks[rank], chunks[world + rank]])
        out["position_ids"] = batch["position_ids"][..., wrong]
        return out


@mutant("ctl_shard_head_tail", fails={"CP-1"})
def mut_shard_zigzag_wrong_second_half(c):
    """a zigzag whose ids take the wrong second half"""
    return _WrongSecondHalf("head_tail")


class _Duplicate(ContextParallelSharder):
    def __call__(self, batch, rank, world):
        out = super().__call__(batch, rank, world)
        if rank == world - 1:
            out = {k: torch.cat([v[..., :1], out[k]], dim=-1) for k, v in batch.items()}
        return out


@mutant("ctl_shard_round_robin", fails={"CP-2"}, restores=False)
def mut_shard_first_token_twice(c):
    """the last rank also holds the sequence's first token"""
    return _Duplicate("round_robin")


for _record in CONTROL_RECORDS.values():
    posenc.register(_record)
for _mutant in MUTANTS:
    posenc.register(_mutant.record)
