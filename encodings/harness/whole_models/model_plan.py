"""Where each model relation's calls reach, from a model's traits alone.

The model relations (``specs/test_models.py``) size their calls with these functions, and a
record's design declarations are made from the same functions (:func:`designs_reached`): a
design that breaks a relation past a threshold (dynamic NTK past the maximum, longrope past the
original length) is declared refuted only where that relation's positions cross it, so on a
realistic configuration whose threshold the relation never reaches, the relation must hold.

A model's thresholds are its configured maximum and a scaled model's original length. Decoding
every token across a threshold costs one call a token: up to :data:`DECODE_EVERY` the decode
runs from a short prefill; up to :data:`DECODE_NEAR` it prefills to just before the threshold
and decodes across it (:data:`DECODE_NEAR_QUADRATIC` where the attention forms the whole score
matrix, as transformers' eager attention does: a pass at 8188 then costs several times SDPA's on
a CPU); past that no relation crosses it by decoding (MODEL-1's shifts and MODEL-7's windows
reach it with given positions).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalogue.records import ModelTraits

#: The window of the shift, padding and batch relations.
SEQ = 16
#: Decode every token from a short prefill across thresholds up to this position.
DECODE_EVERY = 256
#: Prefill to just before a threshold up to this position and decode across it.
DECODE_NEAR = 8192
#: The same, for a model whose attention forms the whole score matrix (its cost grows with the square).
DECODE_NEAR_QUADRATIC = 4096
#: Tokens decoded on each side of a threshold reached through a long prefill.
ACROSS = 4
#: The prefill before one-token steps where the decode starts early.
PREFILL = 4
#: Unequal chunk sizes, cycled, for a chunked prefill (equal chunks hide an offset grown by the
#: chunk), odd and even (a defect may turn on a size's parity).
CHUNKS = (5, 4, 7, 2, 8, 3)
#: MODEL-7: windows past the maximum start this far past it.
PAST = 37


@dataclass(frozen=True)
class Decode:
    """A sequence of ``length`` tokens: ``prefill`` in one call, then one token a call."""

    prefill: int
    length: int

    @property
    def last(self) -> int:
        return self.length - 1


#: A decode that starts early: 40 tokens from :data:`PREFILL`. Where a plan reaches a threshold
#: through a long prefill, a position one off may move the logits there by less than the tolerance
#: the long reach allows; the relation is then judged on this plan too, and its teeth are this one's.
SHORT = Decode(PREFILL, 40)


def thresholds(traits: ModelTraits) -> list[int]:
    """Positions where a relative model's behaviour may change: its maximum, its original length."""
    found = {t for t in (traits.max_position, traits.original_max_position, traits.rescales_at) if t}
    return sorted(found)


def decode_plan(traits: ModelTraits) -> Decode:
    """Across the rescaling threshold where it is affordable (there a cache's keys and a fresh pass
    part: longrope's original length lies below its maximum), else the highest threshold that is
    (every token up to :data:`DECODE_EVERY`, through a long prefill up to :data:`DECODE_NEAR`), else
    40 tokens; inside a table."""
    if traits.table_limited:
        return Decode(PREFILL, min(40, traits.max_position))
    near = DECODE_NEAR_QUADRATIC if traits.quadratic_attention else DECODE_NEAR
    reachable = [t for t in thresholds(traits) if t <= near]
    if not reachable:
        return SHORT
    top = traits.rescales_at if traits.rescales_at in reachable else reachable[-1]
    if top <= DECODE_EVERY:
        return Decode(PREFILL, max(40, top + 8))
    return Decode(top - ACROSS, top + ACROSS)


def chunk_plan(traits: ModelTraits, plan: Decode | None = None) -> list[int]:
    """Chunk sizes over ``plan``'s length (:func:`decode_plan`'s by default): a long prefill first
    where it has one, then :data:`CHUNKS` cycled (unequal sizes)."""
    plan = plan or decode_plan(traits)
    sizes = [plan.prefill] if plan.prefill > SEQ else []
    done, k = sum(sizes), 0
    while done < plan.length:
        size = min(CHUNKS[k % len(CHUNKS)], plan.length - done)
        sizes.append(size)
        done, k = done + size, k + 1
    return sizes


def shift_window(traits: ModelTraits) -> int:
    """MODEL-1's window: :data:`SEQ`, or half the lowest threshold where that is shorter."""
    low = thresholds(traits)
    return min(SEQ, low[0] // 2) if low else SEQ


def shifts(traits: ModelTraits) -> list[int]:
    """MODEL-1's shifts, each window inside the lowest threshold (MODEL-7 owns what lies past the
    maximum): 1, 1000, and the window just below the threshold."""
    window = shift_window(traits)
    low = thresholds(traits)
    if not low:
        return [1, 1000]
    inside = low[0] - window - 1  # the teeth move the last position on by one, still inside
    return sorted({c for c in (1, 1000, inside) if 1 <= c <= inside})


def past_windows(traits: ModelTraits) -> list[int]:
    """MODEL-7's window starts: across the maximum and past it."""
    maximum = traits.max_position
    return [maximum - SEQ // 2, maximum + PAST]


def batch_lengths(traits: ModelTraits) -> list[int]:
    """MODEL-5's rows, left-padded to the longest: of different lengths, the longest across the
    rescaling threshold where decoding crosses it from a short prefill (a batch-wide maximum shows
    only there)."""
    top = _past_rescaling(traits) or SEQ
    return [top - 3, top, top - 10]  # the longest second (a defect that takes the first row's shows), pads odd and even


def _past_rescaling(traits: ModelTraits) -> int | None:
    """A length just past the rescaling threshold where a short prefill affords it, else None."""
    rescale = traits.rescales_at
    return rescale + 8 if rescale and rescale <= DECODE_EVERY and not traits.table_limited else None


def padded_prompt(traits: ModelTraits) -> int:
    """MODEL-4's padded prompt: :data:`SEQ` columns, or past the rescaling threshold (positions that
    count the pads reach further there than the row's own)."""
    return _past_rescaling(traits) or SEQ


def documents(traits: ModelTraits) -> tuple[int, int, int]:
    """MODEL-8's document lengths, the first and last identical: short ones, or, past a rescaling
    threshold, a pack longer than it of documents each shorter (positions that run on across the
    pack reach past it, restarting ones do not)."""
    rescale = _past_rescaling(traits) and traits.rescales_at
    if not rescale:
        return (7, 5, 7)
    long = rescale * 5 // 8
    return (long, 5, long)


def crosses(reach: int, threshold: int | None) -> bool:
    """Positions up to ``reach`` (inclusive) pass ``threshold`` (positions ≥ it)."""
    return threshold is not None and reach >= threshold


def designs_reached(rope_type: str, traits: ModelTraits) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The relations a transformers rope type breaks by its definition *at the positions each
    reaches on this configuration*: claim -> (why, the spec functions it breaks; empty: all).

    ``dynamic`` and ``longrope`` scale by a call's largest position (transformers documents it):
    a window past the maximum turns otherwise than one inside (MODEL-7), and a batch is one call,
    so its longest row decides for every row where rows cross the threshold (MODEL-5). Neither
    excuses a cache whose keys keep what they were rotated with: a decode or a chunk must still
    match a fresh pass on its prefix (MODEL-2, MODEL-3)."""
    rescale = traits.rescales_at
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    if rope_type not in ("dynamic", "longrope") or rescale is None:
        return found
    what = "the base" if rope_type == "dynamic" else "short or long factors"
    said = f"{CONFIGURED}rope_type {rope_type}"
    if crosses(max(batch_lengths(traits)) - 1, rescale):
        found["MODEL-5"] = (f"{said}: a call's largest position picks {what}: a row beside a row past {rescale} "
                            "turns with the batch's, alone with its own", ())
    if traits.max_position is not None:
        found["MODEL-7"] = (f"{said}: a call's largest position picks {what}: a window past the maximum turns "
                            "otherwise than the window at 0", ())
    return found


#: The prefix of a refutation read from a model's config: an XPASS on one is a configured design
#: the model does not apply (:func:`~..cases.judge.outcome` says so).
CONFIGURED = "configured: "


def configured_designs(config: dict, traits: ModelTraits) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The relations a model's config breaks by design beyond its rope type, where each relation's
    positions reach it: claim -> (why, the spec functions it breaks; empty: all). ``config`` is the
    config as a mapping (``config.to_dict()``, or a record's arguments with its ``model_type``).

    * ``rope_parameters.llama_4_scaling_beta`` β (Ministral 3, Mistral 4): queries are scaled by
      ``1 + β·log(1 + ⌊p / L⌋)`` with ``L`` the original length, so from position ``L`` a window
      turns otherwise than the window at 0 (MODEL-7 where its windows reach ``L``);
    * ``attn_temperature_tuning`` with ``floor_scale`` F and ``attn_scale`` s (Llama 4): the queries of
      layers without RoPE (``no_rope_layers`` 0) are scaled by ``1 + s·log(1 + ⌊(p + 1) / F⌋)``, so
      from position ``F − 1`` a window turns otherwise than the window at 0 (MODEL-1 where its
      shifts reach it, MODEL-7 where its windows do);
    * ``model_type == "recurrent_gemma"``: the RG-LRU takes position 0 for a sequence start (its
      input there is not scaled by ``√(1 − a²)``), so a window from 0 differs from a shifted one
      (MODEL-1).
    """
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    rope = config.get("rope_parameters") or {}
    rope = rope if "rope_type" in rope or not rope else next(iter(rope.values()), {})
    beta, original = (rope or {}).get("llama_4_scaling_beta"), (rope or {}).get("original_max_position_embeddings")
    if beta and original and traits.max_position is not None:
        reach = max(past_windows(traits)) + SEQ - 1
        if crosses(reach, int(original)):
            length = int(original)
            found["MODEL-7"] = (f"{CONFIGURED}llama_4_scaling_beta {beta} scales queries by 1 + β·log(1 + ⌊p / "
                                f"{length}⌋): a window past {length} turns otherwise than the window at 0", ())
    floor, nope = config.get("floor_scale"), 0 in (config.get("no_rope_layers") or ())
    if config.get("attn_temperature_tuning") and floor and nope:
        start = int(floor) - 1
        said = (f"{CONFIGURED}attn_temperature_tuning scales the queries of layers without RoPE by 1 + "
                f"{config.get('attn_scale')}·log(1 + ⌊(p + 1) / {int(floor)}⌋), p the query's position: a window "
                f"past {start} turns otherwise than the window at 0")
        if shifts(traits) and crosses(max(shifts(traits)) + shift_window(traits), start):
            found["MODEL-1"] = (said, ())
        if traits.max_position is not None and crosses(max(past_windows(traits)) + SEQ - 1, start):
            found["MODEL-7"] = (said, ())
    if config.get("model_type") == "recurrent_gemma":
        found["MODEL-1"] = (f"{CONFIGURED}RecurrentGemma's RG-LRU takes position 0 for a sequence start (its input "
                            "there is not scaled by √(1 − a²)): a window from 0 differs from a shifted one", ())
    return found
