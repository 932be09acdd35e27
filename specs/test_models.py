"""The RoPE inside a whole model: relations of a causal LM's logits that need no knowledge of its
internals (the harness's own claims, ``specs/claims.md``, MODEL; each extends the documents' claim
it names). ``logits(ids, positions, mask)`` is one forward pass; a cache continues a sequence.

* MODEL-1 (from ROPE-4): ``logits(ids, p + c) = logits(ids, p)`` for c = 1, 1000, a window across
  the configured maximum and one past it (relative-position models);
* MODEL-2 (from ROPE-9): a prefill, then one token per step with the model's own cache, gives the
  full pass's logits, across ``max_position_embeddings`` (and a scaled model's original length)
  where that is at most :data:`DECODE_CROSSES`;
* MODEL-3 (from ROPE-9): a prefill in chunks gives the full pass's logits;
* MODEL-4 (from ROPE-4): rows left-padded by different counts, with their mask and the positions
  generation derives from it (``cumsum(mask) − 1``), give each row's logits computed alone the
  same way, in one forward and then decoding with the cache;
* MODEL-5: a row's logits do not depend on the other rows of its batch;
* MODEL-6 (from ROPE-11): ``model.to(bfloat16)`` and bf16 autocast keep position information: a
  query at 3000 or 100000 after keys at 0 … 15 (in one pass at positions ``[0 … 15, p]``, and
  decoded with the cache) is as close to the fp32 model's logits on the same path as a query
  right after them (an angle error at long distances, θ rounded or angles formed in bf16, moves
  it by far more than bf16's rounding of each layer); every way is judged, and named;
* MODEL-7 (from ROPE-9): past the maximum length, finite logits (relative positions extrapolate as
  the scaling type defines), or an error that names the limit for a table (an absolute one,
  GPT-J's fixed sin/cos table).

Where a relation says the model answers, an error is a violation of it.

**Teeth.** A relation that holds counts only where it could have failed on this model: a
position one off (the last token's) must move the logits by :data:`TEETH` tolerances, else the
cell is ``undecided``, never ``holds``. Models without position ids (ALiBi from the mask) show it
by the order of their tokens. A violation is reported whatever the teeth. Tolerances derive from
the dtype: :data:`ULPS` roundings of the logits' largest magnitude.
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
PADS = (0, 3, 5)
STEPS = 3  # MODEL-4's decode steps
CHUNK = 6
#: MODEL-6's query positions: right after its SEQ keys, and far from them (past 2048).
NEAR, FAR = (SEQ, SEQ + 1, SEQ + 2), (3000, 100_000)
#: Far from its keys, a query may be this many times further from the fp32 model than near them.
DRIFT = 4


def _model(record, device):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return record.build(s.config(device=device, dtype=torch.float32)).to(device)


def _ids(batch, seq, record, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, record.model.vocab_size, (batch, seq), generator=g).to(device)


def _positions(batch, seq, start=0, device="cpu"):
    return torch.arange(start, start + seq, device=device).expand(batch, seq)


class _Sequence:
    """The model's own cache, and how many tokens it holds (counted here: a cache need not say)."""

    def __init__(self, cache, length: int):
        self.cache, self.length = cache, length


def _call(model, ids, positions=None, mask=None, cache=None):
    """The model's ``(logits in float64, sequence)``; a mask of ones unless given. The logits' own
    dtype is kept on the model for the tolerance (:func:`_bound`)."""
    held = 0 if cache is None else cache.length
    if mask is None and model.traits.takes_attention_mask:
        mask = torch.ones(ids.shape[0], held + ids.shape[1], dtype=torch.long, device=ids.device)
    positions = positions if model.traits.takes_position_ids else None
    with torch.no_grad():
        try:
            logits, returned = model(ids, position_ids=positions, attention_mask=mask,
                                     cache=None if cache is None else cache.cache)
        except NotInConvention as reason:
            pytest.skip(f"not in the model's call convention: {reason}")
    model.logits_dtype = logits.dtype
    return logits.to(torch.float64), _Sequence(returned, held + ids.shape[1])


def _forward(model, ids, positions=None, mask=None, cache=None, what="the call"):
    """:func:`_call` where the relation says the model answers: an error violates it."""
    return s.answered(what, lambda: _call(model, ids, positions, mask, cache))


def _bound(reference: torch.Tensor, model=None, dtype=torch.float32) -> float:
    """ULPS roundings of the logits' scale in ``dtype``, or in the model's logits dtype where coarser."""
    returned = getattr(model, "logits_dtype", dtype)
    eps = max(torch.finfo(dtype).eps, torch.finfo(returned).eps if returned.is_floating_point else 0.0)
    return ULPS * eps * max(1.0, float(reference.abs().max()))


def _error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())  # NaN compares false with every bound: a violation


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
    change = _error(off[:, -1], logits[:, -1])
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


def _shifts(record) -> list[int]:
    """1, 1000, a window across the maximum and one past it; inside a table, only what fits."""
    maximum = record.model.max_position
    if record.model.table_limited:
        return sorted({min(c, maximum - SEQ - 1) for c in (1, 1000)})  # the teeth move the last one on
    return [1, 1000] + ([maximum - SEQ // 2, maximum + 37] if maximum else [])


@pytest.mark.claim("MODEL-1", kinds=("model",))
def test_shifting_every_position_leaves_the_logits(record, device):
    model = _model(record, device)
    ids = _ids(2, SEQ, record, device=device)
    base, _ = _forward(model, ids, _positions(2, SEQ, device=device))
    bound = _bound(base, model)
    for shift in _shifts(record):
        positions = _positions(2, SEQ, shift, device)
        shifted, _ = _forward(model, ids, positions, what=f"positions {shift}…{shift + SEQ - 1}")
        s.require_within(error=_error(shifted, base), bound=bound,
                         what=f"position ids shifted by {shift} change the logits", shift=shift)
    for shift in _shifts(record):
        _require_teeth(model, ids, _positions(2, SEQ, shift, device), bound, f"a shift by {shift}")


#: Decoding crosses the configured maximum up to this one; past it a decode of that length costs minutes.
DECODE_CROSSES = 256


def _decode_length(record) -> int:
    """Past the configured maximum (and so past a scaled model's original length) where it is at most
    DECODE_CROSSES, else 40; inside a table."""
    maximum = record.model.max_position
    if record.model.table_limited:
        return min(40, maximum)
    return maximum + 8 if maximum and maximum <= DECODE_CROSSES else 40


@pytest.mark.claim("MODEL-2", kinds=("model",))
def test_decoding_token_by_token_gives_the_full_logits(record, device):
    model = _model(record, device)
    length, prefill = _decode_length(record), 4
    ids = _ids(1, length, record, seed=1, device=device)
    full, _ = _forward(model, ids, _positions(1, length, device=device), what=f"a full pass of {length}")
    bound = _bound(full, model)
    rows, cache = [], None
    for start, stop in [(0, prefill), *((j, j + 1) for j in range(prefill, length))]:
        step, cache = _forward(model, ids[:, start:stop], _positions(1, stop - start, start, device), cache=cache,
                               what=f"decoding position {start}")
        rows.append(step)
    error = (torch.cat(rows, dim=1) - full).abs().amax(dim=(0, 2))
    worst = int(error.nan_to_num(float("inf")).argmax())
    s.require_within(error=float(error[worst]), bound=bound,
                     what=f"prefill of {prefill}, then decoding one token per step to {length} gives other logits "
                          f"than one full pass (worst at position {worst}; maximum {record.model.max_position})",
                     position=worst)
    _require_teeth(model, ids, _positions(1, length, device=device), bound, "decoding")


@pytest.mark.claim("MODEL-3", kinds=("model",))
def test_a_prefill_in_chunks_gives_the_full_logits(record, device):
    model = _model(record, device)
    length = _decode_length(record)
    ids = _ids(1, length, record, seed=2, device=device)
    full, _ = _forward(model, ids, _positions(1, length, device=device), what=f"a full pass of {length}")
    bound = _bound(full, model)
    rows, cache = [], None
    for start in range(0, length, CHUNK):
        chunk = ids[:, start : start + CHUNK]
        logits, cache = _forward(model, chunk, _positions(1, chunk.shape[1], start, device), cache=cache,
                                 what=f"the chunk at {start}")
        rows.append(logits)
    s.require_within(error=_error(torch.cat(rows, dim=1), full), bound=bound,
                     what=f"a prefill in chunks of {CHUNK} gives other logits than one full pass")
    _require_teeth(model, ids, _positions(1, length, device=device), bound, "a chunked prefill")


def _prefill_then_decode(model, ids, positions, mask, prompt: int):
    """Logits of a prompt of ``prompt`` tokens, then of each later token decoded with the cache."""
    logits, cache = _forward(model, ids[:, :prompt], positions[:, :prompt], mask[:, :prompt])
    steps = [logits]
    for j in range(prompt, ids.shape[1]):
        step, cache = _forward(model, ids[:, j : j + 1], positions[:, j : j + 1], mask[:, : j + 1], cache)
        steps.append(step)
    return torch.cat(steps, dim=1)


@pytest.mark.claim("MODEL-4", kinds=("model",))
def test_left_padding_with_its_mask_gives_the_unpadded_logits(record, device):
    """The reference is each row computed alone the same way (its prompt, then the same decode
    steps), so the relation sees the padding, not the cache (MODEL-2 judges that)."""
    model = _model(record, device)
    if not model.traits.takes_attention_mask:
        pytest.skip("the model takes no attention mask")
    rows = [_ids(1, SEQ - pad + STEPS, record, seed=10 + pad, device=device) for pad in PADS]
    ones = [torch.ones_like(row) for row in rows]
    alone = [_prefill_then_decode(model, row, _positions(1, row.shape[1], device=device), one, SEQ - pad)
             for row, one, pad in zip(rows, ones, PADS, strict=True)]
    bound = _bound(torch.cat(alone, dim=1), model)
    zeros = [torch.zeros(1, pad, dtype=torch.long, device=device) for pad in PADS]
    ids = torch.cat([torch.cat((zero, row), dim=1) for zero, row in zip(zeros, rows, strict=True)])
    mask = torch.cat([torch.cat((zero, one), dim=1) for zero, one in zip(zeros, ones, strict=True)])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    padded = _prefill_then_decode(model, ids, positions, mask, SEQ)
    for r, pad in enumerate(PADS):
        error = (padded[r, pad:] - alone[r][0]).abs().amax(dim=-1)
        worst = int(error.nan_to_num(float("inf")).argmax())
        when = "in the prompt" if worst < SEQ - pad else f"at decode step {worst - (SEQ - pad) + 1}"
        s.require_within(error=float(error[worst]), bound=bound,
                         what=f"a row left-padded by {pad} (batch pads {list(PADS)}) gives other logits than alone, "
                              f"{when}", pad=pad)
    _require_teeth(model, rows[0], _positions(1, rows[0].shape[1], device=device), bound, "left padding")


@pytest.mark.claim("MODEL-5", kinds=("model",))
def test_batch_rows_are_independent(record, device):
    model = _model(record, device)
    row = _ids(1, SEQ, record, seed=20, device=device)
    alone, _ = _forward(model, row, _positions(1, SEQ, device=device))
    bound = _bound(alone, model)
    for companions in (_ids(2, SEQ, record, seed=21, device=device), _ids(3, SEQ, record, seed=22, device=device)):
        batch = torch.cat((companions[:1], row, companions[1:]))
        logits, _ = _forward(model, batch, _positions(batch.shape[0], SEQ, device=device))
        s.require_within(error=_error(logits[1], alone[0]), bound=bound,
                         what=f"a row's logits change with the other rows of its batch (batch of {batch.shape[0]})",
                         batch=batch.shape[0])
    changed, _ = _forward(model, torch.cat((row[:, :-1], (row[:, -1:] + 1) % record.model.vocab_size), dim=1),
                          _positions(1, SEQ, device=device))
    if not _error(changed[:, -1], alone[:, -1]) >= TEETH * bound:
        s.undecided("no teeth: the last token's logits barely depend on the last token")


def _query_after_keys(model, ids, position):
    """The logits of one query at ``position`` after keys at 0 … SEQ − 1, in one pass."""
    positions = torch.cat((torch.arange(SEQ, device=ids.device), torch.tensor([position], device=ids.device)))[None]
    return _forward(model, ids, positions, what=f"a query at {position}")[0][:, -1]


def _query_decoded_after_keys(model, ids, position):
    """The same query decoded: a prefill of the keys, then one step with the cache."""
    _, cache = _forward(model, ids[:, :SEQ], _positions(1, SEQ, device=ids.device), what="the keys' prefill")
    step, _ = _forward(model, ids[:, SEQ:], torch.tensor([[position]], device=ids.device), cache=cache,
                       what=f"a query decoded at {position}")
    return step[:, -1]


@pytest.mark.claim("MODEL-6", kinds=("model",), requires=lambda r: r.model.takes_position_ids)
def test_bf16_keeps_position_information_past_2048(record, device):
    """A query far from its keys turns by ``(m − n)·θ`` with ``m − n`` past 2048: there a θ rounded
    to bf16 or angles formed in bf16 move the logits by radians, where bf16's own rounding of each
    layer moves them as much as near the keys. (Shifting a whole window would not show it: a
    rounded θ keeps the window's relative geometry.) Each way is compared with the fp32 model on
    the same path, one pass or decoded, so a wrong cache path is MODEL-2's to blame."""
    reference = _model(record, device)
    ids = _ids(1, SEQ + 1, record, seed=30, device=device)
    cap = record.model.max_position - 2 if record.model.table_limited else None  # p + 1 inside the table
    far = sorted({min(p, cap) if cap else p for p in FAR})
    paths = {"in one pass": _query_after_keys, "decoded with the cache": _query_decoded_after_keys}
    exact = {(path, p): query(reference, ids, p) for path, query in paths.items() for p in (*NEAR, *far)}
    cast = _model(record, device).to(torch.bfloat16)
    autocast_device = "cuda" if str(device).startswith("cuda") else "cpu"

    def under_autocast(query):
        def run(model, ids, p):
            with torch.autocast(autocast_device, dtype=torch.bfloat16):
                return query(model, ids, p)
        return run

    ways = {**{f"model.to(torch.bfloat16), {path}": (cast, query, path) for path, query in paths.items()},
            **{f"bf16 autocast, {path}": (reference, under_autocast(query), path) for path, query in paths.items()}}
    noises, lost = {}, []
    for how, (model, query, path) in ways.items():
        distance = {p: _error(query(model, ids, p), exact[path, p]) for p in (*NEAR, *far)}
        noise = noises[how] = max(max(distance[p] for p in NEAR),
                                  torch.finfo(torch.bfloat16).eps * float(exact[path, NEAR[0]].abs().max()))
        worst = max(far, key=lambda p: distance[p] if distance[p] == distance[p] else float("inf"))
        if not distance[worst] <= DRIFT * noise:
            lost.append((how, f"a query at {worst} is {distance[worst]:.3g} from the fp32 model's logits, "
                              f"{distance[worst] / noise:.3g} times its distance near the keys"))
    if lost:
        s.violated(f"far from its keys at 0…{SEQ - 1}, the rotation lost precision under "
                   f"{'; '.join(how for how, _ in lost)}: {lost[0][1]}",
                   **{how: said for how, said in lost})
    moved = max(_error(_query_after_keys(reference, ids, p + 1), exact["in one pass", p]) for p in far)
    for how, noise in noises.items():
        if not moved >= 2 * DRIFT * noise:
            s.undecided(f"no teeth for {how}: a query one position further, far from its keys, moves the logits by "
                        f"{moved:.2e}, under {2 * DRIFT} times bf16's own distance ({noise:.2e})")


@pytest.mark.claim("MODEL-7", kinds=("model",), requires=lambda r: r.model.max_position is not None)
def test_past_the_maximum_length(record, device):
    model = _model(record, device)
    maximum = record.model.max_position
    by_ids = model.traits.takes_position_ids
    ids = _ids(1, SEQ if by_ids else maximum + 8, record, seed=40, device=device)
    positions = _positions(1, SEQ, maximum - SEQ // 2, device) if by_ids else None
    where = f"positions {maximum - SEQ // 2}…{maximum + SEQ // 2 - 1}" if by_ids else f"{maximum + 8} tokens"
    try:
        logits, _ = _call(model, ids, positions)
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
