"""The M-RoPE inside a vision-language model: relations of its logits when the model builds its own
position ids from images, videos, its cache and its ``rope_deltas`` (the harness's claims,
``specs/claims.md``, VLM; each extends the claim it names). ``P`` is the paper's ids for a row
(:func:`~posenc.encoders.mrope_positions.mrope_positions`: text the same id on every axis, a
picture ``s + (t, i, j)``, text after it from its largest id plus one; Qwen2.5-VL's time in seconds).

* VLM-1 (from MROPE-3, Qwen2-VL §2.1): text-only rows give the same logits with the model's own
  ids, with 1D ids ``(batch, seq)`` and with equal ids on three axes, in the prompt and decoding
  (``generate``, and a forward a token with the cache);
* VLM-2 (from MROPE-4): ``logits(P + c) = logits(P)`` for rows with pictures, c = 1, 1000 and up to
  just below the model's maximum (the sizes users run);
* VLM-3 (Qwen2-VL §2.1, Qwen2.5-VL §2.1): the model's own ids are ``P``: a prompt of rows with
  pictures of unequal grids (and a video where the model declares its time rule) gives the
  logits of ``P`` given, and decoding after it (the model's ``generate``) continues each row from
  its own largest id plus one; again with a left-padded row with a picture beside them;
* VLM-4 (mlx-vlm #1095): a batch mixing a row with a picture and a text-only row (of its length, or
  shorter and left-padded with its mask) gives each row's logits alone, in the prompt and decoding
  (``generate``, and a forward a token with the cache, without the mask where no row is padded
  and with it);
* VLM-5 (transformers #44873): after a ``generate`` on a batch of two, a forward on a batch of
  four with pictures (one row left-padded), and one on a single text row, give the logits of a fresh model (nothing kept
  from the earlier call; a crash violates it);
* VLM-6 (vLLM #10403): a prefill in chunks gives each chunk the logits of a fresh pass on the
  prefix that ends with it: pictures arriving after a text chunk, second pictures after a cache
  that holds the first (a second turn), text chunks after them.

Every relation runs on a copy of the model as built (``Fresh``), and counts only where it could
fail: a given id one off (the last token's on every axis, and a picture's height) must move the
logits by ``TEETH`` tolerances, else the cell is ``undecided``. Tolerances as in the model relations.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from posenc.encoders.mrope_positions import Text, Vision, mrope_positions
from posenc.harness.references.contract import Excluded
from posenc.harness.whole_models.vision_models import Pad
from specs import support as s
from specs import test_models as models

VLM = dict(kinds=("model",), requires=lambda r: r.model.vision)
#: Two rows with images of unequal grids (deltas −3 and −2), and a text-only row, 13 tokens each.
IMAGE_A = (Text(3), Vision(1, 2, 3), Text(4))
IMAGE_B = (Text(5), Vision(1, 2, 2), Text(4))
TEXT = (Text(13),)
#: A row with a picture left-padded to the others' length (batched generation of unequal prompts).
PADDED_IMAGE = (Pad(2), Text(2), Vision(1, 2, 2), Text(5))
#: A video whose time runs past its height and width: 4 temporal tokens 1.5 s apart.
VIDEO = (Text(2), Vision(4, 1, 2, seconds=1.5), Text(3))
STEPS = 3  # tokens decoded after a prompt
SHIFTS = (1, 1000)


def _subject(fresh):
    model = fresh()
    if not hasattr(model, "prompt"):
        raise Excluded("not run as a vision-language model with M-RoPE ids (no vision adapter)")
    return model


def _rows(record, *rows):
    """``rows``, with the video row where the model declares how its video time runs."""
    return [*rows, VIDEO] if record.model.video_time else list(rows)


def _prompted(record, device, seed):
    """A fresh model, its adapter, and the rows with pictures (:func:`_rows`) as a prompt."""
    fresh = models.Fresh(record, device)
    model = _subject(fresh)
    rows = _rows(record, IMAGE_A, IMAGE_B)
    return fresh, model, rows, model.prompt(rows, seed=seed)


def _paper(model, record, rows, device) -> torch.Tensor:
    """The paper's ids of ``rows``, ``(3, batch, n)`` (0 at a row's left pads)."""
    time = record.model.video_time or "frames"

    def ids(row):
        pads = sum(s.length for s in row if isinstance(s, Pad))
        found, _ = mrope_positions([s for s in row if not isinstance(s, Pad)], time, model.ids_per_second)
        return torch.cat((torch.zeros(3, pads, dtype=torch.long), found), dim=1)
    return torch.stack([ids(row) for row in rows], dim=1).to(device)


def _extended(model, prompt, seed=7):
    """``prompt`` with ``STEPS`` text tokens after every row (the same pictures)."""
    tail = model.prompt([(Text(STEPS),)] * prompt.ids.shape[0], seed)
    rows = tuple((*row, Text(STEPS)) for row in prompt.rows)
    return type(prompt)(torch.cat((prompt.ids, tail.ids), 1), rows, prompt.pictures,
                        torch.cat((prompt.types, tail.types), 1), torch.cat((prompt.mask, tail.mask), 1))


def _call(model, prompt, positions=None, start=0, end=None, cache=None, what="the call", masked=False):
    """One forward of tokens ``start … end − 1``; the mask is passed where a row is padded, or
    where ``masked`` (a mask of ones: another code path in real models)."""
    end = prompt.ids.shape[1] if end is None else end

    def run():
        with torch.no_grad():
            try:
                mask = prompt.mask[:, :end] if prompt.padded or masked else None
                logits, returned = model(prompt.ids[:, start:end], position_ids=positions, attention_mask=mask,
                                         cache=cache, vision=prompt.inputs(start, end))
            except models.NotInConvention as reason:
                raise Excluded(f"not in the model's call convention: {reason}") from None
        model.logits_dtype = logits.dtype
        return logits.to(torch.float64), returned
    return s.answered(what, run)


def _generate(model, full, prompt_length, what):
    def run():
        with torch.no_grad():
            logits = model.generate(full.ids, full.mask, prompt_length,
                                    vision=full.inputs(0, prompt_length))
        model.logits_dtype = logits.dtype
        return logits.to(torch.float64)
    return s.answered(what, run)


def _decode(model, full, prompt_length, what, masked=False):
    """The model's own decode through its forward: a prefill, then a token a call with its cache
    (the ``rope_deltas`` path), logits of positions prompt − 1 … n − 2; ``masked``: every call with
    the attention mask, padded or not."""
    logits, cache = _call(model, full, end=prompt_length, what=f"{what}: the prefill", masked=masked)
    steps = [logits[:, -1]]
    for j in range(prompt_length, full.ids.shape[1] - 1):
        step, cache = _call(model, full, start=j, end=j + 1, cache=cache, what=f"{what}: the step at {j}",
                            masked=masked)
        steps.append(step[:, -1])
    return torch.stack(steps, dim=1)


def _compare(got, want, bound, what, valid=None, **details):
    """``got`` within ``bound`` of ``want`` (batch, tokens, vocabulary): the first row and token over it
    named; only where ``valid`` (batch, tokens) holds, if given (a row's left pads answer nothing)."""
    errors = (got - want).abs().amax(dim=-1)
    if valid is not None:
        errors = errors.masked_fill(~valid.bool(), 0.0)
    over = ~(errors <= bound)
    row, token = (int(i) for i in (over.nonzero()[0] if bool(over.any()) else (errors == errors.max()).nonzero()[0]))
    s.require_within(error=float(errors[row, token]), bound=bound, what=f"{what} (row {row}, token {token})",
                     row=row, token=token, **details)


def _teeth(fresh, prompt, positions, bound, what):
    """A given id one off must move the logits: the last token's on every axis, and (with pictures)
    the first picture's height ids."""
    need = models.TEETH * bound
    base, _ = _call(fresh(), prompt, positions)
    moved = positions.clone()
    moved[:, :, -1] += 1
    moves = {"the last token's ids moved by one": models._error(_call(fresh(), prompt, moved)[0][:, -1],
                                                                 base[:, -1])}
    if prompt.pictures:
        picture = prompt.pictures[0]
        tall = positions.clone()
        tall[1, picture.row, picture.start:] += 1
        moves["the first picture's height ids moved by one"] = models._error(
            _call(fresh(), prompt, tall)[0][picture.row, -1], base[picture.row, -1])
    weak = {how: change for how, change in moves.items() if change < need}
    if weak:
        said = "; ".join(f"{how} moves the last logits by {change:.2e}" for how, change in weak.items())
        s.undecided(f"no teeth for {what}: {said}, under {models.TEETH} tolerances ({need:.2e})")


# ------------------------------------------------------------------ VLM-1


@pytest.mark.claim("VLM-1", **VLM)
def test_text_rows_read_the_same_with_own_1d_and_equal_axis_ids(record, device):
    fresh = models.Fresh(record, device)
    model = _subject(fresh)
    full = _extended(model, model.prompt([TEXT, TEXT], seed=1))
    prompt_length, n = full.ids.shape[1] - STEPS, full.ids.shape[1]
    flat = torch.arange(n, device=device).expand(2, n)
    equal = flat.expand(3, 2, n)
    reference, _ = _call(fresh(), full, equal, what="equal ids on three axes")
    bound = models._bound(reference, fresh.pristine, reach=n)
    one_d, _ = _call(fresh(), full, flat, what="1D ids")
    _compare(one_d, reference, bound, "1D ids (batch, seq) give other logits than equal ids on three axes")
    own, _ = _call(fresh(), full, what="the model's own ids")
    _compare(own, reference, bound, "the model's own ids for text give other logits than equal ids on three axes")
    for how, decode in (("generate", _generate), ("a forward a token with the cache", _decode)):
        steps = decode(fresh(), full, prompt_length, f"decoding text with the model's own ids ({how})")
        _compare(steps, reference[:, prompt_length - 1 : n - 1], bound,
                 f"decoding text with the model's own ids ({how}) gives other logits than equal ids on three axes")
    _teeth(fresh, full, equal, bound, "text ids")


# ------------------------------------------------------------------ VLM-2


@pytest.mark.claim("VLM-2", **VLM)
def test_shifting_every_axis_leaves_the_logits(record, device):
    fresh, model, rows, prompt = _prompted(record, device, seed=2)
    paper = _paper(model, record, rows, device)
    base, _ = _call(fresh(), prompt, paper, what="the paper's ids")
    reach = int(paper.max()) + 1
    shifts = sorted({*SHIFTS, *([record.model.max_position - reach] if record.model.max_position else [])})
    bound = models._bound(base, fresh.pristine, reach=max(shifts) + reach)
    for shift in shifts:
        shifted, _ = _call(fresh(), prompt, paper + shift, what=f"the paper's ids + {shift}")
        _compare(shifted, base, bound, f"every axis's ids shifted by {shift} change the logits", shift=shift)
    _teeth(fresh, prompt, paper, bound, "ids of rows with pictures")


# ------------------------------------------------------------------ VLM-3


@pytest.mark.claim("VLM-3", **VLM)
def test_own_ids_are_the_papers_and_decoding_continues_each_row(record, device):
    """The rows as they come, then with a row left-padded beside them (its ids from its first token;
    decoded by ``generate``, as batched generation runs)."""
    fresh, model, rows, _ = _prompted(record, device, seed=3)
    for padded, batch in enumerate((rows, [*rows, PADDED_IMAGE])):
        prompt = model.prompt(batch, seed=3)
        full = _extended(model, prompt)
        prompt_length, n = prompt.ids.shape[1], full.ids.shape[1]
        beside = " beside a left-padded row" if padded else ""
        paper = _paper(model, record, full.rows, device)
        reference, _ = _call(fresh(), full, paper, what=f"the paper's ids{beside}")
        bound = models._bound(reference, fresh.pristine, reach=n)
        own, _ = _call(fresh(), prompt, what=f"the model's own ids{beside}")
        _compare(own, reference[:, :prompt_length], bound,
                 f"the model's own ids for a prompt with pictures{beside} give other logits than the paper's ids",
                 valid=prompt.mask)
        decodes = {"generate": _generate}
        if not padded:  # a padded step through forward takes the mask: VLM-4 judges that path
            decodes["a forward a token with the cache"] = _decode
        for how, decode in decodes.items():
            steps = decode(fresh(), full, prompt_length, f"decoding after pictures{beside} ({how})")
            _compare(steps, reference[:, prompt_length - 1 : n - 1], bound,
                     f"decoding after pictures{beside} ({how}) does not continue from each row's largest id plus one")
    _teeth(fresh, full, paper, bound, "ids after pictures")


# ------------------------------------------------------------------ VLM-4


#: VLM-4's batches: a row with a picture beside a text row of its length, and beside a shorter text
#: row left-padded to it (batched generation of prompts of unequal lengths).
MIXED = ((IMAGE_A, TEXT), (IMAGE_A, (Pad(4), Text(9))))


@pytest.mark.claim("VLM-4", **VLM)
def test_a_row_with_a_picture_and_a_text_row_read_as_each_alone(record, device):
    fresh = models.Fresh(record, device)
    model = _subject(fresh)
    decodes = {"generate": _generate, "a forward a token with the cache": _decode,
               "a forward a token with the cache and the attention mask": partial(_decode, masked=True)}
    for case, rows in enumerate(MIXED):
        full = _extended(model, model.prompt(rows, seed=4 + case))
        prompt_length = full.ids.shape[1] - STEPS
        padding = " (left-padded)" if full.padded else ""
        prompt_logits, _ = _call(fresh(), full, end=prompt_length, what=f"the mixed batch's prompt{padding}")
        steps = {how: decode(fresh(), full, prompt_length, f"decoding the mixed batch{padding} ({how})")
                 for how, decode in decodes.items()}
        for row in range(2):
            alone = full.alone(row)
            pads = full.ids.shape[1] - alone.ids.shape[1]
            alone_logits, _ = _call(fresh(), alone, end=prompt_length - pads, what=f"row {row} alone")
            bound = models._bound(alone_logits, fresh.pristine, reach=full.ids.shape[1])
            kind = "the text-only row" if row else "the row with a picture"
            _compare(prompt_logits[row : row + 1, pads:], alone_logits, bound,
                     f"{kind} of a mixed batch{padding} reads other than alone, in the prompt")
            for how, decode in decodes.items():
                alone_steps = decode(fresh(), alone, prompt_length - pads, f"decoding row {row} alone ({how})")
                _compare(steps[how][row : row + 1], alone_steps, bound,
                         f"{kind} of a mixed batch{padding} decodes other than alone ({how})")
    _teeth(fresh, full, _paper(model, record, full.rows, device), bound, "a mixed batch")


# ------------------------------------------------------------------ VLM-5


@pytest.mark.claim("VLM-5", **VLM)
def test_a_forward_after_generate_with_another_batch_size_keeps_nothing(record, device):
    fresh = models.Fresh(record, device)
    model = _subject(fresh)
    earlier = _extended(model, model.prompt([IMAGE_A, IMAGE_B], seed=5))
    _generate(model, earlier, earlier.ids.shape[1] - STEPS, "a generate on a batch of two")
    # with pictures (a row left-padded among them); text alone
    for rows, seed in (([IMAGE_B, IMAGE_A, TEXT, PADDED_IMAGE], 6), ([TEXT], 9)):
        later = model.prompt(rows, seed=seed)
        size = f"a forward on a batch of {len(rows)}" + ("" if later.pictures else " of text")
        after, _ = _call(model, later, what=f"{size} after a generate on two")
        clean, _ = _call(fresh(), later, what="the same forward on a fresh model")
        bound = models._bound(clean, fresh.pristine, reach=later.ids.shape[1])
        _compare(after, clean, bound, f"{size} after a generate on two reads other than on a fresh model (state "
                 "kept from the generate)", valid=later.mask, batch=len(rows))
    later = model.prompt([IMAGE_B, IMAGE_A, TEXT, PADDED_IMAGE], seed=6)
    _teeth(fresh, later, _paper(model, record, later.rows, device), bound, "a batch of four")


# ------------------------------------------------------------------ VLM-6


#: Two rows with two images each, 17 tokens: the second images come after a cache that holds the first.
TWO_IMAGES_A = (Text(2), Vision(1, 2, 2), Text(3), Vision(1, 2, 3), Text(2))
TWO_IMAGES_B = (Text(3), Vision(1, 2, 3), Text(2), Vision(1, 2, 2), Text(2))
#: Chunk ends for each plan: a text chunk, then the pictures, then text chunks of 2 and 3; the first
#: pictures, then the second ones after them (a second turn), then the text.
PLANS = (((IMAGE_A, IMAGE_B), (3, 11, 14)), ((TWO_IMAGES_A, TWO_IMAGES_B), (9, 15)))


@pytest.mark.claim("VLM-6", **VLM)
def test_a_chunked_prefill_through_pictures_matches_each_prefix(record, device):
    fresh = models.Fresh(record, device)
    model = _subject(fresh)
    for plan, (rows, ends) in enumerate(PLANS):
        full = _extended(model, model.prompt(rows, seed=8 + plan))
        n = full.ids.shape[1]
        whole, _ = _call(fresh(), full, what="a fresh pass on the whole sequence")
        bound = models._bound(whole, fresh.pristine, reach=n)
        cache, start, chunked = None, 0, model if plan == 0 else fresh()
        for end in (*ends, n):
            chunk, cache = _call(chunked, full, start=start, end=end, cache=cache,
                                 what=f"the chunk of tokens {start}…{end - 1} with the cache")
            prefix, _ = _call(fresh(), full, end=end, what=f"a fresh pass on tokens 0…{end - 1}")
            _compare(chunk, prefix[:, start:end], bound, f"the chunk of tokens {start}…{end - 1} reads other than "
                     "a fresh pass on its prefix", chunk=f"{start}…{end - 1}")
            start = end
    _teeth(fresh, full, _paper(model, record, full.rows, device), bound, "chunks through pictures")
