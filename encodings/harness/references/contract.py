"""Cells that cannot be judged: an encoder that breaks the calling contract, or that hung, or
whose output depends on its calls before, or a measurement too noisy to decide.

Before a spec of any catalogue claim runs, the encoder is called once at the specs'
configuration (cached per encoder, dtype and device). If its output is not a tensor of the
input's shape, every spec would fail on shapes, not on the claim: the cell is
*blocked by the contract*, and the ``contract`` row says why. So is an answer with NaN or inf
to finite input: garbage is evidence for no claim (and two NaNs are not two different answers).
After a spec times out, the encoder's remaining specs are blocked too, so the run moves on. A
performance spec whose confidence interval contains its bar raises :class:`Undecided` instead of
a verdict.

The history check (:func:`history_problem`) calls a fresh encoder three times on one input, in
its most precise dtype: an encoder that is a function of its inputs answers the same each time. One that does not fails
ROPE-9 (its own spec makes the same call), once; a violation any other spec of it finds may come
from the calls that spec repeats, so it reads ``depends on ROPE-9`` (:class:`DependsOnHistory`),
never as a failure of a claim that may hold on a fresh module. Only finite answers that differ
count: entries non-finite in every call are the contract's to report.

A whole model (``kind="model"``) has a contract of its own (:func:`model_problem`, probed once per
model and device): a call on two rows of tokens answers logits of shape (rows, tokens, vocabulary)
and a cache with which one token more answers (rows, 1, vocabulary). Logits of another shape block
every relation of the model (the ``contract`` row says why). A model that returns no cache (a bare
tensor, or None) keeps a convention the harness cannot continue: the relations that continue a
sequence (:data:`CACHED_RELATIONS`) are ``n/a`` on it, with that reason (:func:`model_not_applicable`);
those that pad, batch or query far (MODEL-4 … MODEL-6) judge its prompts and its one pass alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ..catalogue.claims import HISTORY_CLAIM
from .protocols import build_subject
from ..catalogue.records import SPEC_CONFIG, BuildConfig, EncoderRecord
from ..catalogue.states import State
from .tensors import randn


class Blocked(pytest.skip.Exception):
    """A spec not run because its encoder cannot be judged (a skip, reported as ``blocked``)."""


class SpecTimeout(BaseException):
    """A spec ran past its timeout. A ``BaseException``, so that no test framework inside the
    spec (Hypothesis retries and shrinks on ordinary failures) can catch it and run on."""


class Excluded(pytest.skip.Exception):
    """A spec that needs a configuration the record says its encoder does not support (a head_dim,
    say): a skip with the reason, counted as run, never a crash."""


class Undecided(pytest.skip.Exception):
    """A measured claim whose confidence interval straddles its bar (a skip, reported as
    ``undecided``): noise never turns a run red, in either direction."""


class DependsOnHistory(pytest.skip.Exception):
    """A violation found on an encoder whose output depends on its earlier calls (ROPE-9 fails):
    not judged, since the spec's repeated calls alone may explain it (``depends on ROPE-9``)."""


_PROBES: dict[tuple[str, str, str], str | None] = {}
_HISTORIES: dict[tuple[str, str], str | None] = {}
#: Calls of one input the history check makes on a fresh encoder.
HISTORY_CALLS = 3


def contract_problem(record: EncoderRecord, dtype: torch.dtype | None, device: str) -> str | None:
    """Why ``record`` breaks the shape contract at the specs' configuration, or None."""
    dtype = dtype or torch.float32
    key = (record.name, str(dtype), device)
    if key not in _PROBES:
        _PROBES[key] = _probe(record, dtype, device)
    return _PROBES[key]


def _fresh_subject_and_input(record: EncoderRecord, dtype: torch.dtype, device: str):
    """A fresh module at the specs' configuration and one input for it (batch 2, 5 positions)."""
    module = build_subject(record, **{**SPEC_CONFIG.__dict__, "dtype": dtype, "device": device})
    return module, randn(record.input_shape(2, 5, SPEC_CONFIG), seed=0, dtype=dtype, device=device)


def _probe(record: EncoderRecord, dtype: torch.dtype, device: str) -> str | None:
    try:
        module, x = _fresh_subject_and_input(record, dtype, device)
        with torch.no_grad():
            y = module(x)
    except Exception:  # noqa: BLE001 - a crash is the specs' to report, cell by cell
        return None
    if not isinstance(y, torch.Tensor):
        return f"{record.name} returns {type(y).__name__}, not a tensor"
    if tuple(y.shape) != tuple(x.shape):
        return f"{record.name} maps shape {tuple(x.shape)} to {tuple(y.shape)}; the output must keep the input's shape"
    return non_finite_problem(record.name, y)


def non_finite_problem(name: str, y: torch.Tensor) -> str | None:
    """Why ``y``, an answer to finite input, is not evidence for any claim: its non-finite entries."""
    finite = torch.isfinite(y) if y.is_floating_point() or y.is_complex() else torch.ones_like(y, dtype=torch.bool)
    bad = int((~finite).sum())
    if not bad:
        return None
    nan = int(torch.isnan(y).sum())
    return (f"{name} answers finite input with non-finite values ({bad} of {y.numel()} entries: {nan} NaN, "
            f"{bad - nan} inf); the contract's finiteness fails first, and no other claim is judged on them")


def history_problem(record: EncoderRecord, device: str) -> str | None:
    """How a fresh ``record`` answers one input differently on repeated calls, or None (also for an
    encoder that ROPE-9 is not about, or that cannot be called: the specs report those). Checked
    once per encoder, in its most precise dtype, where the tolerance is finest."""
    key = (record.name, device)
    if key not in _HISTORIES:
        dtype = next((d for d in (torch.float64, torch.float32) if d in record.limits.dtypes), record.limits.dtypes[0])
        _HISTORIES[key] = _history(record, dtype, device) if record.declared(HISTORY_CLAIM).status != State.NA else None
    return _HISTORIES[key]


def _history(record: EncoderRecord, dtype: torch.dtype, device: str) -> str | None:
    try:
        module, x = _fresh_subject_and_input(record, dtype, device)
        with torch.no_grad():  # a copy per call: an encoder that edits its input in place is the contract's
            answers = [module(x.clone()).to(torch.float64) for _ in range(HISTORY_CALLS)]
    except Exception:  # noqa: BLE001 - a crash is the specs' to report
        return None
    for call, answer in enumerate(answers[1:], start=2):
        changed = _changed(answers[0], answer, record, dtype)
        if changed:
            return (f"call {call} of one input on a fresh {record.name} {changed} call 1's: its output depends "
                    "on the calls before")
    return _later_positions_history(record, dtype, device, x)


def _changed(reference: torch.Tensor, answer: torch.Tensor, record: EncoderRecord, dtype: torch.dtype) -> str | None:
    """How ``answer`` differs from ``reference`` past the record's bound in ``dtype`` (finite where
    it was not, or the other way; or by more than the bound), or None; None too where
    ``reference`` has no finite entry (the contract's finiteness reports it)."""
    finite = torch.isfinite(reference)
    if not bool(finite.any()):
        return None
    flipped = torch.isfinite(answer) != finite
    if bool(flipped.any()):
        return f"is finite where it was not, or the other way, at {int(flipped.sum())} entries of"
    bound = record.tolerance(dtype).bound(float(reference[finite].abs().max()))
    error = float((answer - reference)[finite].abs().max())
    return f"differs by {error:.3g} (bound {bound:.3g}) from" if error > bound else None


#: The history check's second probe: positions ``LATER …`` on a module called at ``0 …`` before.
LATER = 7


def _later_positions_history(record: EncoderRecord, dtype: torch.dtype, device: str, x: torch.Tensor) -> str | None:
    """How a module called at positions 0 … n−1 answers the same length at LATER … LATER+n−1
    differently from a fresh one (state keyed by length, say), or None; None too where the encoder
    takes no explicit positions."""
    n = x.shape[1]
    first, later = (torch.arange(start, start + n, device=device) for start in (0, LATER))
    try:
        used, _ = _fresh_subject_and_input(record, dtype, device)
        fresh, _ = _fresh_subject_and_input(record, dtype, device)
        with torch.no_grad():
            used(x.clone(), first)
            after, alone = (m(x.clone(), later).to(torch.float64) for m in (used, fresh))
    except (Exception, pytest.skip.Exception):  # noqa: BLE001 - no explicit positions (an encoder's wrapper
        return None                               # skips), or a crash: the specs report those
    changed = _changed(alone, after, record, dtype)
    return (f"a call at positions {LATER}…{LATER + n - 1} on a {record.name} called at 0…{n - 1} before {changed} "
            "a fresh one's: its output depends on the calls before") if changed else None


#: The model relations that continue a sequence with the model's cache (decoding, chunks:
#: ``specs/test_models.py``); the others judge a model without one on its prompts alone.
CACHED_RELATIONS = frozenset({"MODEL-2", "MODEL-3"})
#: How the contract probe names a cache convention of the model's own.
OWN_CONVENTION = "a convention of its own"
#: The model probe's rows and tokens (the model relations' window, ``model_plan.SEQ``).
MODEL_PROBE_ROWS, MODEL_PROBE_TOKENS = 2, 16
_MODEL_PROBES: dict[tuple[str, str], tuple[str | None, str | None]] = {}


def model_problem(record: EncoderRecord, device: str) -> str | None:
    """Why no relation can be judged on the whole model ``record``: logits of the wrong shape; None
    where they can, or where the model cannot be called (the specs report that). Probed once per
    model and device."""
    return _model_probe(record, device)[0]


def continues_by_a_convention_of_its_own(record: EncoderRecord, device: str) -> bool:
    """Whether the model continues its cache in a way the harness cannot call (CpmAnt, XLM take
    the full ids each call): its contract's step is not judged."""
    return OWN_CONVENTION in str(_model_probe(record, device)[1])


def model_not_applicable(record: EncoderRecord, claim: str, device: str) -> str | None:
    """Why ``claim`` does not apply to the model ``record`` as it is called: it returns no cache, and
    ``claim`` continues a sequence (:data:`CACHED_RELATIONS`); None where it applies."""
    shape, cache = _model_probe(record, device)
    return cache if claim in CACHED_RELATIONS and not shape else None


def _model_probe(record: EncoderRecord, device: str) -> tuple[str | None, str | None]:
    key = (record.name, device)
    if key not in _MODEL_PROBES:
        _MODEL_PROBES[key] = _probe_model(record, device)
    return _MODEL_PROBES[key]


def _unsteady(name: str, twin, logits: torch.Tensor, ids: torch.Tensor, inputs: dict) -> str | None:
    """Why no relation can judge logits that are not finite, or that the same call on ``twin`` (the
    model built again from the same seed) does not give again: a build that leaves weights
    uninitialised (Qwen3-Omni's talker experts), or a call that draws at random (DiffusionGemma
    denoises a random canvas); else None."""
    if not bool(torch.isfinite(logits).all()):
        return (f"{name} returns logits that are not finite for input ids {tuple(ids.shape)} (weights its build left "
                "uninitialised?): no relation can judge them")
    try:
        again, _ = twin(ids, **inputs)
    except Exception:  # noqa: BLE001 - a second call it cannot make says nothing here: the specs judge it
        return None
    moved = float((again.double() - logits.double()).abs().max())
    if moved > 1e-4 * max(1.0, float(logits.abs().max())):
        return (f"{name} answers the same call with other logits on a second build from the same seed ({moved:.2e} "
                "apart): its build or its call draws at random (weights left uninitialised, a random input of its "
                "own), and no relation can tell a position's effect from a draw's")
    return None


def width_hint(logits: torch.Tensor, ids: torch.Tensor) -> str:
    """How to declare logits one per token whose width is not the vocabulary's ("" for another shape)."""
    if tuple(logits.shape[:-1]) != tuple(ids.shape):
        return ""
    return ("; a head of another width than the vocabulary (a speech model's stop column) is declared by "
            "MODEL_TRAITS = {'logits_width': ...}")


def _logits_shape_problem(name: str, logits, ids: torch.Tensor, vocab: int, call: str) -> str | None:
    expected = f"({', '.join(map(str, ids.shape))}, vocab={vocab})"
    if not isinstance(logits, torch.Tensor):
        return f"{name} returns {type(logits).__name__} as its logits for {call}; expected a tensor {expected}"
    if tuple(logits.shape) != (*ids.shape, vocab):
        return (f"{name} returns logits of shape {tuple(logits.shape)} for {call}; expected {expected}"
                f"{width_hint(logits, ids)}")
    return None


def error_text(error: BaseException) -> str:
    """An error's text, or, where it has none (a bare ``assert``), where it was raised: its file,
    line, function and source."""
    import linecache
    import traceback

    if str(error).strip():
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    source = (last.line or linecache.getline(last.filename, last.lineno)).strip()
    return f"no message; raised at {Path(last.filename).name}:{last.lineno} ({last.name}): {source}"


def _one_line(error: BaseException) -> str:
    """An error's first line of text (or where it was raised), cut to 160 characters."""
    line = (error_text(error).splitlines() or [""])[0]
    return line if len(line) <= 160 else line[:159] + "…"


def _continues_with_full_ids(model, ids, given, cache_from) -> bool:
    """Whether a library model whose one-token step raised answers the full ids with a fresh
    prefix's cache (the convention of XLM and CpmAnt: it cuts the new tokens itself)."""
    if not getattr(model, "continues_by_its_own_convention", False):
        return False
    try:
        rows, length = ids.shape
        logits, _ = model(ids, **given(torch.arange(length, device=ids.device).expand(rows, length), 0),
                          cache=cache_from())
    except Exception:  # noqa: BLE001 - it does not: the step's error is the specs' to report
        return False
    return isinstance(logits, torch.Tensor) and bool(torch.isfinite(logits).all())


def _probe_model(record: EncoderRecord, device: str) -> tuple[str | None, str | None]:
    """(a shape problem, a cache problem) of a fresh ``record``, built in float32 as the model
    relations build it: one call on :data:`MODEL_PROBE_ROWS` rows of :data:`MODEL_PROBE_TOKENS`
    tokens, then one token more with the cache it returned."""
    traits, rows, n = record.model, MODEL_PROBE_ROWS, MODEL_PROBE_TOKENS
    vocab = traits.vocab_size

    def given(positions: torch.Tensor, held: int) -> dict:
        mask = torch.ones(rows, held + positions.shape[1], dtype=torch.long, device=device)
        return {"position_ids": positions.contiguous() if traits.takes_position_ids else None,  # Kosmos-2 views them
                "attention_mask": mask if traits.takes_attention_mask else None}

    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            config = BuildConfig(**{**SPEC_CONFIG.__dict__, "dtype": torch.float32, "device": device})
            model = record.build(config).to(device)
            ids = torch.randint(3, vocab, (rows, n + 1)).to(device)
            torch.manual_seed(0)
            twin = record.build(config).to(device)  # built again alike, the same call must give the same logits
            kept = ids[:, :n].clone()  # a model may edit its inputs in place
            try:
                logits, cache = model(ids[:, :n], **given(torch.arange(n, device=device).expand(rows, n), 0))
            except Exception as error:  # noqa: BLE001 - no call can be made: every relation is blocked by it
                both = encoder_decoder(model, ids[:, :n])
                if both:
                    return f"{record.name} cannot be called with input ids alone: {both}", None
                return (f"{record.name} cannot be called: input ids {(rows, n)} raised {type(error).__name__} "
                        f"({_one_line(error)})"), None
            problem = _logits_shape_problem(record.name, logits, ids[:, :n], traits.logits_width or vocab,
                                            f"input ids {(rows, n)}") or _unsteady(
                record.name, twin, logits, kept, given(torch.arange(n, device=device).expand(rows, n), 0))
            if problem:
                return problem, None
            if cache is None:
                return None, (f"{record.name} returns {model.missing_cache()}: a relation that continues a sequence "
                              "has no cache to continue it with")
            try:
                step, _ = model(ids[:, n:], **given(torch.full((rows, 1), n, device=device), n), cache=cache)
            except Exception as error:  # noqa: BLE001 - a library model may take the full ids each call (XLM)
                where = _one_line(error)
                own = _continues_with_full_ids(model, ids, given, cache_from=lambda: model(
                    ids[:, :n], **given(torch.arange(n, device=device).expand(rows, n), 0))[1])
                if not own:
                    raise
                return None, (f"{record.name}: one token more with its cache raised {type(error).__name__} "
                              f"({where}), while the full ids with its cache answer: it continues a "
                              f"sequence by {OWN_CONVENTION}")
            problem = _logits_shape_problem(record.name, step, ids[:, n:], traits.logits_width or vocab,
                                            f"one token more with its cache, input ids {(rows, 1)}")
            if problem and getattr(model, "continues_by_its_own_convention", False):
                # a library model that continues its cache another way (CpmAnt takes the full ids),
                # unless one row's step has the right shape: then its batched step is wrong (RWKV's)
                one = {k: None if v is None else v[:1] for k, v in given(torch.arange(n, device=device).expand(
                    rows, n), 0).items()}
                _, one_cache = model(ids[:1, :n], **one)
                one_step, _ = model(ids[:1, n:], **{k: None if v is None else v[:1] for k, v in given(
                    torch.full((rows, 1), n, device=device), n).items()}, cache=one_cache)
                if isinstance(one_step, torch.Tensor) and tuple(one_step.shape) == (1, 1, vocab):
                    return None, None  # the specs report the batched step's shape
                return None, f"{problem}: it continues a sequence by {OWN_CONVENTION}"
            return problem, None
    except Exception:  # noqa: BLE001 - a crash is the specs' to report, cell by cell
        return None, None


def encoder_decoder(subject, ids: torch.Tensor | None = None) -> str | None:
    """Why a model in an adapter (or bare) is no causal LM the model relations can call: an
    encoder-decoder (``config.is_encoder_decoder`` and an encoder of its own; a decoder taken out of
    one shares the flag, not the encoder), with what its forward does given ``ids`` alone."""
    inner = getattr(subject, "model", subject)
    if not getattr(getattr(inner, "config", None), "is_encoder_decoder", False) \
            or not any(name.rsplit(".", 1)[-1] == "encoder" for name, _ in inner.named_modules()):
        return None
    import inspect

    try:
        takes = [p for p in inspect.signature(inner.forward).parameters if p not in ("self", "kwargs")][:3]
    except (TypeError, ValueError):
        takes = []
    answer = ""
    if ids is not None:
        try:
            with torch.no_grad():
                out = inner(input_ids=ids) if "input_ids" in takes else inner(ids)
            logits = getattr(out, "logits", None)
            answer = (f"; given input ids {tuple(ids.shape)} alone it answers logits {tuple(logits.shape)}, its "
                      "decoder's for a start token of its own" if logits is not None
                      else f"; given input ids {tuple(ids.shape)} alone it answers no logits ({type(out).__name__})")
        except Exception as error:  # noqa: BLE001 - what it raises is the reason shown
            answer = f"; given input ids {tuple(ids.shape)} alone it raises {type(error).__name__} ({_one_line(error)})"
    return (f"{type(inner).__name__} is an encoder-decoder (config.is_encoder_decoder), whose forward takes "
            f"{', '.join(takes) or 'its own inputs'}{answer}; --model judges a causal LM: hand it the decoder "
            "under a fixed source")
