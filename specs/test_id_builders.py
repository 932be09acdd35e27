"""The code that builds M-RoPE ids, judged on its own (``specs/claims.md``, IDS). A builder is
called as ``builder(input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask,
second_per_grid_ts) -> (ids (3, batch, seq), deltas (batch, 1))``; a vision tower's grid ids as
``grid(grid_thw) -> (patches, 2)``. With ``s`` a block's start and ``(i, j)`` a token's row and
column in its merged grid:

* IDS-1 (Qwen2-VL §2.1): text has ``t = h = w``, 0 at the row's start, one more than the text token before;
* IDS-2 (Qwen2-VL §2.1): a picture at ``t = s``, and in a picture or a video frame ``h = s + i``, ``w = s + j``;
* IDS-3 (Qwen2-VL §2.1): a block after another starts at the other's largest id on any axis + 1;
* IDS-4 (Qwen2.5-VL §2.1.3): a video's frame ``f`` has ``t = s + τ(f)``, ``τ(f) = f`` (frames) or
  ``⌊f · seconds per grid · tokens per second⌋`` (seconds); each frame at its own start (split);
* IDS-5: each row of a left-padded batch gets the ids and delta it gets alone (mlx-vlm #1095: a
  text row inherits another row's delta);
* IDS-6: text appended to a row later gets ``cache position + delta`` on every axis, the ids the
  longer row gives it (vLLM #10403, transformers #44873: a stale or wrong delta);
* IDS-7 (Qwen2-VL's vision tower): a ``t × h × w`` grid with merge ``m`` lists ``(row, col)`` in
  ``m × m`` blocks, row-major, every frame alike.

Ids are integers: every relation is exact, and the rows are fixed (no draws): each shape that
tells a defect apart is among them (a wide and a tall picture, a video longer in time than in
space, two pictures, seconds that step by more than one and by a fraction, two videos of other
seconds after a picture). Pictures and videos are framed by text, as processors frame them with
their vision-start and vision-end tokens.
"""

from __future__ import annotations

import pytest
import torch

from posenc.harness.references import position_ids as P
from specs import support as s

IMAGE_WIDE = P.Span(P.IMAGE, grid=(1, 4, 6))
IMAGE_TALL = P.Span(P.IMAGE, grid=(1, 6, 4))
IMAGE_SMALL = P.Span(P.IMAGE, grid=(1, 2, 2))
#: 4 frames of 2 × 2 tokens: longer in time than in space; 1.5 s a grid at 2 ids a second: τ = 0, 3, 6, 9.
VIDEO_LONG = P.Span(P.VIDEO, grid=(4, 4, 4), seconds_per_grid=1.5)
VIDEO_SHORT = P.Span(P.VIDEO, grid=(2, 6, 4), seconds_per_grid=0.5)
#: 0.75 s a grid at 2 ids a second: τ = 0, 1, 3, 4 (the floor of 1.5 and 4.5: rounding gives 2 and 5).
VIDEO_UNEVEN = P.Span(P.VIDEO, grid=(4, 2, 2), seconds_per_grid=0.75)

ROWS = {
    "text": [P.Span(P.TEXT, 5)],
    "picture": [P.Span(P.TEXT, 3), IMAGE_WIDE, P.Span(P.TEXT, 4)],
    "two pictures": [P.Span(P.TEXT, 1), IMAGE_TALL, P.Span(P.TEXT, 2), IMAGE_SMALL, P.Span(P.TEXT, 3)],
    "video": [P.Span(P.TEXT, 2), VIDEO_LONG, P.Span(P.TEXT, 3)],
    "short video": [P.Span(P.TEXT, 2), VIDEO_SHORT, P.Span(P.TEXT, 2)],
    "uneven video": [P.Span(P.TEXT, 1), VIDEO_UNEVEN, P.Span(P.TEXT, 1)],
    # a picture before two videos of their own seconds: each video's seconds are its own
    "picture and videos": [P.Span(P.TEXT, 1), IMAGE_SMALL, P.Span(P.TEXT, 1), VIDEO_SHORT, P.Span(P.TEXT, 1),
                           VIDEO_UNEVEN, P.Span(P.TEXT, 1)],
}
GRIDS = [(1, 4, 6), (2, 4, 4), (1, 2, 6)]


def _builds(record):
    return record.producer.protocol == "mrope_ids"


def _videos(record):
    return _builds(record) and record.producer.time is not None


def _rows(record) -> dict:
    return {name: spans for name, spans in ROWS.items()
            if record.producer.time is not None or all(sp.kind != P.VIDEO for sp in spans)}



def _call(builder, record, rows: list[list[P.Span]], what: str, pad_to=None):
    called = P.builder_inputs(rows, record.producer, pad_to=pad_to)
    ids, deltas = builder(**called)
    ids, deltas = torch.as_tensor(ids), torch.as_tensor(deltas).reshape(len(rows), -1)
    width = called["input_ids"].shape[1]
    if tuple(ids.shape) != (3, len(rows), width):
        s.violated(f"{what}: ids of shape {tuple(ids.shape)}, expected (3, {len(rows)}, {width})")
    return ids, deltas, called


def _row(builder, record, name: str):
    """``(ids (3, L), delta, tokens)`` of one unpadded row, and what each token is."""
    spans = ROWS[name]
    ids, deltas, _ = _call(builder, record, [spans], f"the row {name!r}")
    tokens = P.tokens_of(P.as_called(spans, record.producer.time == "split"), record.producer.merge)
    return ids[:, 0], int(deltas[0, 0]), tokens


def _blocks(tokens):
    """``[(block, kind, [token indices])]`` in row order."""
    out = []
    for k, token in enumerate(tokens):
        if not out or out[-1][0] != token.block:
            out.append((token.block, token.kind, []))
        out[-1][2].append(k)
    return out


def _start(ids, kind, at) -> int:
    """A block's start: its first text id, or a vision block's smallest row id."""
    return int(ids[0, at[0]]) if kind == P.TEXT else int(ids[1, at].min())


# ------------------------------------------------------------------ IDS-1 … IDS-4


@pytest.mark.claim("IDS-1", kinds=("producer",), requires=_builds)
def test_text_has_one_id_on_every_axis_counting_by_one(record):
    builder = s.build(record)
    for name in _rows(record):
        ids, _, tokens = _row(builder, record, name)
        for k, token in enumerate(tokens):
            if token.kind != P.TEXT:
                continue
            if len(set(ids[:, k].tolist())) != 1:
                s.violated(f"the row {name!r}: text token {k} has ids {ids[:, k].tolist()} (t, h, w), not one id "
                           "on every axis", row=name, token=k)
            if k == 0 and int(ids[0, k]) != 0:
                s.violated(f"the row {name!r} starts at id {int(ids[0, k])}, not 0", row=name)
            if k and tokens[k - 1].kind == P.TEXT and int(ids[0, k]) != int(ids[0, k - 1]) + 1:
                s.violated(f"the row {name!r}: text token {k} has id {int(ids[0, k])} after {int(ids[0, k - 1])}",
                           row=name, token=k)


@pytest.mark.claim("IDS-2", kinds=("producer",), requires=_builds)
def test_a_picture_sits_at_one_time_on_its_grids_rows_and_columns(record):
    builder = s.build(record)
    for name in _rows(record):
        ids, _, tokens = _row(builder, record, name)
        for block, kind, at in _blocks(tokens):
            if kind == P.TEXT:
                continue
            start = _start(ids, kind, at)
            for k in at:
                token = tokens[k]
                got = (int(ids[1, k]) - start, int(ids[2, k]) - start)
                if got != (token.row, token.col):
                    s.violated(f"the row {name!r}: the token at row {token.row}, column {token.col} of frame "
                               f"{token.frame} of block {block} has (h, w) − start = {got}, expected "
                               f"{(token.row, token.col)}",
                               row=name, block=block, expected=(token.row, token.col))
            if kind == P.IMAGE and set(ids[0, at].tolist()) != {start}:
                s.violated(f"the row {name!r}: the picture of block {block} has time ids {sorted(set(ids[0, at].tolist()))}"
                           f", not its start {start} alone", row=name, block=block)


@pytest.mark.claim("IDS-3", kinds=("producer",), requires=_builds)
def test_a_block_after_another_starts_at_its_largest_id_plus_one(record):
    builder = s.build(record)
    for name in _rows(record):
        ids, _, tokens = _row(builder, record, name)
        blocks = _blocks(tokens)
        for (_, before_kind, before), (block, kind, at) in zip(blocks, blocks[1:]):
            expected = int(ids[:, before].max()) + 1
            if _start(ids, kind, at) != expected:
                what = "text" if kind == P.TEXT else ("a picture" if kind == P.IMAGE else "a video")
                after = "text" if before_kind == P.TEXT else ("a picture" if before_kind == P.IMAGE else "a video")
                s.violated(f"the row {name!r}: {what} (block {block}) after {after} starts at "
                           f"{_start(ids, kind, at)}, not at the largest id before it + 1 = {expected}",
                           row=name, block=block, ids_before=sorted(set(ids[:, before].flatten().tolist()))[-3:])


@pytest.mark.claim("IDS-4", kinds=("producer",), requires=_videos)
def test_a_videos_time_ids_follow_its_declared_unit(record):
    builder, traits = s.build(record), record.producer
    for name, spans in _rows(record).items():
        ids, _, tokens = _row(builder, record, name)
        videos = iter(sp for sp in P.as_called(spans, traits.time == "split") if sp.kind == P.VIDEO)
        for block, kind, at in _blocks(tokens):
            if kind != P.VIDEO:
                continue
            video = next(videos)
            start = _start(ids, kind, at)
            steps = P.time_steps(video.grid[0], "seconds" if traits.time == "seconds" else "frames",
                                 video.seconds_per_grid, traits.tokens_per_second)
            got = [sorted(set(ids[0, [k for k in at if tokens[k].frame == f]].tolist())) for f in range(video.grid[0])]
            expected = [[start + step] for step in steps]
            if got != expected:
                unit = {"seconds": f"seconds: {video.seconds_per_grid} s a grid, {traits.tokens_per_second} ids a second",
                        "frames": "by frame index", "split": "each frame a block at its own start"}[traits.time]
                what = "a frame of a video" if traits.time == "split" else f"the video of block {block}"
                s.violated(f"the row {name!r}: {what} has time ids {got} by frame, expected {expected} ({unit})",
                           row=name, block=block)


# ------------------------------------------------------------------ IDS-5, IDS-6


@pytest.mark.claim("IDS-5", kinds=("producer",), requires=_builds)
def test_each_row_of_a_padded_batch_gets_its_ids_alone(record):
    builder = s.build(record)
    # two rows with videos of their own seconds: a video's seconds indexed within its row are caught
    names = [n for n in ("picture", "text", "video", "two pictures", "uneven video") if n in _rows(record)]
    alone = {n: _row(builder, record, n) for n in names}
    width = max(ids.shape[1] for ids, _, _ in alone.values()) + 2  # every row padded, the longest too
    ids, deltas, called = _call(builder, record, [ROWS[n] for n in names], "a left-padded batch", pad_to=width)
    for b, name in enumerate(names):
        row_ids, row_delta, _ = alone[name]
        kept = called["attention_mask"][b].bool()
        if not torch.equal(ids[:, b, kept], row_ids):
            k = int((ids[:, b, kept] != row_ids).any(0).nonzero()[0])
            s.violated(f"row {b} ({name!r}) of a left-padded batch of {names}: token {k} has ids "
                       f"{ids[:, b, kept][:, k].tolist()}, alone {row_ids[:, k].tolist()}", row=name, token=k)
        if int(deltas[b, 0]) != row_delta:
            s.violated(f"row {b} ({name!r}) of a left-padded batch of {names} has delta {int(deltas[b, 0])}, alone "
                       f"{row_delta}", row=name)


@pytest.mark.claim("IDS-6", kinds=("producer",), requires=_builds)
def test_the_delta_continues_the_row(record):
    builder, more = s.build(record), 3
    for name, spans in _rows(record).items():
        ids, delta, _ = _row(builder, record, name)
        length = ids.shape[1]
        longer, _, _ = _call(builder, record, [[*spans, P.Span(P.TEXT, more)]], f"the row {name!r} and {more} tokens")
        by_delta = torch.arange(length, length + more).expand(3, -1) + delta
        if not torch.equal(longer[:, 0, length:], by_delta):
            s.violated(f"the row {name!r} ({length} tokens, delta {delta}): text appended later would decode at "
                       f"{by_delta[0].tolist()} (cache position + delta); the longer row gives it "
                       f"{longer[:, 0, length:].tolist()}", row=name)


# ------------------------------------------------------------------ IDS-7


@pytest.mark.claim("IDS-7", kinds=("producer",), requires=lambda r: r.producer.protocol == "vision_grid")
def test_a_vision_towers_grid_ids_come_in_merge_blocks(record):
    grid = s.build(record)
    merge, start = record.producer.merge, 0
    got = torch.as_tensor(grid(torch.tensor(GRIDS)))
    expected = torch.cat([P.grid_ids(g, merge) for g in GRIDS])
    if tuple(got.shape) != tuple(expected.shape):
        s.violated(f"grids {GRIDS} (merge {merge}) give ids of shape {tuple(got.shape)}, expected "
                   f"{tuple(expected.shape)}: one (row, col) a patch")
    for g in GRIDS:
        n = g[0] * g[1] * g[2]
        wrong = (got[start:start + n] != expected[start:start + n]).any(-1).nonzero()
        if len(wrong):
            k = int(wrong[0])
            s.violated(f"the grid {g} (merge {merge}): patch {k} has (row, col) {got[start + k].tolist()}, expected "
                       f"{expected[start + k].tolist()} (merge-block order, every frame alike)", grid=g, patch=k)
        start += n
