"""The RoPE inside a whole model: relations of a causal LM's logits that need no knowledge of its
internals (the harness's own claims, ``specs/claims.md``, MODEL; each extends the documents' claim
it names). ``logits(ids, positions, mask)`` is one forward pass; a cache continues a sequence.

* MODEL-1 (from ROPE-4): ``logits(ids, p + c) = logits(ids, p)`` for c = 1, 1000 and a window just
  below the model's lowest threshold (its maximum, or a scaled model's original length);
* MODEL-2 (from ROPE-9): decoding one token a call with the model's cache gives, at step t, the
  logits of a fresh pass on the prefix ``ids[:t + 1]`` (and of one full pass where the design
  does not rescale by length), across the maximum where that is affordable (``model_plan``);
* MODEL-3 (from ROPE-9): a prefill in chunks of unequal sizes gives, for each chunk, the logits
  of a fresh pass on the prefix that ends with it;
* MODEL-4 (from ROPE-4): a left-padded row with its mask gives the unpadded row's logits alone,
  in the prompt and while decoding;
* MODEL-5: a row of a left-padded batch of rows of unequal lengths gives the same padded row's
  logits alone (batch-wide effects: a batch maximum, one row's offset for all);
* MODEL-6 (from ROPE-11): ``model.to(bfloat16)`` and bf16 autocast keep position information: a
  query at 3000 or 100000 after keys at 0 … 15 is as close to the fp32 model as one right after
  them;
* MODEL-7 (from ROPE-9): past the maximum, the extrapolation the design defines: a window across
  and past the maximum gives the window at 0's logits (relative positions, scaling kept), or an
  error that names the limit (a table);
* MODEL-8 (from ROPE-4, ROPE-9): documents packed in one row, positions from 0 in each and
  attention kept inside each, give each document's logits alone; identical documents give
  identical logits.

**Two regimes.** MODEL-2 … MODEL-5 and MODEL-8 run twice: with *given* positions (the harness
passes them) and with the model's *own* (no position ids: the model derives them from its cache
and its mask; transformers' models through their own ``generate``). A violation names its regime;
where a model cannot build its own positions, that regime is ``n/a`` with the reason.

**Fresh state.** Every path and every reference runs on a copy of the model as built: a rotary
that keeps state (transformers' dynamic NTK grows its base) never carries one relation's
positions into another's reference.

**Teeth.** A relation that holds counts only where it could have failed on this model: a
position one off (the last token's) must move the logits by :data:`TEETH` tolerances, else the
cell is ``undecided``, never ``holds``. Models without position ids (ALiBi from the mask) show it
by the order of their tokens. Tolerances derive from the dtype: :data:`ULPS` roundings of the
logits' largest magnitude.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

from posenc.harness.whole_models import attribution, model_plan as plan
from posenc.harness.cases.running import shorten
from posenc.harness.catalogue.claims import CONTRACT, ClaimViolation, NotPositional
from posenc.harness.references import contract
from posenc.harness.references.contract import Excluded
from posenc.harness.whole_models.models import ModelSubject, NotInConvention, sliding_reach, wide_layers, window_masks
from specs import support as s

#: A forward pass of a few layers rounds in another order on each path: this many eps of the scale.
ULPS = 1024
#: A relation counts only where a position one off moves the logits this many tolerances.
TEETH = 10
SEQ = plan.SEQ
PADS = (2, 3, 5)  # an even count too: a defect may turn on the pad count's parity
STEPS = 3  # decode steps after a prompt (MODEL-4, MODEL-5)
#: MODEL-6's query positions: right after its SEQ keys, and far from them (past PAST).
PAST = 2048
NEAR, FAR = (SEQ, SEQ + 1, SEQ + 2), (3000, 100_000)
#: Far from its keys, a query may be this many times further from the fp32 model than near them.
DRIFT = 4
#: MODEL-6's rows of tokens, judged together: the loss a rounded θ causes depends on the tokens it
#: turns (a rotary on a third of each head lost 0.5 on one row, 3 to 5.6 on five others).
BF16_ROWS = 3
#: MODEL-6 also queries just below a rescaling threshold (dynamic NTK's maximum, longrope's original
#: length) at least this far out, where every far query lies past it: only below it are the
#: model's own (bf16-cast) frequencies read.
BELOW_RESCALING = 512
#: Logits near the keys that size that distance: a narrow head (a speech model's one stop column)
#: takes more near queries, up to NEAR_MOST.
NEAR_SAMPLES, NEAR_MOST = 48, 24
#: At least this many near queries: their largest distance is bf16's noise, which a far query's
#: one draw must exceed DRIFT times (three near draws put that noise low).
NEAR_LEAST = 8
#: Logits wider than this are judged on this many columns spread across them: a 4096-row pass over a
#: vocabulary of 200000 in float64 is 6.5 GB, and a hidden state that moves, moves every column.
JUDGED_COLUMNS = 8192
GIVEN, OWN = "given", "own"
REGIMES = {GIVEN: "with given positions", OWN: "with the model's own positions"}


#: While a violation's blame is probed, what is done to every copy of the model (:func:`_attributed`),
#: and the violation's details: a relation reruns only the path and position that failed.
_PROBE = None
_FOCUS: dict = {}
#: False while a probe runs with the rotary made the identity: no angle is formed, none rounds.
_ANGLES = True


class Fresh:
    """The model as built, kept unused: each call hands out a copy, so no path or reference runs on
    a model whose state another call changed (and, while a violation's blame is probed, a copy
    with its position code neutralised or its recurrent layers held)."""

    def __init__(self, record, device):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.pristine = record.build(s.config(device=device, dtype=torch.float32)).to(device)
        self.traits = self.pristine.traits

    def __call__(self):
        model = copy.deepcopy(self.pristine)
        if _PROBE is not None:
            _PROBE(_inner(model))
        return model


def _inner(subject):
    """The user's model inside an adapter."""
    return getattr(subject, "model", subject)


def _model(record, device):
    return Fresh(record, device)()


def _ids(batch, seq, record, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, record.model.vocab_size, (batch, seq), generator=g).to(device)


def _positions(batch, seq, start=0, device="cpu"):
    return torch.arange(start, start + seq, device=device).expand(batch, seq)


class _Sequence:
    """The model's own cache, and how many tokens it holds (counted here: a cache need not say)."""

    def __init__(self, cache, length: int):
        self.cache, self.length = cache, length


def _judged(logits: torch.Tensor, every_column: bool = False) -> torch.Tensor:
    """The logits in float64 on :data:`JUDGED_COLUMNS` columns spread evenly (the first and the last
    among them), or on all where they are fewer or ``every_column``. A logit at its dtype's lowest
    value is a token the model forbids (Chameleon's image tokens), a mask and no scale: it reads 0."""
    if logits.is_floating_point():
        logits = logits.masked_fill(logits == torch.finfo(logits.dtype).min, 0)
    width = logits.shape[-1]
    if not every_column and width > JUDGED_COLUMNS:
        columns = torch.linspace(0, width - 1, JUDGED_COLUMNS, device=logits.device).round().long()
        logits = logits.index_select(-1, columns)
    return logits.to(torch.float64)


def _call(model, ids, positions=None, mask=None, cache=None, documents=None, packed=False, bare=False,
          every_column=False):
    """The model's ``(logits in float64, sequence)``; a mask of ones unless given, packed or
    ``bare`` (nothing but the ids and the cache: the commonest inference call). Each call gets its
    own copies of its inputs, so a model that edits them in place changes no later call. The
    logits' own dtype is kept on the model for the tolerance (:func:`_bound`)."""
    held = 0 if cache is None else cache.length
    if mask is None and model.traits.takes_attention_mask and not packed and not bare:
        mask = torch.ones(ids.shape[0], held + ids.shape[1], dtype=torch.long, device=ids.device)
    positions = positions if model.traits.takes_position_ids or (packed and model.traits.packing == "positions") \
        else None
    copies = [None if t is None else {k: m.clone() for k, m in t.items()} if isinstance(t, dict) else t.clone()
              for t in (ids, positions, mask, documents)]
    with torch.no_grad():
        try:
            logits, returned = model(copies[0], position_ids=copies[1], attention_mask=copies[2],
                                     cache=None if cache is None else cache.cache,
                                     **({} if documents is None else {"document_ids": copies[3]}))
        except NotInConvention as reason:
            raise Excluded(f"not in the model's call convention: {reason}") from None
    model.logits_dtype = logits.dtype
    return _judged(logits, every_column), _Sequence(returned, held + ids.shape[1])


def _forward(model, ids, positions=None, mask=None, cache=None, what="the call", **options):
    """:func:`_call` where the relation says the model answers: an error violates it."""
    return s.answered(what, lambda: _call(model, ids, positions, mask, cache, **options))


def _generate(model, ids, mask, prompt, what):
    """The model's own decode (its ``generate``): logits of positions prompt − 1 … length − 2."""
    def run():
        with torch.no_grad():
            try:
                logits = model.generate(ids.clone(), mask.clone(), prompt)
            except NotInConvention as reason:
                raise Excluded(f"not in the model's call convention: {reason}") from None
        model.logits_dtype = logits.dtype
        return _judged(logits)
    return s.answered(what, run)


def _bound(reference: torch.Tensor, model=None, dtype=torch.float32, reach: int = 0) -> float:
    """ULPS roundings of the logits' scale in ``dtype`` (or in the model's logits dtype where
    coarser), and an angle ``p·θ`` rounded at positions up to ``reach`` (about ``reach`` roundings
    of a radian where θ is near 1)."""
    returned = getattr(model, "logits_dtype", dtype)
    reach = reach if _ANGLES else 0
    eps = max(torch.finfo(dtype).eps, torch.finfo(returned).eps if returned.is_floating_point else 0.0)
    return (ULPS + reach) * eps * max(1.0, float(reference.abs().max()))


def _angle_allowance(fresh, ids, positions, base=None) -> tuple[float, bool]:
    """What float32 angles ``p·θ`` may move the logits by at ``positions`` (and at ``base``, the
    window they are compared with), and whether it was measured. Measured where every rotary
    module is of transformers' form (:class:`attribution.ExactAngles`): twice the logits' distance
    from the same model's with its angles taken in float64, at both windows. Else bounded: each
    angle is rounded by up to ``p·θ·eps``, so each token's logits move by up to ``p·eps`` times
    what a position one further moves them (measured on the last token); the window's tokens'
    independent roundings add in quadrature (√n), and twice that is allowed. Zero where the
    model takes no position ids (nothing to measure it by)."""
    if not fresh.traits.takes_position_ids:
        return 0.0, False
    base_logits, _ = _forward(fresh(), ids, positions, what="the window")
    measured = _measured_angle_rounding(fresh, ids, positions, base_logits)
    if measured is not None:
        if base is not None:
            near = _measured_angle_rounding(fresh, ids, base, _forward(fresh(), ids, base, what="the window")[0])
            if near is None:
                measured = None
            else:
                measured += near
        if measured is not None:
            return 2 * measured, True
    moved = positions.clone()
    moved[:, -1] += 1
    per_position = _error(_forward(fresh(), ids, moved, what="the window, its last position one further")[0][:, -1],
                          base_logits[:, -1])
    return 2 * ids.shape[1] ** 0.5 * float(positions.max()) * torch.finfo(torch.float32).eps * per_position, False


def _measured_angle_rounding(fresh, ids, positions, logits) -> float | None:
    """The logits' distance from the model's with float64 angles at ``positions``; None where
    the angles cannot be taken so (:class:`attribution.ExactAngles`)."""
    exact, model = attribution.ExactAngles(), fresh()
    if not exact.attach(_inner(model)):
        return None
    try:
        answer, _ = _call(model, ids, positions)
    except Exception:  # noqa: BLE001 - no measurement
        return None
    return _error(answer, logits) if exact.valid else None


def _teeth_terms(reference, fresh, bound: float, allowance: float) -> tuple[float, float]:
    """``(bound, allowance)`` for :func:`_require_teeth` far from 0: ``TEETH`` times the logits'
    own rounding, and the angles' rounding (the bound's ``reach`` part and the measured allowance)
    counted once, as the relation's tolerance counts it: a relation has teeth where a position one
    off moves the logits past its tolerance. The allowance grows with what a position one off
    moves, so counting it more than once would ask of every model alike that ``p`` stay below
    about ``1 / (16·eps)`` (524288 in float32), whatever its logits do there."""
    own = _bound(reference, fresh.pristine)
    return own, allowance + (bound - own)


def _error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())  # NaN compares false with every bound: a violation


def _row_errors(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`_error` of each row (the first dimension), NaN kept."""
    difference = (a - b).abs().flatten(1)
    return torch.where(difference.isnan().any(1), float("nan"), difference.amax(1))


def _first_over(errors: torch.Tensor, bound: float) -> int:
    """The first index whose error exceeds ``bound`` (NaN counts), else the largest error's: a
    violation is reported where it starts."""
    over = ~(errors <= bound)
    return int(over.nonzero()[0, 0]) if bool(over.any()) else int(errors.argmax())


def _regime(model, regime, packs=False):
    """Positions the harness passes in this regime: a function of the given ones, or None. ``packs``:
    documents packed by restarting ids, which a model may read for its mask alone (Falcon's ALiBi)."""
    if regime == OWN and not model.traits.own_positions:
        raise Excluded("the model needs its positions given (traits.own_positions=False)")
    if regime == GIVEN and not model.traits.takes_position_ids and not (packs and model.traits.packing == "positions"):
        raise Excluded("ALiBi counted from the sequence and its mask: the model reads no position ids, its own "
                       "positions are the only regime" if model.traits.positions == "alibi" else
                       "the model takes no position ids: its own positions are the only regime")
    return (lambda positions: positions) if regime == GIVEN else (lambda positions: None)


def _require_teeth(model, ids, positions, bound, what, regime=GIVEN, allowance=0.0, twin=False):
    """The logits must depend on position here by ``TEETH`` tolerances: a given position one off
    (the last token's) must move the last logits; with the model's own positions (or none taken),
    the first half of the tokens in reverse order may show it instead, or, where a recurrent
    state forgets far tokens, those between the middle and the last. ``twin``: the relation runs
    with the model's own positions too; where the model ignores the ids it is given, its given
    regime is that one, and is excluded (as for a model that takes none), never undecided."""
    if _PROBE is not None:  # a probe of blame: the relation's verdict on the model is already made
        return
    need = TEETH * bound + allowance  # past the angle rounding the relation's tolerance allows (:func:`_teeth_terms`)
    logits, _ = _forward(model, ids, positions)
    moves = {}
    if model.traits.takes_position_ids and positions is not None:
        moved = positions.clone()
        moved[:, -1] += 1
        moves["the last token's position moved by one"] = _error(_forward(model, ids, moved)[0][:, -1], logits[:, -1])
        if moves["the last token's position moved by one"] >= need:
            return
        if ids.shape[1] > 8:  # a block one off, as a chunk or a step at the wrong offset is
            moved = positions.clone()
            moved[:, -8:] += 1
            block = _error(_forward(model, ids, moved)[0][:, -8:], logits[:, -8:])
            if block >= need:
                return
            moves["the last 8 tokens' positions moved by one (their logits)"] = block
    half = ids.shape[1] // 2
    reordered, _ = _forward(model, torch.cat((ids[:, :half].flip(1), ids[:, half:]), dim=1),
                            None if positions is None else positions)
    moves["the first half of the tokens reversed"] = reversal = _error(reordered[:, -1], logits[:, -1])
    if reversal < TEETH * bound + allowance and ids.shape[1] > 3:  # a recurrent model forgets far tokens (RWKV)
        near, _ = _forward(model, torch.cat((ids[:, :half], ids[:, half:-1].flip(1), ids[:, -1:]), dim=1),
                           None if positions is None else positions)
        moves["the tokens between the middle and the last reversed"] = _error(near[:, -1], logits[:, -1])
        reversal = max(reversal, moves["the tokens between the middle and the last reversed"])
    if reversal >= need and (regime == OWN or "the last token's position moved by one" not in moves):
        return
    said = "; ".join(f"{how} moves the last logits by {change:.2e}" for how, change in moves.items())
    moved_by_one = moves.get("the last token's position moved by one", 0.0)
    unmoved = reversal >= need and moved_by_one <= bound and "the last token's position moved by one" in moves
    read_near_zero = unmoved and _positions_move_near_zero(model, ids, bound)
    if unmoved and not read_near_zero and twin and model.traits.own_positions:
        raise Excluded(f"the model ignores the position ids it is given ({said}): its given regime is its own, "
                       "judged there")
    why = ("the logits barely depend on position here" if reversal < need
           else f"a position one off moves nothing up to {int(positions.max())} but moves the last logits at "
                f"0…{SEQ - 1}: positions there read as clamped or saturated (a table that stops at its maximum)"
           if read_near_zero
           else _why_positions_move_nothing(model, ids, positions, logits, bound) if unmoved
           else "a position one off moves the logits, but by less than the tolerance at these positions allows "
                "a verdict on")
    low = int(positions.min()) if positions is not None and model.traits.takes_position_ids else 0
    if low > 0 and "the last token's position moved by one" in moves:  # teeth where the relation's positions are
        near = positions - low
        moved = near.clone()
        moved[:, -1] += 1
        at_zero = _error(_forward(model, ids, moved)[0][:, -1], _forward(model, ids, near)[0][:, -1])
        if at_zero >= need:
            why = (f"a position one off moves nothing at {low}…{int(positions.max())} but moves the last logits by "
                   f"{at_zero:.2e} at 0…{int(near.max())}: positions there read as clamped or saturated (a table "
                   "that stops at its maximum)")
    s.undecided(f"no teeth for {what}: {why} ({said}, under {TEETH} tolerances, {need:.2e})")


def _positions_move_near_zero(model, ids, bound) -> bool:
    """Whether the model reads given position ids at all: at 0 … SEQ − 1 (a table clamped past its
    maximum reads none there), the last token's position moved by one moves the last logits."""
    short = ids[:, :SEQ]
    near = _positions(ids.shape[0], short.shape[1], device=ids.device)
    moved = near.clone()
    moved[:, -1] += 1
    return _error(_forward(model, short, moved)[0][:, -1], _forward(model, short, near)[0][:, -1]) > bound


def _why_positions_move_nothing(model, ids, positions, logits, bound) -> str:
    """Why given positions move nothing where the order of the tokens does: the model has no
    position code the probe reaches, or it has some and the logits do not read it here (its
    rotary made the identity moves nothing either: attention whose scores ignore q·k, or no
    layer that applies it)."""
    neutral = copy.deepcopy(model)
    reached = attribution.neutralise_positions(_inner(neutral))
    if not reached:
        named = attribution.named_like_position_code(_inner(model))
        if named:
            return (f"given positions move nothing where the order of the tokens does, and its modules named like "
                    f"position code ({', '.join(named[:2])}) are none the probe reaches: it seems to count positions "
                    "of its own (from its cache's slots, say), not the ids it is given")
        return ("given positions move nothing where the order of the tokens does, and the model has no rotary module, "
                "position table or relative bias: a model without positions (NoPE), or one that counts its own")
    moved = _error(_forward(neutral, ids, positions)[0][:, -1], logits[:, -1])
    if moved > bound:
        return (f"given positions move nothing where the order of the tokens does, though its position code "
                f"({', '.join(reached[:2])}) made the identity moves the last logits by {moved:.2e}: the model "
                "seems to ignore position_ids and count its own")
    return (f"neither given positions nor its position code ({', '.join(reached[:2])}) made the identity move the "
            f"logits ({moved:.2e}), where the order of the tokens does: no layer here reads the rotated q and k "
            "(attention scores that ignore q·k, or position code no layer applies)")


def _rerun(relation, record, device, regime, probe, focus: dict, angles: bool = True):
    """``relation`` once more, every copy of the model altered by ``probe``: the violation it
    raises, None where it holds, or ``...`` where it reaches no verdict. ``angles``: False where
    the probe leaves no angle to round (the rotary made the identity), so no tolerance allows one."""
    global _PROBE, _FOCUS, _ANGLES
    _PROBE, _FOCUS, _ANGLES = probe, focus, angles
    try:
        relation(record, device, regime)
    except ClaimViolation as again:
        return again
    except BaseException:  # noqa: BLE001 - an exclusion, a crash: no evidence either way
        return ...
    finally:
        _PROBE, _FOCUS, _ANGLES = None, {}, True
    return None


def _blind_to_positions(fresh, record, device, neutralise: bool) -> bool | None:
    """Whether the last token's position moved to the farthest the relations reach moves nothing
    (and raises nothing), on the model as built or with its position code neutralised; None where
    the model cannot say (no position ids, or an error)."""
    if not fresh.traits.takes_position_ids:
        return None
    ids, positions = _ids(1, SEQ, record, seed=60, device=device), _positions(1, SEQ, device=device)
    moved = positions.clone()
    moved[:, -1] = max(SEQ + 7, plan.decode_plan(fresh.traits).length)
    answers = []
    for given in (positions, moved):
        model = fresh()
        if neutralise:
            attribution.neutralise_positions(_inner(model))
        try:
            answers.append(_call(model, ids, given)[0])
        except Exception:  # noqa: BLE001 - a model that cannot answer so shows nothing
            return None
    return _error(*answers) <= _bound(answers[0], model)


def _blame(relation, record, device, regime, violation):
    """Raise the :class:`NotPositional` violation ``violation`` is, with its evidence, where it
    persists with the model's position code neutralised (each module :mod:`attribution` reaches,
    shown neutral up to the farthest position the relations reach; a table that raises past its
    end is position code too), or where the model has no position code and its position ids move
    nothing; return where the positions cause it, or no probe can tell."""
    if _rerun(relation, record, device, regime, lambda model: None, violation.details) is None:
        s.undecided(f"{_summary(violation)}; run again on a model built alike, it holds: the model's build or its "
                    "calls draw at random (weights left uninitialised?), and nothing can be blamed")
    fresh = Fresh(record, device)
    reached = attribution.position_code(_inner(fresh.pristine))
    # where no position id can be moved to show it (T5's decoder), zeroed tables and a rotary made the
    # identity are neutral by construction
    shown_neutral = bool(reached) and (_blind_to_positions(fresh, record, device, neutralise=True)
                                       if fresh.traits.takes_position_ids else True)
    angles = fresh.traits.positions == "alibi"  # ALiBi's slopes still meet the positions
    if shown_neutral:
        again = _rerun(relation, record, device, regime, attribution.neutralise_positions, violation.details,
                       angles=angles)
        if not isinstance(again, ClaimViolation):
            return
        made = ": raised " in _summary(again) and _raised_in_position_code(relation, record, device, regime, again)
        if made:  # raised where positions are made (an M-RoPE index builder): no probe neutralises that
            details = {k: v for k, v in violation.details.items() if k != "reproducer"}
            s.violated(f"{_summary(violation)} (the positions': {made})", **details)
        evidence = {"with the positions neutralised": f"{', '.join(reached)} made the identity, the violation "
                                                      f"persists: {_summary(again)}"}
        probe = "it persists with the position code neutralised"
    elif reached:  # position code that cannot be shown neutral (no position ids to move): where an error rose
        raised = _raised_outside_position_code(relation, record, device, regime, violation)
        if raised is None:
            return
        evidence = {"where it raised": f"inside {raised}, which is no position code"}
        probe, reached = f"raised inside {raised}", []
    elif _blind_to_positions(fresh, record, device, neutralise=False):
        evidence = {"the model's positions": "no rotary module or position table, and a position id moved far "
                                             "moves none of its logits"}
        probe, reached = "the model reads no positions", []
    elif not fresh.traits.takes_position_ids and fresh.traits.positions != "alibi":
        evidence = {"the model's positions": "no rotary module, position table or ALiBi, and it takes no position "
                                             "ids: nothing in it reads a position"}
        probe, reached = "the model has no position code", []
    else:  # position code the probe cannot reach: an error is placed by the module it was raised in
        raised = _raised_outside_position_code(relation, record, device, regime, violation)
        if raised is None:
            return
        evidence = {"where it raised": f"inside {raised}, which is no position code (no rotary module or position "
                                       "table the probe reaches runs there)"}
        probe, reached = f"raised inside {raised}", []
    blame = "the model, not its positions"
    recurrent = attribution.recurrent_layers(_inner(fresh.pristine))
    selectors = _key_selectors(fresh, record, device)
    budgets = attribution.keep_every_key(_inner(fresh()), selectors)
    if budgets and not recurrent.modules:  # what the choice of keys does, the positions neutralised too
        def every_key(model):
            attribution.neutralise_positions(model)
            attribution.keep_every_key(model, selectors)
        if _rerun(relation, record, device, regime, every_key, violation.details, angles=angles) is None:
            blame = f"the keys chosen by {', '.join(selectors[:2])}"
            evidence["with every key kept too"] = (f"{', '.join(budgets[:2])} raised past the sequence, the relation "
                                                   "holds: the two passes choose other keys")
            probe += "; it clears with every key kept"
    if recurrent.modules:
        def held(model):
            attribution.neutralise_positions(model)
            attribution.hold_recurrent_layers(model)
        if _rerun(relation, record, device, regime, held, violation.details, angles=angles) is None:
            blame = f"its recurrent layers ({recurrent.describe()})"
            evidence["with its recurrent layers held at zero too"] = "the relation holds"
            probe += "; it clears with the recurrent layers held at zero"
            if selectors:  # zeroing those layers changes what a selection downstream reads too
                blame += f", or the keys chosen from what they feed ({', '.join(selectors[:2])})"
                evidence["choices it makes"] = (f"{', '.join(selectors[:2])} choose among keys from hidden states "
                                                "those layers feed: held at zero, they change the choices too, so "
                                                "either may cause it")
        else:
            evidence["with its recurrent layers held at zero too"] = "the violation persists"
    details = {k: v for k, v in violation.details.items() if k != "reproducer"}
    s.not_positional(f"{_summary(violation)} ({probe})", blame=blame, **details, **evidence)


#: Modules whose choices are experts for each token, not keys (a router's top-k).
ROUTERS = re.compile(r"router|gate|expert|moe|mlp|ffn", re.I)


def _key_selectors(fresh, record, device) -> list[str]:
    """The modules of the model that choose among keys (an indexer's top-k: integer indices in
    their output, :class:`attribution.Selections`), routers of experts aside."""
    model = fresh()
    choices = attribution.Selections().record(_inner(model))
    try:
        _call(model, _ids(1, SEQ, record, seed=61, device=device), _positions(1, SEQ, device=device))
    except Exception:  # noqa: BLE001 - a model that cannot answer so shows no choices
        return []
    finally:
        choices.remove()
    return [name for name in choices.modules() if not ROUTERS.search(name)]


def _raised_in_position_code(relation, record, device, regime, violation) -> str | None:
    """Where a violation that is an error was raised in the model's position code (a method that
    makes positions, a rotary), rerun to read its traceback; None where it was raised elsewhere."""
    copies, shapes = [], attribution.PositionShapes()
    again = _rerun(relation, record, device, regime, lambda model: (copies.append(model), shapes.record(model)),
                   violation.details)
    if not isinstance(again, ClaimViolation) or ": raised " not in _summary(again):
        return None
    if shapes.misshapen:  # positions of another length than the tokens: raised further on, but theirs
        return shapes.misshapen[0]
    return next((found for model in reversed(copies) if (found := attribution.inside_position_code(model, again))),
                None)


def _raised_outside_position_code(relation, record, device, regime, violation) -> str | None:
    """Where a violation that is an error was raised: the innermost module of the model (read
    from the error's traceback) where no position code can have run; None where it is no error,
    or may have been raised in position code."""
    if ": raised " not in _summary(violation):
        return None
    copies = []
    again = _rerun(relation, record, device, regime, copies.append, violation.details)
    if not isinstance(again, ClaimViolation) or ": raised " not in _summary(again):
        return None
    for model in reversed(copies):  # the copy the error was raised in
        chain = attribution.raised_in(model, again)
        if chain:
            return attribution.outside_position_code(model, chain, again)
    return None


def _summary(violation) -> str:
    """A violation's summary, without its ``[claim] encoder:`` head and its detail lines."""
    first = str(violation).splitlines()[0]
    return first.split(": ", 1)[1] if first.startswith("[") and ": " in first else first


def _attributed(relation, record, device, regime):
    """``relation``; a violation it raises is blamed on the positions unless :func:`_blame` shows
    that it persists without them."""
    try:
        relation(record, device, regime)
    except NotPositional:
        raise
    except ClaimViolation as violation:
        _blame(relation, record, device, regime, violation)
        raise


@pytest.mark.claim(CONTRACT, kinds=("model",))
def test_a_model_answers_logits_of_its_shape_and_a_cache_that_continues(record, device):
    model = _model(record, device)
    ids = _ids(2, SEQ, record, device=device)
    both = contract.encoder_decoder(model, ids)
    if both:
        s.violated(f"the model cannot be called with input ids alone: {both}")
    logits, cache = _forward(model, ids, _positions(2, SEQ, device=device), every_column=True)
    width = record.model.logits_width or record.model.vocab_size
    if tuple(logits.shape) != (2, SEQ, width) or not bool(torch.isfinite(logits).all()):
        s.violated(f"logits of shape {tuple(logits.shape)} (finite: {bool(torch.isfinite(logits).all())}) for input "
                   f"ids (2, {SEQ}); expected finite (2, {SEQ}, {width})"
                   + (contract.width_hint(logits, ids) if tuple(logits.shape) != (2, SEQ, width) else ""))
    if cache.cache is None:  # a convention without a cache: its cached relations read n/a, with the reason
        return
    if contract.continues_by_a_convention_of_its_own(record, device):  # XLM, CpmAnt: the full ids each call
        return
    step, _ = _forward(model, ids[:, :1], _positions(2, 1, SEQ, device), cache=cache, every_column=True)
    if tuple(step.shape) != (2, 1, width):
        s.violated(f"a step of 1 token on 2 rows with the returned cache gives logits of shape {tuple(step.shape)}; "
                   f"expected (2, 1, {width})")


# ------------------------------------------------------------------ MODEL-1


@pytest.mark.claim("MODEL-1", kinds=("model",))
def test_shifting_every_position_leaves_the_logits(record, device):
    """A violation is rerun with the position code neutralised: one that persists names where the
    positions reach the logits instead (Beam's NoPE layers scale queries by position)."""
    _where_positions_reach(_shifting, record, device, "the shift")


def _where_positions_reach(relation, record, device, what):
    """``relation``; a violation is rerun with the position code neutralised, and one that persists
    says the positions reach the logits outside the rotary and the tables."""
    try:
        relation(record, device)
    except NotPositional:
        raise
    except ClaimViolation as violation:
        if not {"shift", "start"} & set(violation.details):  # no window moved (a table's error): nothing to rerun
            raise
        reached = attribution.position_code(_inner(Fresh(record, device).pristine))
        again = _rerun(relation, record, device, GIVEN, attribution.neutralise_positions, violation.details) \
            if reached else None
        if isinstance(again, ClaimViolation):
            details = {k: v for k, v in violation.details.items() if k != "reproducer"}
            s.violated(f"{_summary(violation)}; with {', '.join(reached)} made the identity {what} still moves "
                       f"the logits ({_summary(again).split(': ', 1)[-1]}): positions reach them outside the rotary "
                       "and the tables (a position-dependent scale or bias of the model's own)", **details)
        raise


def _shifting(record, device, regime=GIVEN):
    fresh = Fresh(record, device)
    window, shifts = plan.shift_window(fresh.traits), plan.shifts(fresh.traits)
    if record.model.table_limited:  # a table: shifts that stay inside it
        shifts = sorted({min(c, record.model.max_position - window - 1) for c in (1, 1000)})
    ids = _ids(2, window, record, device=device)
    base, _ = _forward(fresh(), ids, _positions(2, window, device=device))
    # each shift's tolerance from the positions it reaches: a defect at 1 is not excused by 100000's rounding
    tolerances = {}
    for shift in shifts:  # the angles' rounding measured where it can be, else bounded (the bound's reach)
        allowance, measured = _angle_allowance(fresh, ids, _positions(2, window, shift, device),
                                               base=_positions(2, window, device=device))
        tolerances[shift] = (_bound(base, fresh.pristine, reach=0 if measured else shift + window), allowance)
    for shift in shifts:
        bound, allowance = tolerances[shift]
        shifted, _ = _forward(fresh(), ids, _positions(2, window, shift, device),
                              what=f"positions {shift}…{shift + window - 1}")
        s.require_within(error=_error(shifted, base), bound=bound + allowance,
                         what=f"position ids shifted by {shift} (inside the maximum "
                              f"{record.model.max_position}) change the logits", shift=shift)
    for shift in shifts:
        bound, allowance = tolerances[shift]
        own, angles = _teeth_terms(base, fresh, bound, allowance)
        _require_teeth(fresh(), ids, _positions(2, window, shift, device), own, f"a shift by {shift}",
                       allowance=angles)


# ------------------------------------------------------------------ MODEL-2


def _prefix_logits(fresh, ids, end, place, device, regime):
    """A fresh pass on ``ids[:, :end]`` (given positions, or the model's own)."""
    logits, _ = _forward(fresh(), ids[:, :end], place(_positions(ids.shape[0], end, device=device)),
                         what=f"{REGIMES[regime]}, a fresh pass on the prefix 0…{end - 1}")
    return logits


def _promises_full_pass(traits, reach: int) -> bool:
    """A fresh pass on a prefix equals the full pass's rows where no call rescales by its length."""
    return not plan.crosses(reach, traits.rescales_at)


#: The model's own positions are reached three ways: its generate, bare forward calls (the ids,
#: then each next id with the cache and nothing else) and forward calls with a mask of ones (a
#: model may take its offset from the mask on one path and from the cache on the other).
GENERATE, BARE, ONES = "through its generate", "through bare forward calls", "through forward calls with a mask of ones"


def _own_paths(model):
    """The ways of :data:`GENERATE`, :data:`BARE`, :data:`ONES` this model takes (an adapter whose
    generate is forward calls with a mask of ones has the last already)."""
    ones = model.traits.takes_attention_mask and type(model).generate is not ModelSubject.generate
    return (GENERATE, BARE, ONES) if ones else (GENERATE, BARE)


def _chunk_paths(model):
    """A chunked prefill's ways with the model's own positions: bare calls, and with a mask of ones
    where the model takes one."""
    return (BARE, ONES) if model.traits.takes_attention_mask else (BARE,)


def _path(way) -> dict:
    """A violation's detail naming the own-position path it took (a probe of blame reruns it)."""
    return {} if way is None else {"path": way}


def _stepped(model, ids, prefill, place, regime, way, device):
    """A prefill of ``prefill`` tokens, then one token a call with the cache: the logits of
    positions prefill − 1 … length − 1, and those positions."""
    said = REGIMES[regime] + ("" if regime == GIVEN else f" {way}")
    logits, cache = _forward(model, ids[:, :prefill], place(_positions(1, prefill, device=device)),
                             what=f"{said}, a prefill of {prefill}", bare=way == BARE)
    if way == BARE and getattr(model, "fills_handed_cache", None):  # the cache it fills it never returns
        s.violated(f"{said}: model(ids, use_cache=True) returns no cache, and keeps no state in its modules (a cache "
                   "handed to it fills): a bare call cannot continue the sequence", **_path(way))
    rows = [logits[:, -1]]
    for j in range(prefill, ids.shape[1]):
        step, cache = _forward(model, ids[:, j : j + 1], place(_positions(1, 1, j, device)), cache=cache,
                               what=f"{said}, decoding position {j}", bare=way == BARE)
        rows.append(step[:, -1])
    return torch.stack(rows, dim=1), list(range(prefill - 1, ids.shape[1]))


def _decode_references(fresh, ids, wanted, decoded, place, device, regime, decode):
    """A fresh pass on the prefix ending at each decoded position, and the full pass where the
    model promises one. A long prefix costs a long call each: where the full pass's rows are the
    prefixes' (checked on the first and the last prefix), a row every decoded way matches stands
    for its prefix's pass; a fresh pass is made wherever a way disagrees."""
    if not wanted:
        return {}, None, 0.0
    model = fresh.pristine
    prefixes = {}
    full = None
    if _promises_full_pass(fresh.traits, decode.last) and len(wanted) > 2:
        full, _ = _forward(fresh(), ids, place(_positions(1, decode.length, device=device)),
                           what=f"{REGIMES[regime]}, a full pass of {decode.length}")
        bound = _bound(full[:, list(wanted)], model, reach=decode.length)
        ends = (wanted[0], wanted[-1])
        prefixes = {j: _prefix_logits(fresh, ids, j + 1, place, device, regime)[:, -1] for j in ends}
        if all(_error(prefixes[j], full[:, j]) <= bound for j in ends):
            for j in wanted:
                agree = all(float((steps[:, at.index(j)] - full[:, j]).abs().amax()) <= bound
                            for steps, at in decoded.values() if j in at)
                if agree:
                    prefixes.setdefault(j, full[:, j])
    for j in wanted:
        if j not in prefixes:
            prefixes[j] = _prefix_logits(fresh, ids, j + 1, place, device, regime)[:, -1]
    if full is None:
        bound = _bound(torch.stack([prefixes[j] for j in wanted], dim=1), model, reach=decode.length)
    return prefixes, full, bound


def _short(relation, record, device, regime, judged, teeth):
    """``teeth`` (:func:`_require_teeth`) of a relation judged on ``judged``; where that plan reaches
    a threshold through a long prefill and a position one off moves too little there, the relation
    runs on :data:`plan.SHORT` too, whose teeth decide (its violations count as the long one's)."""
    try:
        teeth()
    except contract.Undecided:
        if judged.prefill <= SEQ:
            raise
        relation(record, device, regime, short=True)


def _plan(fresh, short: bool) -> tuple[plan.Decode, dict]:
    """The decode a relation runs: :data:`plan.SHORT` where ``short`` (or a probe of blame reruns
    a violation found there), else the model's :func:`plan.decode_plan`; and the detail its
    violations carry where it is the short one in place of the model's."""
    own = plan.decode_plan(fresh.traits)
    if (short or _FOCUS.get("plan") == "short") and own != plan.SHORT:
        return plan.SHORT, {"plan": "short"}
    rescale = fresh.traits.rescales_at
    if rescale is not None and own.prefill < rescale <= own.last:
        return own, {"rescales at": f"{rescale}: the model's frequencies change with a call's largest position there "
                                    "(its rope type), so keys cached before it keep the rotation they were made with"}
    return own, {}


def _both_ways(fresh, record, device) -> str | None:
    """Where the model's config declares attention both ways and the model keeps its word (the
    last token changed moves the logits before it), the evidence; else None. A model that attends
    both ways undeclared is judged as causal."""
    declared = attribution.declared_bidirectional(_inner(fresh.pristine))
    if declared is None:
        return None
    ids = _ids(1, SEQ, record, seed=62, device=device)
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % (fresh.traits.vocab_size or 2)
    before, _ = _call(fresh(), ids, _positions(1, SEQ, device=device))
    after, _ = _call(fresh(), changed, _positions(1, SEQ, device=device))
    moved = _error(before[:, :-1], after[:, :-1])
    if moved <= TEETH * _bound(before, fresh.pristine):
        return None
    return (f"the model attends both ways, as its {declared} declares (the last of {SEQ} tokens changed moves the "
            f"logits before it by {moved:.2e})")


def _require_causal(fresh, record, device, what: str):
    """Exclude a continuation relation on a model that attends both ways by design (:func:`_both_ways`):
    a continuation then sees less than a fresh pass on the whole prefix."""
    both = _both_ways(fresh, record, device)
    if both:
        raise Excluded(f"{both}: {what} cannot see what a fresh pass on the whole prefix sees")


def _decode(record, device, regime, short=False):
    fresh = Fresh(record, device)
    _require_causal(fresh, record, device, "a decode step, its keys cached from a shorter prefix,")
    model = fresh.pristine  # its traits and adapter; every call runs on a copy
    place = _regime(model, regime)
    decode, where = _plan(fresh, short)
    ids = _ids(1, decode.length, record, seed=1, device=device)
    decoded, broken, excluded = {}, None, None
    for way in (_own_paths(model) if regime == OWN else (None,)):
        if _FOCUS.get("path", way) != way:  # a probe of blame reruns the path that failed
            continue
        try:
            if way == GENERATE:
                steps = _generate(fresh(), ids, torch.ones_like(ids), decode.prefill,
                                  f"{REGIMES[regime]} {way}, decoding")
                decoded[way] = steps, list(range(decode.prefill - 1, decode.length - 1))
            else:
                used = fresh()
                decoded[way] = _stepped(used, ids, decode.prefill, place, regime, way, device)
        except Excluded as reason:  # a way the model does not take (a generate that needs another package)
            if way is None:
                raise
            excluded = excluded or reason
        except ClaimViolation as violation:  # a path that raises: the others are judged before it is told
            if way is None:
                raise
            broken = broken or violation
    if not decoded:
        raise broken or excluded or Excluded("no way of decoding with the model's own positions ran")
    longest = max(len(at) for _, at in decoded.values())
    wanted = range(decode.prefill - 1, decode.prefill - 1 + longest)
    if _FOCUS.get("sequence") == "new":  # a probe of blame of the new sequence: no decode judged
        wanted, decoded = [], {}
    elif "position" in _FOCUS:  # a probe of blame: the position that failed
        wanted = [_FOCUS["position"]]
        decoded = {way: (steps[:, [at.index(j) for j in wanted]], wanted) for way, (steps, at) in decoded.items()}
    prefixes, full, bound = _decode_references(fresh, ids, wanted, decoded, place, device, regime, decode)
    for way, (steps, at) in decoded.items():
        said = REGIMES[regime] + ("" if way is None else f" {way}")
        against = _FOCUS.get("against", "prefix") if _FOCUS else None  # a probe reruns the comparison that failed
        reference = torch.stack([prefixes[j] for j in at], dim=1)
        errors = (steps - reference).abs().amax(dim=(0, 2)) if against != "full pass" else torch.zeros(len(at))
        worst = _first_over(errors, bound)
        s.require_within(error=float(errors[worst]), bound=bound,
                         what=f"{said}, decode step {worst} (position {at[worst]}, after a prefill of "
                              f"{decode.prefill}) gives other logits than a fresh pass on the prefix 0…{at[worst]} "
                              f"(maximum {record.model.max_position})", position=at[worst], regime=regime, **_path(way),
                         **where)
        if _promises_full_pass(fresh.traits, decode.last) and against in (None, "full pass"):
            if full is None:
                full, _ = _forward(fresh(), ids, place(_positions(1, decode.length, device=device)),
                                   what=f"{REGIMES[regime]}, a full pass of {decode.length}")
            errors = (steps - full[:, at]).abs().amax(dim=(0, 2))
            worst = _first_over(errors, bound)
            s.require_within(error=float(errors[worst]), bound=bound,
                             what=f"{said}, decode step {worst} (position {at[worst]}) gives other logits "
                                  f"than one full pass of {decode.length}, though it matches its prefix's",
                             position=at[worst], regime=regime, against="full pass", **_path(way), **where)
    if broken is not None:
        raise broken
    if regime == GIVEN and (not _FOCUS or _FOCUS.get("sequence") == "new"):  # it starts anew as a fresh model
        other, start = _ids(1, decode.prefill, record, seed=3, device=device), _positions(1, decode.prefill, device=device)
        again, _ = _forward(used, other, start, what="a new sequence on the model that decoded")
        anew, _ = _forward(fresh(), other, start, what="a new sequence on a fresh model")
        s.require_within(error=_error(again, anew), bound=_bound(anew, model), regime=regime, sequence="new",
                         what="a new sequence (no cache passed) on the model that decoded before gives other logits "
                              "than on a fresh model: it keeps state across sequences (a cache reset that does nothing)")
    _short(_decode, record, device, regime, decode,
           lambda: _require_teeth(fresh(), ids, _positions(1, decode.length, device=device), bound, "decoding",
                                  regime, twin=True))


@pytest.mark.claim("MODEL-2", kinds=("model",))
def test_decoding_matches_each_prefix_with_given_positions(record, device):
    _attributed(_decode, record, device, GIVEN)


@pytest.mark.claim("MODEL-2", kinds=("model",))
def test_decoding_matches_each_prefix_with_own_positions(record, device):
    _attributed(_decode, record, device, OWN)


# ------------------------------------------------------------------ MODEL-3


def _chunks(record, device, regime, short=False):
    fresh = Fresh(record, device)
    _require_causal(fresh, record, device, "a chunk, its keys cached from a shorter prefix,")
    model = fresh.pristine  # its traits and adapter; every call runs on a copy
    place = _regime(model, regime)
    decode, where = _plan(fresh, short)
    sizes = plan.chunk_plan(fresh.traits, decode)
    length = sum(sizes)
    ids = _ids(1, length, record, seed=2, device=device)
    chunked = {}
    for way in (_chunk_paths(model) if regime == OWN else (None,)):
        if _FOCUS.get("path", way) != way:  # a probe of blame reruns the path that failed
            continue
        said = REGIMES[regime] + ("" if way is None else f" {way}")
        model, cache, start, judged = fresh(), None, 0, []
        try:
            for size in sizes:
                logits, cache = _chunk(fresh, model, ids, start, size, place, cache, said, way, device)
                judged.append((start, start + size, logits))
                start += size
        except Excluded:
            if way != BARE:
                raise
            continue
        chunked[way] = judged
    if not chunked:
        raise Excluded(f"{type(model.model).__name__} continues a sequence with its own positions only through its "
                       "generate, which prefills in one call")
    references, bound = {}, None
    for way, judged in chunked.items():
        said = REGIMES[regime] + ("" if way is None else f" {way}")
        for k, (begin, end, logits) in enumerate(judged):
            if _FOCUS and _FOCUS.get("chunk") != k:  # a probe of blame: the chunk that failed
                continue
            if end not in references:
                references[end] = _prefix_logits(fresh, ids, end, place, device, regime)
            reference = references[end][:, begin:end]
            bound = bound or _bound(reference, model, reach=length)
            s.require_within(error=_error(logits, reference), bound=bound,
                             what=f"{said}, chunk {k} ({begin}…{end - 1}, chunk sizes {sizes}) gives other "
                                  f"logits than a fresh pass on the prefix 0…{end - 1}", chunk=k, regime=regime,
                             **_path(way), **where)
        if _promises_full_pass(fresh.traits, length - 1) and (not _FOCUS or "chunk" not in _FOCUS):
            if length not in references:
                references[length] = _prefix_logits(fresh, ids, length, place, device, regime)
                bound = bound or _bound(references[length], model, reach=length)
            full = references[length]  # the last chunk's prefix is the whole sequence
            joined = torch.cat([logits for _, _, logits in judged], dim=1)
            s.require_within(error=_error(joined, full), bound=bound,
                             what=f"{said}, a prefill in chunks of {sizes} gives other logits than one full "
                                  "pass, though each chunk matches its prefix's", regime=regime, **_path(way), **where)
    _short(_chunks, record, device, regime, decode,
           lambda: _require_teeth(fresh(), ids, _positions(1, length, device=device), bound, "a chunked prefill",
                                  regime, twin=True))


#: Words of a model that refuses a multi-token call with its cache, saying so.
ONE_AT_A_TIME = re.compile(r"only (be )?supported|not (yet )?supported|only supports?", re.I)


def _chunk(fresh, model, ids, start, size, place, cache, said, way, device):
    """A chunk of ``size`` tokens from ``start`` with the cache. A model that refuses a chunk past
    the first, saying it takes one token at a time with its cache, and then takes one token from
    the same prefix, keeps a convention of its own: the relation is n/a with its words."""
    what = f"{said}, the chunk {start}…{start + size - 1}"
    call = lambda m, n, c: _forward(m, ids[:, start : start + n], place(_positions(1, n, start, device)),  # noqa: E731
                                    cache=c, what=what, bare=way == BARE)
    try:
        return call(model, size, cache)
    except ClaimViolation as violation:
        words = str(violation.details.get("message", ""))
        if cache is None or size == 1 or not ONE_AT_A_TIME.search(words):
            raise
        again = fresh()
        _, prefix = _forward(again, ids[:, :start], place(_positions(1, start, device=device)), bare=way == BARE,
                             what=f"{said}, a prefill of {start}")
        call(again, 1, prefix)  # one token from the same prefix: it continues so
        raise Excluded(f"{type(model.model).__name__} takes one token at a time with its cache (a chunk of {size} "
                       f"after {start} raised: {shorten(words, 120)})") from None


@pytest.mark.claim("MODEL-3", kinds=("model",))
def test_a_chunked_prefill_matches_each_prefix_with_given_positions(record, device):
    _attributed(_chunks, record, device, GIVEN)


@pytest.mark.claim("MODEL-3", kinds=("model",))
def test_a_chunked_prefill_matches_each_prefix_with_own_positions(record, device):
    _attributed(_chunks, record, device, OWN)


# ------------------------------------------------------------------ MODEL-4 and MODEL-5


def _prompt_then_decode(model, ids, mask, prompt: int, regime, what):
    """The logits of a prompt of ``prompt`` columns, then of each later token decoded with the cache
    (positions ``cumsum(mask) − 1`` given, or the model's own), one per column but the last."""
    place = _regime(model, regime)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, cache = _forward(model, ids[:, :prompt], place(positions[:, :prompt]), mask[:, :prompt],
                             what=f"{REGIMES[regime]}, {what}: its prompt")
    if prompt >= ids.shape[1]:  # a model whose cache the harness cannot continue: the prompt alone
        return logits
    if regime == OWN:
        try:
            decoded = _generate(model, ids, mask, prompt, f"{REGIMES[regime]}, {what}: decoding")
            return torch.cat((logits[:, :-1], decoded), dim=1)
        except Excluded:  # no generate to decode with: forward calls with the mask, as generate would make
            pass
    steps = [logits]
    for j in range(prompt, ids.shape[1] - 1):
        step, cache = _forward(model, ids[:, j : j + 1], place(positions[:, j : j + 1]), mask[:, : j + 1], cache,
                               what=f"{REGIMES[regime]}, {what}: decoding column {j}")
        steps.append(step)
    return torch.cat(steps, dim=1)


def _continues(record, device) -> bool:
    """Whether the harness can continue the model's cache (else the relations that pad or batch
    judge their prompts alone, and MODEL-6 its one pass)."""
    return contract.model_not_applicable(record, "MODEL-2", device) is None


def _pad_token(fresh) -> int:
    """The token a row is padded with: the model's ``config.pad_token_id`` (RoBERTa counts its
    positions past its own pads), else 0."""
    pad = getattr(getattr(_inner(fresh.pristine), "config", None), "pad_token_id", None)
    return pad if isinstance(pad, int) and 0 <= pad < fresh.traits.vocab_size else 0


def _left_padded(rows, device, pad_token=0):
    """Rows of unequal lengths left-padded to the longest: ``(ids, mask, pads)``."""
    longest = max(row.shape[1] for row in rows)
    pads = [longest - row.shape[1] for row in rows]
    zeros = [torch.zeros(1, pad, dtype=torch.long, device=device) for pad in pads]
    ids = torch.cat([torch.cat((zero + pad_token, row), dim=1) for zero, row in zip(zeros, rows, strict=True)])
    mask = torch.cat([torch.cat((zero, torch.ones_like(row)), dim=1) for zero, row in zip(zeros, rows, strict=True)])
    return ids, mask, pads


def _in_part(errors: torch.Tensor, prompt: int) -> torch.Tensor:
    """``errors`` by column; while a probe of blame reruns a violation, only those of the part it was
    found in (the prompt's columns, or the decode steps'): one defect's blame is not another's."""
    part = _FOCUS.get("part")
    if part is None:
        return errors
    kept = errors.clone()
    kept[prompt:] = 0.0 if part == "prompt" else kept[prompt:]
    kept[:prompt] = 0.0 if part == "decode" else kept[:prompt]
    return kept


def _padding(record, device, regime):
    """The reference is the unpadded row alone, computed the same way (its prompt, then the same
    decode steps), so the relation sees the padding, not the cache (MODEL-2 judges that)."""
    fresh = Fresh(record, device)
    if not fresh.traits.takes_attention_mask:
        raise Excluded("the model takes no attention mask: no padding")
    _regime(fresh.pristine, regime)  # n/a before any call where the model cannot take this regime
    prompt = plan.padded_prompt(fresh.traits)
    steps = STEPS if _continues(record, device) else 0  # no cache to decode with: the prompt alone
    for pad in PADS:
        row = _ids(1, prompt - pad + STEPS, record, seed=10 + pad, device=device)
        alone = _prompt_then_decode(fresh(), row, torch.ones_like(row), prompt - pad + STEPS - steps, regime,
                                    "the row alone")
        bound = _bound(alone, fresh.pristine)
        zeros = torch.zeros(1, pad, dtype=torch.long, device=device)
        ids, mask = torch.cat((zeros + _pad_token(fresh), row), dim=1), torch.cat((zeros, torch.ones_like(row)), dim=1)
        padded = _prompt_then_decode(fresh(), ids, mask, prompt + STEPS - steps, regime,
                                     f"the row left-padded by {pad}")
        errors = _in_part((padded[0, pad:] - alone[0]).abs().amax(dim=-1), prompt - pad)
        worst = _first_over(errors, bound)
        when = "in the prompt" if worst < prompt - pad else f"at decode step {worst - (prompt - pad) + 1}"
        s.require_within(error=float(errors[worst]), bound=bound,
                         what=f"{REGIMES[regime]}, a row left-padded by {pad} gives other logits than alone, {when}",
                         pad=pad, regime=regime, part="prompt" if worst < prompt - pad else "decode")
    _require_teeth(fresh(), row, _positions(1, row.shape[1], device=device), bound, "left padding", regime,
                   twin=True)


@pytest.mark.claim("MODEL-4", kinds=("model",))
def test_a_left_padded_row_matches_the_row_alone_with_given_positions(record, device):
    _attributed(_padding, record, device, GIVEN)


@pytest.mark.claim("MODEL-4", kinds=("model",))
def test_a_left_padded_row_matches_the_row_alone_with_own_positions(record, device):
    _attributed(_padding, record, device, OWN)


def _batch(record, device, regime):
    """Rows of unequal lengths, left-padded to the longest (no padding where the model takes no
    mask: rows of one length), each compared with the same padded row alone."""
    fresh = Fresh(record, device)
    _regime(fresh.pristine, regime)  # n/a before any call where the model cannot take this regime
    lengths = plan.batch_lengths(fresh.traits)
    if not fresh.traits.takes_attention_mask:
        lengths = [lengths[0]] * len(lengths)
    rows = [_ids(1, n + STEPS, record, seed=20 + k, device=device) for k, n in enumerate(lengths)]
    ids, mask, pads = _left_padded(rows, device, _pad_token(fresh))
    prompt = ids.shape[1] - (STEPS if _continues(record, device) else 0)  # no cache: the prompt alone
    batch = _prompt_then_decode(fresh(), ids, mask, prompt, regime, f"a batch of {len(rows)} rows")
    bound = None
    for r, pad in enumerate(pads):
        alone = _prompt_then_decode(fresh(), ids[r : r + 1], mask[r : r + 1], prompt, regime, f"row {r} alone")
        bound = bound or _bound(alone, fresh.pristine)
        errors = _in_part((batch[r, pad:] - alone[0, pad:]).abs().amax(dim=-1), prompt - pad)
        worst = _first_over(errors, bound)
        when = "in the prompt" if worst + pad < prompt else f"at decode step {worst + pad - prompt + 1}"
        s.require_within(error=float(errors[worst]), bound=bound,
                         what=f"{REGIMES[regime]}, row {r} (left-padded by {pad}) of a batch of rows of lengths "
                              f"{[n + STEPS for n in lengths]} gives other logits than the same row alone, {when}",
                         row=r, regime=regime, part="prompt" if worst + pad < prompt else "decode")
    longest = max(rows, key=lambda row: row.shape[1])
    _require_teeth(fresh(), longest, _positions(1, longest.shape[1], device=device), bound, "a batch", regime,
                   twin=True)


@pytest.mark.claim("MODEL-5", kinds=("model",))
def test_batch_rows_are_independent_with_given_positions(record, device):
    _attributed(_batch, record, device, GIVEN)


@pytest.mark.claim("MODEL-5", kinds=("model",))
def test_batch_rows_are_independent_with_own_positions(record, device):
    _attributed(_batch, record, device, OWN)


# ------------------------------------------------------------------ MODEL-6


def _query_after_keys(model, ids, position):
    """The logits of one query at ``position`` after keys at 0 … SEQ − 1, in one pass."""
    positions = torch.cat((torch.arange(SEQ, device=ids.device), torch.tensor([position], device=ids.device)))
    positions = positions.expand(ids.shape[0], -1)
    return _windowed(model, ids, positions, positions[0], None, f"a query at {position}")[:, -1]


def _query_decoded_after_keys(model, ids, position):
    """The same query decoded: a prefill of the keys, then one step with the cache."""
    rows = ids.shape[0]
    _, cache = _forward(model, ids[:, :SEQ], _positions(rows, SEQ, device=ids.device), what="the keys' prefill")
    keys = torch.cat((torch.arange(SEQ, device=ids.device), torch.tensor([position], device=ids.device)))
    return _windowed(model, ids[:, SEQ:], torch.tensor([[position]], device=ids.device).expand(rows, 1), keys, cache,
                     f"a query decoded at {position}", cached=SEQ)[:, -1]


def _windowed(model, ids, positions, keys, cache, what, cached=0):
    """The call's logits where a sliding layer sees only the keys its window reaches by position,
    as in use (a query far from its keys sees none of them there; :func:`window_masks`): a model
    that takes no masks by layer type is called with its own."""
    masks = window_masks(_inner(model), positions[0], keys, cached)
    if masks is not None:
        try:
            return _call(model, ids, positions, masks, cache)[0]
        except Exception:  # noqa: BLE001 - no masks by layer type: the call as the model masks it
            pass
    return _forward(model, ids, positions, cache=cache, what=what)[0]


@pytest.mark.claim("MODEL-6", kinds=("model",), requires=lambda r: r.model.takes_position_ids)
def test_bf16_keeps_position_information_past_2048(record, device):
    """A query far from its keys turns by ``(m − n)·θ`` with ``m − n`` past 2048: there a θ rounded
    to bf16 or angles formed in bf16 move the logits by radians, where bf16's own rounding of each
    layer moves them as much as near the keys. (Shifting a whole window would not show it: a
    rounded θ keeps the window's relative geometry.) Each way is compared with the fp32 model on
    the same path, one pass or decoded, so a wrong cache path is MODEL-2's to blame. Every query
    runs on a fresh copy of the model, on :data:`BF16_ROWS` rows of tokens at once."""
    fresh = Fresh(record, device)
    ids = _ids(BF16_ROWS, SEQ + 1, record, seed=30, device=device)
    # p + 1 inside a table, and inside any absolute model's maximum: past it is MODEL-7's to judge
    limited = record.model.table_limited or (record.model.positions == "absolute" and record.model.max_position)
    cap = record.model.max_position - 2 if limited else None
    far = sorted({min(p, cap) if cap else p for p in FAR})
    reach = sliding_reach(_inner(fresh.pristine))
    if reach is not None:  # a query never attends a key a window or more back: none is farther
        if reach - SEQ <= PAST:
            raise Excluded(f"every attention layer slides a window of {reach} (config.sliding_window): no query "
                           f"attends a key more than {reach - 1} positions back, never past {PAST}")
        far = sorted({min(p, reach - 1) for p in far})
    rescale = record.model.rescales_at  # past it dynamic NTK forms its frequencies anew, in fp32
    if rescale is not None and BELOW_RESCALING <= rescale - 1 < min(far):
        far = [rescale - 1, *far]
    paths = {"in one pass": _query_after_keys, "decoded with the cache": _query_decoded_after_keys}
    if not _continues(record, device):  # a cache the harness cannot continue: the one pass alone
        del paths["decoded with the cache"]
    exact = {(path, p): query(fresh(), ids, p) for path, query in paths.items() for p in (*NEAR, *far)}
    width = next(iter(exact.values())).shape[-1]
    near = tuple(range(SEQ, SEQ + max(NEAR_LEAST, min(NEAR_MOST, -(-NEAR_SAMPLES // width)))))
    exact.update({(path, p): query(fresh(), ids, p) for path, query in paths.items() for p in near if p not in NEAR})
    autocast_device = "cuda" if str(device).startswith("cuda") else "cpu"

    def cast():
        return fresh().to(torch.bfloat16)

    def under_autocast(query):
        def run(model, ids, p):
            with torch.autocast(autocast_device, dtype=torch.bfloat16):
                return query(model, ids, p)
        return run

    ways = {**{f"model.to(torch.bfloat16), {path}": (cast, query, path) for path, query in paths.items()},
            **{f"bf16 autocast, {path}": (fresh, under_autocast(query), path) for path, query in paths.items()}}
    noises, lost, failed, held = {}, [], {}, {}
    chooses = _chooses(fresh, _query_after_keys, ids, NEAR[0])
    for how, (make, query, path) in ways.items():
        try:  # each row of tokens judged against its own noise: a loss on any row counts
            distance = {p: _row_errors(query(make(), ids, p), exact[path, p]) for p in (*near, *far)}
        except ClaimViolation as violation:  # a call that fails only this way: named, the others still judged
            error = violation.details.get("message", "")
            failed[how] = f"{_summary(violation)}" + (f" ({error})" if error else "")
            continue
        near_distance = {p: distance[p] for p in near}
        if chooses:  # a choice flipped near the keys is no rounding of the rotation: there, the fp32 choices
            for p in near:
                said = _with_choices_held(fresh, paths[path], make, query, ids, p, exact[path, p])
                near_distance[p] = torch.minimum(near_distance[p], said[0]) if said else near_distance[p]
        noise = noises[how] = torch.stack(list(near_distance.values())).amax(0).clamp_min(
            torch.finfo(torch.bfloat16).eps * float(exact[path, NEAR[0]].abs().max()))
        worst, evidence, restored, before = None, "", {}, {}
        ratios = sorted(((float(distance[p][r] / noise[r]), p, r) for p in far for r in range(len(noise))),
                        key=lambda t: -t[0] if t[0] == t[0] else -float("inf"))
        for ratio, p, r in ratios:
            if ratio <= DRIFT:
                break
            # the rotation's loss goes with its frequencies put back in fp32, or moves the position before alike;
            # a loss that does neither at one position is a spike of bf16's noise
            if p not in restored:
                restored[p] = _with_rotation_restored(fresh, make, query, ids, p, exact[path, p])
            if restored[p] is not None and restored[p][r] <= DRIFT * noise[r]:
                worst, evidence = (p, r), f"{restored[p][r]:.3g} with its rotary frequencies put back in fp32"
                break
            if p not in before:
                before[p] = _row_errors(query(make(), ids, p - 1), paths[path](fresh(), ids, p - 1))
            if not before[p][r] <= DRIFT * noise[r]:
                worst, evidence = (p, r), f"{before[p][r]:.3g} at {p - 1}"
                break
        if worst is not None:
            p, r = worst
            lost.append((how, f"a query at {p} is {distance[p][r]:.3g} from the fp32 model's logits, "
                              f"{distance[p][r] / noise[r]:.3g} times its distance near the keys ({evidence}"
                              f"{f'; row {r} of {len(noise)}' if len(noise) > 1 else ''})"))
            said = _with_choices_held(fresh, paths[path], make, query, ids, p, exact[path, p])
            held[how] = None if said is None else (float(said[0][r]), said[1], float(noise[r]))
            # a choice flipped: by bf16's noise, or by the rounded rotation (its fp32 frequencies, above, undo it)?
            if held[how] and held[how][0] <= DRIFT * noise[r] and restored.get(p) is not None \
                    and restored[p][r] <= DRIFT * noise[r]:
                held[how] = None
    flipped = {how: said for how, said in held.items() if said and said[0] <= DRIFT * said[2]}
    if lost and len(flipped) == len(lost):  # every loss gone with the fp32 model's choices held
        distance, modules, _ = next(iter(flipped.values()))
        chosen = ", ".join(modules[:3])
        s.not_positional(
            f"far from its keys at 0…{SEQ - 1}, under {'; '.join(how for how, _ in lost)}: {lost[0][1]}; with the "
            f"fp32 model's discrete choices held ({chosen}) it is {distance:.3g}, within "
            f"{DRIFT} times: a choice flipped, the rotation kept its precision",
            blame=f"the model's discrete choices ({chosen}) flipped under bf16, not its positions",
            **{how: said for how, said in lost})
    if lost:
        positional = [(how, said) for how, said in lost if how not in flipped]
        s.violated(f"far from its keys at 0…{SEQ - 1}, the rotation lost precision under "
                   f"{'; '.join(how for how, _ in positional)}: {positional[0][1]}"
                   + (f" (under {'; '.join(flipped)}: a discrete choice flipped, within bound with the fp32 "
                      "model's choices held)"
                      if flipped else ""),
                   **{how: said for how, said in lost}, **{f"{how} (failed)": said for how, said in failed.items()},
                   **{f"{how} (choices held)": f"{said[0]:.3g} with {', '.join(said[1][:3])} held"
                      for how, said in flipped.items()})
    if failed:
        how, said = next(iter(failed.items()))
        make, query, _ = ways[how]
        neutral = make()
        reached = attribution.neutralise_positions(_inner(neutral))
        try:  # the same call with the position code the identity: an error that persists is not the positions'
            query(neutral, ids, far[-1])
        except ClaimViolation as again:
            if reached:
                s.not_positional(f"under {how}: {said}", blame="the model under bf16, not its positions",
                                 way=how, **{f"{h} (failed)": d for h, d in failed.items()},
                                 **{"with the positions neutralised": f"{', '.join(reached)} made the identity, "
                                                                      f"the call still fails: {_summary(again)}"})
        tracked = make()
        try:  # where it raises: an error raised outside position code, at the query near the keys too
            query(tracked, ids, NEAR[0])
        except ClaimViolation as near:
            where = attribution.outside_position_code(_inner(tracked), attribution.raised_in(_inner(tracked), near),
                                                      near)
            if where:
                s.not_positional(f"under {how}: {said}", blame=f"the model under bf16 ({where}), not its positions",
                                 way=how, **{f"{h} (failed)": d for h, d in failed.items()},
                                 **{"where it raised": f"inside {where}, which is no position code, at the query "
                                                       f"near the keys ({NEAR[0]}) too"})
        s.violated(f"under {how}: {said}", way=how, **{f"{h} (failed)": d for h, d in failed.items()})
    moves = torch.stack([_row_errors(_query_after_keys(fresh(), ids, p + 1), exact["in one pass", p]) for p in far])
    moved = moves.amax(0)  # per row
    wide = wide_layers(_inner(fresh.pristine))
    if wide is not None and float(moved.max()) <= _bound(exact["in one pass", far[-1]], fresh.pristine):
        raise Excluded("with each sliding layer inside its window, as in use, a query far from its keys one "
                       f"position further moves nothing: the layers that see that far ({', '.join(wide)}) read no "
                       "positions")
    for how, noise in noises.items():
        if not bool((moved >= 2 * DRIFT * noise).any()):  # no row of tokens where a position one off shows
            r = int((moved / noise).nan_to_num(0).argmax())
            none = "" if attribution.position_code(_inner(fresh.pristine)) else (
                ": the model has no rotary module, position table or relative bias (NoPE, or positions of its own)")
            s.undecided(f"no teeth for {how}: a query one position further, far from its keys, moves the logits by "
                        f"{moved[r]:.2e}, under {2 * DRIFT} times bf16's own distance ({noise[r]:.2e}){none}")


def _chooses(fresh, query, ids, position) -> bool:
    """Whether the model makes discrete choices (a router's top-k) on ``query`` at ``position``."""
    choices = attribution.Selections().record(_inner(model := fresh()))
    try:
        query(model, ids, position)
    except Exception:  # noqa: BLE001 - a model that cannot answer so shows no choices
        return False
    finally:
        choices.remove()
    return bool(choices.recorded)


def _with_choices_held(fresh, exact_query, make, query, ids, position, exact):
    """The way's distance from the fp32 logits at ``position`` with the fp32 model's discrete
    choices (its routers' top-k) replayed into it, and the modules that choose; ``None`` for a
    model that chooses nothing."""
    reference = fresh()
    choices = attribution.Selections().record(_inner(reference))
    exact_query(reference, ids, position)
    choices.remove()
    if not choices.recorded:
        return None
    model = make()
    choices.replay(_inner(model))
    try:
        return _row_errors(query(model, ids, position), exact), choices.modules()
    except Exception:  # noqa: BLE001 - a model the replay does not fit: no evidence, the loss stands as measured
        return None
    finally:
        choices.remove()


def _with_rotation_restored(fresh, make, query, ids, position, exact):
    """The way's distance from the fp32 logits at ``position`` with every rotary frequency buffer
    (``inv_freq``) put back as the fp32 model holds it, the rest of the way (routers included) left
    to itself; ``None`` for a model without such buffers, or one the restored buffers do not fit."""
    frequencies = {name: buffer for name, buffer in _inner(fresh()).named_buffers() if name.endswith("inv_freq")}
    if not frequencies:
        return None
    model = make()
    inner = _inner(model)
    for name, buffer in frequencies.items():
        owner, _, leaf = name.rpartition(".")
        (inner.get_submodule(owner) if owner else inner)._buffers[leaf] = buffer.clone()
    try:
        return _row_errors(query(model, ids, position), exact)
    except Exception:  # noqa: BLE001 - a way the fp32 buffers do not fit: no evidence either way
        return None


# ------------------------------------------------------------------ MODEL-7


@pytest.mark.claim("MODEL-7", kinds=("model",), requires=lambda r: r.model.max_position is not None)
def test_past_the_maximum_length(record, device):
    """Relative positions: windows across and past the maximum give the window at 0's logits (a
    table clamped at its end, or a scaling factor dropped past the maximum, does not). A table: an
    error that names the limit. A model without position ids: a sequence past the maximum. A window
    that still differs with the position code neutralised says where positions reach instead."""
    _where_positions_reach(_past_the_maximum, record, device, "the window")


def _past_the_maximum(record, device, regime=GIVEN):
    fresh = Fresh(record, device)
    maximum = record.model.max_position
    if not fresh.traits.takes_position_ids:
        ids = _ids(1, maximum + 8, record, seed=40, device=device)
        where, calls = f"{maximum + 8} tokens", [(ids, None)]
    else:
        ids = _ids(1, SEQ, record, seed=40, device=device)
        starts = plan.past_windows(fresh.traits)
        calls = [(ids, _positions(1, SEQ, start, device)) for start in starts]
        where = " and ".join(f"positions {start}…{start + SEQ - 1}" for start in starts)
    answers = []
    for call_ids, positions in calls:
        try:
            logits, _ = _call(fresh(), call_ids, positions)
        except Excluded:
            raise
        except Exception as error:  # noqa: BLE001 - an error is the documented behaviour of a table
            if any(w in str(error).lower() for w in s.LIMIT_WORDS):
                return  # a clear error: it names the limit
            s.violated(f"{where}, past the maximum {maximum}: {type(error).__name__} that names no limit: "
                       f"{str(error)[:120]}", max_position=maximum)
        answers.append((positions, logits))
    if record.model.table_limited:
        s.violated(f"{where} cross the table of {maximum} rows and the model answers instead of raising: a "
                   "clamped or wrapped table", max_position=maximum)
    for positions, logits in answers:
        if not bool(torch.isfinite(logits).all()):
            s.violated(f"{where}, past the maximum {maximum}: the logits are not finite", max_position=maximum)
    if not fresh.traits.takes_position_ids or fresh.traits.positions != "relative":
        return
    inside, _ = _forward(fresh(), ids, _positions(1, SEQ, device=device), what="the window at 0")
    allowances = [_angle_allowance(fresh, ids, positions, base=_positions(1, SEQ, device=device))
                  for positions, _ in answers]
    allowance, measured = max(a for a, _ in allowances), all(m for _, m in allowances)
    bound = _bound(inside, fresh.pristine, reach=0 if measured else int(max(int(p.max()) for p, _ in answers)))
    for positions, logits in answers:
        start = int(positions[0, 0])
        s.require_within(error=_error(logits, inside), bound=bound + allowance,
                         what=f"past the maximum {maximum}, the window at {start}…{start + SEQ - 1} gives other "
                              "logits than the window at 0 (relative positions extrapolate with the same geometry)",
                         start=start, max_position=maximum)
    for positions, _ in answers:
        own, angles = _teeth_terms(inside, fresh, bound, allowance)
        _require_teeth(fresh(), ids, positions, own, f"the window at {int(positions[0, 0])}", allowance=angles)


# ------------------------------------------------------------------ MODEL-8


def _packing(record, device, regime):
    """Documents A, B, A packed in one row: each document's logits as it gives them alone, and the
    two copies of A alike. transformers takes the documents as position ids that restart (no mask,
    no cache); a model of ``packing="document_ids"`` takes ``document_ids`` too."""
    fresh = Fresh(record, device)
    if fresh.traits.packing == "none":
        raise Excluded("the model declares no way to pack documents")
    place = _regime(fresh.pristine, regime, packs=True)
    recurrent = attribution.recurrent_layers(_inner(fresh.pristine))
    if fresh.traits.packing == "positions" and recurrent:
        raise Excluded(f"the model keeps a state along the sequence ({recurrent.describe()}) and tells packed "
                       "documents only by position ids that restart, which keep its attention apart, not its state")
    lengths = plan.documents(fresh.traits)
    first, second = (_ids(1, n, record, seed=50 + k, device=device) for k, n in enumerate(lengths[:2]))
    documents = [first, second, first.clone()]
    ids = torch.cat(documents, dim=1)
    restarting = torch.cat([_positions(1, d.shape[1], device=device) for d in documents], dim=1)
    if regime == OWN and fresh.traits.packing == "positions":
        raise Excluded("the model tells documents by position ids that restart: they are given, never its own")
    which = torch.cat([torch.full((1, d.shape[1]), k, device=device) for k, d in enumerate(documents)], dim=1)
    packed, _ = _forward(fresh(), ids, place(restarting),
                         what=f"{REGIMES[regime]}, documents of {list(lengths)} packed in one row", packed=True,
                         documents=which if fresh.traits.packing == "document_ids" else None)
    start, alone = 0, []
    for k, document in enumerate(documents):
        logits, _ = _forward(fresh(), document, place(_positions(1, document.shape[1], device=device)),
                             what=f"{REGIMES[regime]}, document {k} alone")
        alone.append((start, logits))
        start += document.shape[1]
    bound = _bound(torch.cat([logits for _, logits in alone], dim=1), fresh.pristine)
    for k, (begin, logits) in enumerate(alone):
        errors = (packed[0, begin : begin + logits.shape[1]] - logits[0]).abs().amax(dim=-1)
        worst = _first_over(errors, bound)
        s.require_within(error=float(errors[worst]), bound=bound,
                         what=f"{REGIMES[regime]}, document {k} packed at {begin} (documents of {list(lengths)}) "
                              f"gives other logits than alone, from its token {worst}", document=k, regime=regime)
    copies = _error(packed[0, : lengths[0]], packed[0, -lengths[2] :])
    s.require_within(error=copies, bound=bound,
                     what=f"{REGIMES[regime]}, two identical documents in one pack give different logits",
                     regime=regime)
    if _PROBE is None and regime == GIVEN and fresh.traits.packing == "positions":
        # teeth: the restart itself, where the later documents read it (their rotation, or a mask built from it)
        continuing, _ = _forward(fresh(), ids, _positions(1, ids.shape[1], device=device),
                                 what=f"{REGIMES[regime]}, the same row with positions that do not restart",
                                 packed=True)
        if _error(continuing[0, lengths[0]:], packed[0, lengths[0]:]) >= TEETH * bound:
            return
    _require_teeth(fresh(), first, _positions(1, first.shape[1], device=device), bound, "packing", regime)


def _packing_attributed(record, device, regime):
    """Documents told by position ids that restart: a leak is the positions misread, so the
    positions are blamed, unless the model's mask never reads its position ids (then the leak is
    the mask's). Documents told by ids: blamed as the other relations are."""
    if record.model.packing == "document_ids":
        _attributed(_packing, record, device, regime)
        return
    try:
        _packing(record, device, regime)
    except NotPositional:
        raise
    except ClaimViolation as violation:
        both = violation.details.get("document") == 0 and _both_ways(Fresh(record, device), record, device)
        if both:  # nothing precedes document 0, at the same positions packed and alone
            details = {k: v for k, v in violation.details.items() if k != "reproducer"}
            s.not_positional(f"{_summary(violation)} (document 0 has the same positions packed and alone, and "
                             "nothing before it)", blame="the model's attention mask, not its positions",
                             **details, **{"the model's mask": f"{both}; packed, its mask attends otherwise than "
                                                               "alone"})
        if _mask_reads_positions(record, device):
            raise
        details = {k: v for k, v in violation.details.items() if k != "reproducer"}
        s.not_positional(f"{_summary(violation)} (the attention mask never reads the position ids, "
                         "given as (batch, seq))",
                         blame="the model's attention mask, not its positions",
                         **details, **{"the model's mask": "transformers looks for packed documents only when "
                                                           "it builds a mask from none and the position ids; this "
                                                           "model's call never does (it hands its mask no position "
                                                           "ids, or a mask of its own: Idefics fills one of ones), "
                                                           "so the documents attend each other"})


def _mask_reads_positions(record, device) -> bool:
    """Whether the model's attention mask reads its position ids (asked only once a packed leak is
    found): transformers' models are watched through one call; any other model is taken at its word."""
    from posenc.harness.whole_models.models import is_transformers_model, reads_packed_positions

    model = _inner(Fresh(record, device).pristine)
    return not is_transformers_model(model) or reads_packed_positions(model)


@pytest.mark.claim("MODEL-8", kinds=("model",))
def test_packed_documents_match_each_document_alone_with_given_positions(record, device):
    _packing_attributed(record, device, GIVEN)


@pytest.mark.claim("MODEL-8", kinds=("model",))
def test_packed_documents_match_each_document_alone_with_own_positions(record, device):
    _packing_attributed(record, device, OWN)
