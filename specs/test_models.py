"""The RoPE inside a whole model: relations of a causal LM's logits that need no knowledge of its
internals (the harness's own claims, ``specs/claims.md``, MODEL; each extends the documents' claim
it names). ``logits(ids, positions, mask)`` is one forward pass; ``decode`` continues a cache.

* MODEL-1 (from ROPE-4): ``logits(ids, p + c) = logits(ids, p)`` for c = 1, 1000 and past the
  configured maximum (relative-position models);
* MODEL-2 (from ROPE-9): a prefill, then one token per step with the model's own cache, gives the
  full pass's logits, across ``max_position_embeddings`` (and a scaled model's original length);
* MODEL-3 (from ROPE-9): a prefill in chunks gives the full pass's logits;
* MODEL-4 (from ROPE-4): rows left-padded by different counts, with their mask and the positions
  generation derives from it (``cumsum(mask) − 1``), give each unpadded row's logits, in one forward
  and while decoding;
* MODEL-5: a row's logits do not depend on the other rows of its batch;
* MODEL-6 (from ROPE-11): ``model.to(bfloat16)`` and bf16 autocast keep position information: a
  query at 3000 or 100000 after keys at 0 … 15 is as close to the fp32 model's logits as a query
  right after them (an angle error at long distances, θ rounded or positions formed in bf16,
  moves it by far more than bf16's rounding of each layer);
* MODEL-7 (from ROPE-9): past the maximum length, finite logits (relative positions extrapolate as
  the scaling type defines), or an error for a table (an absolute one, or GPT-J's fixed cos/sin
  table) that names the limit.

**Teeth.** Each relation first shows, on this model, that a position one off (the last token's
position moved by one) moves the logits by at least :data:`TEETH` tolerances; a model whose
logits barely depend on position leaves the cell ``undecided``, never ``holds``. Models without
position ids (ALiBi from the mask) show it by the order of their tokens instead.
Tolerances derive from the dtype: :data:`ULPS` roundings of the logits' scale.
"""

from __future__ import annotations


import pytest
import torch

from posenc.harness.claims import CONTRACT
from posenc.harness.models import NotInConvention
from specs import support as s

#: A forward pass of a few layers rounds in another order on each path: this many eps of the scale.
ULPS = 1024
#: A relation counts only where a position one off moves the logits this many tolerances.
TEETH = 10
SEQ = 16
SHIFTS = (1, 1000)
PADS = (0, 3, 5)
CHUNK = 6


def _model(record, device, dtype=torch.float32):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        subject = record.build(s.config(device=device, dtype=torch.float32))
    return subject.to(device=device, dtype=dtype) if dtype != torch.float32 else subject.to(device)


def _ids(batch, seq, record, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, record.model.vocab_size, (batch, seq), generator=g).to(device)


def _positions(batch, seq, start=0, device="cpu"):
    return torch.arange(start, start + seq, device=device).expand(batch, seq)


def _forward(model, ids, positions=None, mask=None, cache=None):
    mask = torch.ones(ids.shape[0], (0 if cache is None else _cached(cache)) + ids.shape[1], dtype=torch.long,
                      device=ids.device) if mask is None and model.traits.takes_attention_mask else mask
    positions = positions if model.traits.takes_position_ids else None
    with torch.no_grad():
        try:
            logits, cache = model(ids, position_ids=positions, attention_mask=mask, cache=cache)
        except NotInConvention as reason:
            pytest.skip(f"not in the model's call convention: {reason}")
    return logits.to(torch.float64), cache


def _cached(cache) -> int:
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return int(getattr(cache, "length", 0))


def _bound(reference: torch.Tensor, dtype=torch.float32) -> float:
    return ULPS * torch.finfo(dtype).eps * max(1.0, float(reference.abs().max()))


def _require_teeth(model, ids, positions, bound, what):
    """A position one off (the last token's) must move the last logits by ``TEETH`` tolerances."""
    logits, _ = _forward(model, ids, positions)
    if model.traits.takes_position_ids and positions is not None:
        moved = positions.clone()
        moved[:, -1] += 1
        off, _ = _forward(model, ids, moved)
        how = "the last token's position moved by one"
    else:  # positions from the mask alone: the first half of the tokens in reverse order
        half = ids.shape[1] // 2
        off, _ = _forward(model, torch.cat((ids[:, :half].flip(1), ids[:, half:]), dim=1))
        how = "the first half of the tokens reversed"
    change = float((off[:, -1] - logits[:, -1]).abs().max())
    if not change >= TEETH * bound:
        s.undecided(f"no teeth for {what}: {how} moves the last logits by {change:.2e}, under {TEETH} "
                    f"tolerances ({TEETH * bound:.2e}); the logits barely depend on position here")


@pytest.mark.claim(CONTRACT, kinds=("model",))
def test_a_model_answers_logits_of_its_shape_and_a_cache_that_continues(record, device):
    model = _model(record, device)
    ids = _ids(2, SEQ, record, device=device)
    logits, cache = _forward(model, ids, _positions(2, SEQ, device=device))
    if tuple(logits.shape) != (2, SEQ, record.model.vocab_size) or not bool(torch.isfinite(logits).all()):
        s.violated(f"logits of shape {tuple(logits.shape)} (finite: {bool(torch.isfinite(logits).all())}) for input "
                   f"ids (2, {SEQ}); expected finite (2, {SEQ}, {record.model.vocab_size})")
    step, _ = _forward(model, ids[:, :1], _positions(2, 1, SEQ, device), cache=cache)
    if tuple(step.shape) != (2, 1, record.model.vocab_size):
        s.violated(f"a step with the returned cache gives logits of shape {tuple(step.shape)}")


def _past_maximum(record) -> int:
    return (record.model.max_position or 0) + 37


@pytest.mark.claim("MODEL-1", kinds=("model",))
def test_shifting_every_position_leaves_the_logits(record, device):
    model = _model(record, device)
    ids = _ids(2, SEQ, record, device=device)
    base, _ = _forward(model, ids, _positions(2, SEQ, device=device))
    bound = _bound(base)
    shifts = SHIFTS if record.model.table_limited else (*SHIFTS, _past_maximum(record))
    for shift in shifts:
        shift = min(shift, record.model.max_position - SEQ) if record.model.table_limited else shift
        positions = _positions(2, SEQ, shift, device)
        _require_teeth(model, ids, positions, bound, f"a shift by {shift}")
        shifted, _ = _forward(model, ids, positions)
        s.require_within(error=float((shifted - base).abs().max()), bound=bound,
                         what=f"position ids shifted by {shift} change the logits", shift=shift)


def _decode_length(record) -> int:
    """Past the configured maximum (and so past a scaled model's original length), or 40; inside an
    absolute table."""
    if record.model.table_limited:
        return min(40, record.model.max_position)
    return max(40, (record.model.max_position or 0) + 8)


@pytest.mark.claim("MODEL-2", kinds=("model",))
def test_decoding_token_by_token_gives_the_full_logits(record, device):
    model = _model(record, device)
    length, prefill = _decode_length(record), 4
    ids = _ids(1, length, record, seed=1, device=device)
    full, _ = _forward(model, ids, _positions(1, length, device=device))
    bound = _bound(full)
    _require_teeth(model, ids, _positions(1, length, device=device), bound, "decoding")
    steps, cache = _forward(model, ids[:, :prefill], _positions(1, prefill, device=device))
    rows = [steps]
    for j in range(prefill, length):
        step, cache = _forward(model, ids[:, j : j + 1], _positions(1, 1, j, device), cache=cache)
        rows.append(step)
    decoded = torch.cat(rows, dim=1)
    error = (decoded - full).abs().amax(dim=(0, 2))
    worst = int(error.argmax())
    s.require_within(error=float(error.max()), bound=bound,
                     what=f"prefill of {prefill}, then decoding one token per step to {length} gives other logits "
                          f"than one full pass (worst at position {worst}; maximum {record.model.max_position})",
                     position=worst)


@pytest.mark.claim("MODEL-3", kinds=("model",))
def test_a_prefill_in_chunks_gives_the_full_logits(record, device):
    model = _model(record, device)
    length = _decode_length(record)
    ids = _ids(1, length, record, seed=2, device=device)
    full, _ = _forward(model, ids, _positions(1, length, device=device))
    bound = _bound(full)
    _require_teeth(model, ids, _positions(1, length, device=device), bound, "a chunked prefill")
    rows, cache = [], None
    for start in range(0, length, CHUNK):
        chunk = ids[:, start : start + CHUNK]
        logits, cache = _forward(model, chunk, _positions(1, chunk.shape[1], start, device), cache=cache)
        rows.append(logits)
    s.require_within(error=float((torch.cat(rows, dim=1) - full).abs().max()), bound=bound,
                     what=f"a prefill in chunks of {CHUNK} gives other logits than one full pass")


@pytest.mark.claim("MODEL-4", kinds=("model",))
def test_left_padding_with_its_mask_gives_the_unpadded_logits(record, device):
    model = _model(record, device)
    if not model.traits.takes_attention_mask:
        pytest.skip("the model takes no attention mask")
    steps = 3
    rows = [_ids(1, SEQ - pad + steps, record, seed=10 + pad, device=device) for pad in PADS]
    alone = [_forward(model, row, _positions(1, row.shape[1], device=device))[0] for row in rows]
    bound = _bound(torch.cat(alone, dim=1))
    _require_teeth(model, rows[0], _positions(1, rows[0].shape[1], device=device), bound, "left padding")
    ids = torch.stack([torch.cat((torch.zeros(pad, dtype=torch.long, device=device), row[0, : SEQ - pad]))
                       for pad, row in zip(PADS, rows, strict=True)])
    mask = torch.stack([torch.cat((torch.zeros(pad, dtype=torch.long), torch.ones(SEQ - pad, dtype=torch.long)))
                        for pad in PADS]).to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    padded, cache = _forward(model, ids, positions, mask)
    for r, pad in enumerate(PADS):
        s.require_within(error=float((padded[r, pad:] - alone[r][0, : SEQ - pad]).abs().max()), bound=bound,
                         what=f"a row left-padded by {pad} (batch pads {list(PADS)}) gives other logits than alone",
                         pad=pad)
    for step in range(steps):
        mask = torch.cat((mask, torch.ones(len(PADS), 1, dtype=torch.long, device=device)), dim=1)
        positions = positions[:, -1:] + 1
        token = torch.stack([row[0, SEQ - pad + step : SEQ - pad + step + 1]
                             for pad, row in zip(PADS, rows, strict=True)])
        logits, cache = _forward(model, token, positions, mask, cache)
        for r, pad in enumerate(PADS):
            s.require_within(error=float((logits[r, 0] - alone[r][0, SEQ - pad + step]).abs().max()), bound=bound,
                             what=f"decoding step {step + 1} of a row left-padded by {pad} (batch pads {list(PADS)}) "
                                  "gives other logits than the row alone", pad=pad, step=step + 1)


@pytest.mark.claim("MODEL-5", kinds=("model",))
def test_batch_rows_are_independent(record, device):
    model = _model(record, device)
    row = _ids(1, SEQ, record, seed=20, device=device)
    alone, _ = _forward(model, row, _positions(1, SEQ, device=device))
    bound = _bound(alone)
    changed, _ = _forward(model, torch.cat((row[:, :-1], (row[:, -1:] + 1) % record.model.vocab_size), dim=1),
                          _positions(1, SEQ, device=device))
    if not float((changed[:, -1] - alone[:, -1]).abs().max()) >= TEETH * bound:
        s.undecided("no teeth: the last token's logits barely depend on the last token")
    for companions in (_ids(2, SEQ, record, seed=21, device=device), _ids(3, SEQ, record, seed=22, device=device)):
        batch = torch.cat((companions[:1], row, companions[1:]))
        logits, _ = _forward(model, batch, _positions(batch.shape[0], SEQ, device=device))
        s.require_within(error=float((logits[1] - alone[0]).abs().max()), bound=bound,
                         what=f"a row's logits change with the other rows of its batch (batch of {batch.shape[0]})",
                         batch=batch.shape[0])


#: MODEL-6's query positions: right after its 16 keys, and far from them (past 2048).
NEAR, FAR = (SEQ, SEQ + 1, SEQ + 2), (3000, 100_000)
#: Far from its keys, a query may be this many times further from the fp32 model than near them.
DRIFT = 4


def _query_after_keys(model, ids, position):
    """The logits of one query at ``position`` after keys at 0 … SEQ − 1 (a prefill, then one step)."""
    _, cache = _forward(model, ids[:, :SEQ], _positions(1, SEQ, device=ids.device))
    logits, _ = _forward(model, ids[:, SEQ:], _positions(1, 1, position, ids.device), cache=cache)
    return logits


@pytest.mark.claim("MODEL-6", kinds=("model",), requires=lambda r: r.model.takes_position_ids)
def test_bf16_keeps_position_information_past_2048(record, device):
    """A query far from its keys turns by ``(m − n)·θ`` with ``m − n`` past 2048: there a θ rounded
    to bf16 or angles formed in bf16 move the logits by radians, where bf16's own rounding of each
    layer moves them as much as near the keys. (Shifting a whole window would not show it: a
    rounded θ keeps the window's relative geometry.)"""
    reference = _model(record, device)
    ids = _ids(1, SEQ + 1, record, seed=30, device=device)
    cap = record.model.max_position - 2 if record.model.table_limited else None  # p + 1 inside the table
    far = sorted({min(p, cap) if cap else p for p in FAR})
    exact = {p: _query_after_keys(reference, ids, p) for p in (*NEAR, *far)}
    cast = _model(record, device).to(torch.bfloat16)
    autocast_device = "cuda" if str(device).startswith("cuda") else "cpu"

    def autocast(p):
        with torch.autocast(autocast_device, dtype=torch.bfloat16):
            return _query_after_keys(reference, ids, p)

    ways = {"model.to(torch.bfloat16)": lambda p: _query_after_keys(cast, ids, p), "bf16 autocast": autocast}
    moved = max(float((_query_after_keys(reference, ids, p + 1) - exact[p]).abs().max()) for p in far)
    for how, run in ways.items():
        distance = {p: float((run(p) - exact[p]).abs().max()) for p in exact}
        noise = max(max(distance[p] for p in NEAR), torch.finfo(torch.bfloat16).eps * float(exact[NEAR[0]].abs().max()))
        if not moved >= 2 * DRIFT * noise:
            s.undecided(f"no teeth for {how}: a query one position further, far from its keys, moves the logits by "
                        f"{moved:.2e}, under {2 * DRIFT} times bf16's own distance ({noise:.2e})")
        worst = max(far, key=lambda p: distance[p])
        s.require_within(error=distance[worst], bound=DRIFT * noise,
                         what=f"under {how}, a query at position {worst}, far from its keys at 0…{SEQ - 1}, is "
                              f"{distance[worst]:.3g} from the fp32 model's logits, {distance[worst] / noise:.3g} times "
                              f"its distance near them: the rotation at long distances lost precision", way=how)


@pytest.mark.claim("MODEL-7", kinds=("model",), requires=lambda r: r.model.max_position is not None)
def test_past_the_maximum_length(record, device):
    model = _model(record, device)
    maximum = record.model.max_position
    by_ids = model.traits.takes_position_ids
    ids = _ids(1, SEQ if by_ids else maximum + 8, record, seed=40, device=device)
    positions = _positions(1, SEQ, maximum - SEQ // 2, device) if by_ids else None
    where = f"positions {maximum - SEQ // 2}…{maximum + SEQ // 2 - 1}" if by_ids else f"{maximum + 8} tokens"
    try:
        logits, _ = _forward(model, ids, positions)
    except Exception as error:  # noqa: BLE001 - an error is the documented behaviour of a table
        if any(w in str(error).lower() for w in s.LIMIT_WORDS):
            return  # a clear error: it names the limit
        s.violated(f"{where}, past the maximum {maximum}: {type(error).__name__} that names no limit: "
                   f"{str(error)[:120]}", max_position=maximum)
    if record.model.table_limited:
        s.violated(f"{where} cross the table of {maximum} rows and the model answers instead of raising: a "
                   "clamped or wrapped table", max_position=maximum)
    if not bool(torch.isfinite(logits).all()):
        s.violated(f"{where}, past the maximum {maximum}: the logits are not finite", max_position=maximum)
