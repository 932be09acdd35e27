"""The verdict rules, fixed in code before any number was read: one function per claim."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...harness.catalogue.states import State


#: ROPE-10b's bar: "keeps its loss" means R(k) = loss(kL)/loss(L) ≤ 1.10 (the harness's choice).
RATIO_BAR = 1.10
OUTCOMES = (State.HOLDS, State.REFUTED, State.UNDECIDED, State.NOT_DECIDABLE)


@dataclass(frozen=True)
class Verdict:
    """One claim's outcome (one of :data:`OUTCOMES`), the rule that decided it and the numbers it used."""

    outcome: str
    rule: str
    evidence: dict

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def seed_entries(results: dict, encoding: str, length: int, section: str = "lengths") -> list[dict]:
    return [run[section][str(length)] for _, run in sorted(results["runs"][encoding].items())]


def _losses(results: dict, encoding: str, length: int) -> list[float] | None:
    """Losses over seeds at ``length``; ``None`` if any seed raised or gave a non-finite loss."""
    entries = seed_entries(results, encoding, length)
    if any("loss" not in e or not math.isfinite(e["loss"]) for e in entries):
        return None
    return [e["loss"] for e in entries]


def _longer_lengths(results: dict) -> list[int]:
    config = results["config"]
    return [k * config["train_length"] for k in config["multipliers"] if k > 1]


def spread_order(better: list[float], worse: list[float]) -> str:
    """"holds" if every loss of ``better`` is below every loss of ``worse`` (max < min over seeds),
    "refuted" if the ranges are reversed (min ``better`` > max ``worse``), else "undecided"."""
    if max(better) < min(worse):
        return State.HOLDS
    if min(better) > max(worse):
        return State.REFUTED
    return State.UNDECIDED


def _missing(results: dict, *encodings: str) -> Verdict | None:
    absent = [e for e in encodings if e not in results["runs"]]
    if absent:
        return Verdict(State.NOT_DECIDABLE, "needs the encodings " + ", ".join(encodings), {State.NOT_RUN: absent})
    return None


def rope_keeps_its_loss(results: dict) -> Verdict:
    """ROPE-10b: RoPE keeps its loss far beyond the training length.

    Per seed, "keeps" means R(k) = loss(kL)/loss(L) ≤ 1.10 for every k > 1 (k = 2, 4, 8 by default;
    the 10% bar is the harness's choice). Holds iff every seed keeps; refuted iff no seed keeps;
    undecided if the seeds disagree."""
    rule = f"per seed: R(k) <= {RATIO_BAR} for every k > 1; holds iff all seeds, refuted iff none, else undecided"
    if (missing := _missing(results, "rope")) is not None:
        return missing
    ratios = {seed: {str(n): run["lengths"][str(n)].get("ratio") for n in _longer_lengths(results)}
              for seed, run in sorted(results["runs"]["rope"].items())}  # None: it raised
    keeps = [all(r is not None and r <= RATIO_BAR for r in per_length.values()) for per_length in ratios.values()]
    outcome = State.HOLDS if all(keeps) else State.REFUTED if not any(keeps) else State.UNDECIDED
    return Verdict(outcome, rule, {"ratios_by_seed": ratios, "bar": RATIO_BAR})


def past_training(results: dict, encoding: str, length: int, variant: str | None = None) -> list[float] | None:
    """Per seed, the loss over the positions past L of a ``length``-token sequence (the mean of its
    L-position buckets after the first); ``None`` if any seed raised or gave a non-finite loss.
    ``variant``: RoPE re-scored with that frequency schedule (``rope_variants``)."""
    losses = []
    for _, run in sorted(results["runs"][encoding].items()):
        entry = (run.get("rope_variants") or {}).get(variant, {}) if variant else run["lengths"]
        buckets = entry.get(str(length), {}).get("buckets", [])[1:]
        if not buckets or not all(math.isfinite(b) for b in buckets):
            return None
        losses.append(sum(buckets) / len(buckets))
    return losses


def _compared(ours: list[float] | None, theirs: list[float] | None) -> str:
    """:func:`spread_order` of two models' losses; not decidable where either gave none (a model
    that cannot run there is not ranked, neither first nor last)."""
    if ours is None or theirs is None:
        return State.NOT_DECIDABLE
    return spread_order(ours, theirs)


def _all_of(outcomes: list[str]) -> str:
    """A conjunction: refuted if any part is, holds if every part does, not decidable if a part
    cannot be decided, else undecided."""
    if State.REFUTED in outcomes:
        return State.REFUTED
    if outcomes and all(o == State.HOLDS for o in outcomes):
        return State.HOLDS
    return State.NOT_DECIDABLE if State.NOT_DECIDABLE in outcomes else State.UNDECIDED


def _shown(losses: list[float] | None) -> list[float] | str:
    return [round(x, 4) for x in losses] if losses is not None else "cannot run past L"


def _better_past_training(results: dict, better: str, worse: str, lengths: list[int]) -> tuple[str, dict]:
    parts = {}
    for n in lengths:
        ours, theirs = past_training(results, better, n), past_training(results, worse, n)
        parts[str(n)] = {"outcome": _compared(ours, theirs), better: _shown(ours), worse: _shown(theirs)}
    return _all_of([p["outcome"] for p in parts.values()]), parts


def extrapolation_ranking(results: dict) -> Verdict:
    """EXT-1: RoPE extrapolates better than sinusoidal, which does better than learnable.

    "A better than B at length kL" (k > 1): on the positions past L of a kL sequence, A's worst
    seed beats B's best (max A < min B) - holds; reversed ranges - refuted; overlapping - undecided.
    A model that cannot run at kL gives no loss there: a comparison with it is not decidable (it is
    EXT-2's claim, not a rank). Each pair holds iff it holds at every k > 1; the claim is refuted
    iff a pair is refuted at some k, holds iff both pairs hold, and is not decidable where a pair
    cannot be decided."""
    rule = ("loss on the positions past L, per k > 1: max over seeds of A < min of B (holds), min A > max B "
            "(refuted), else undecided; a model that cannot run past L is not ranked (not decidable); claim = "
            "rope < sinusoidal and sinusoidal < learnable at every k")
    if (missing := _missing(results, "rope", "sinusoidal", "learnable")) is not None:
        return missing
    longer = _longer_lengths(results)
    rope_vs_sin, rope_evidence = _better_past_training(results, "rope", "sinusoidal", longer)
    sin_vs_learnable, sin_evidence = _better_past_training(results, "sinusoidal", "learnable", longer)
    return Verdict(_all_of([rope_vs_sin, sin_vs_learnable]), rule,
                   {"rope_better_than_sinusoidal": {"outcome": rope_vs_sin, "by_length": rope_evidence},
                    "sinusoidal_better_than_learnable": {"outcome": sin_vs_learnable, "by_length": sin_evidence}})


def against_nope(results: dict) -> dict[str, dict[str, str]]:
    """Per encoding (and RoPE re-scored with each variant) and k > 1: ``better`` or ``worse`` than
    NoPE - the same model with no positions - on the positions past L (the spread rule), else
    ``overlapping``; absent where it cannot run past L."""
    names = {e: (e, None) for e in results["runs"] if e != "nope"}
    variants = next(iter(results["runs"].get("rope", {}).values()), {}).get("rope_variants") or {}
    names.update({f"rope, {v}": ("rope", v) for v in variants})
    table = {}
    for name, (encoding, variant) in names.items():
        row = {}
        for n in _longer_lengths(results):
            ours, nope = past_training(results, encoding, n, variant), past_training(results, "nope", n)
            if ours is None or nope is None:
                continue
            order = spread_order(ours, nope)
            row[str(n)] = "better" if order == State.HOLDS else "worse" if order == State.REFUTED else "overlapping"
        if row:
            table[name] = row
    return table


def _refusals(results: dict, encoding: str) -> tuple[bool, dict]:
    """Whether ``encoding`` refused every length > L at every seed with a clear error (a ``ValueError``
    naming ``max_len``), and per length: how many seeds raised and the distinct outcomes."""
    evidence, clear = {}, True
    for n in _longer_lengths(results):
        outcomes = [e.get("raises", f"ran: loss {e.get('loss')}") for e in seed_entries(results, encoding, n)]
        clear = clear and all(m.startswith("ValueError") and "max_len" in m for m in outcomes)
        evidence[str(n)] = {"raised": sum("raises" in e for e in seed_entries(results, encoding, n)),
                            "seeds": len(outcomes), "outcomes": sorted(set(outcomes))}
    return clear and bool(evidence), evidence


def _stops_at_its_table(results: dict, encoding: str) -> Verdict:
    """Holds iff ``encoding`` raises a ``ValueError`` naming ``max_len`` at every length > L and seed."""
    rule = f"holds iff {encoding} raises ValueError naming max_len at every length > L and seed; else refuted"
    if (missing := _missing(results, encoding)) is not None:
        return missing
    clear, evidence = _refusals(results, encoding)
    return Verdict(State.HOLDS if clear else State.REFUTED, rule, {"by_length": evidence})


def learnable_cannot_run_past_table(results: dict) -> Verdict:
    """EXT-2: a learnable table cannot run past L at all.

    Holds iff the learnable model raises at every length > L for every seed, with the encoder's own
    clear error (a ``ValueError`` naming ``max_len``); refuted otherwise (it returned a loss, or
    failed with an unclear error)."""
    return _stops_at_its_table(results, "learnable")


def sinusoidal_is_medium(results: dict) -> Verdict:
    """EXT-3: sinusoidal extrapolates partially: it "can handle slightly longer sequences", between
    learnable and RoPE.

    Defined: a finite loss at every length for every seed. Handles slightly longer sequences: on
    the positions L…2L−1 of a 2L sequence it beats NoPE (the same model with no positions at all)
    by the spread rule; a model worse than ignoring positions there does not handle them. Between:
    RoPE beats it there; the learnable side is not ranked (it cannot run past L: EXT-2). Holds iff
    defined and both comparisons hold; refuted iff undefined or either is reversed; else undecided."""
    rule = ("defined = finite loss at every length and seed; on the positions L..2L-1 of 2L: sinusoidal beats "
            "NoPE and RoPE beats sinusoidal (spread rule); learnable is not ranked (cannot run past L); holds iff "
            "all, refuted iff undefined or a comparison is reversed")
    if (missing := _missing(results, "rope", "sinusoidal", "nope")) is not None:
        return missing
    lengths = [k * results["config"]["train_length"] for k in results["config"]["multipliers"]]
    losses = {str(n): _losses(results, "sinusoidal", n) for n in lengths}
    defined = all(v is not None for v in losses.values())
    twice = 2 * results["config"]["train_length"]
    sinusoidal, nope, rope = (past_training(results, e, twice) for e in ("sinusoidal", "nope", "rope"))
    beats_nope, below_rope = _compared(sinusoidal, nope), _compared(rope, sinusoidal)
    outcome = _all_of([beats_nope, below_rope]) if defined else State.REFUTED
    return Verdict(outcome, rule, {"defined": defined, "positions_past_L_at_2L": {
        "sinusoidal": _shown(sinusoidal), "nope": _shown(nope), "rope": _shown(rope)},
        "sinusoidal_beats_nope": beats_nope, "rope_beats_sinusoidal": below_rope,
        "uniform_guess": round(math.log(results["config"]["vocab"]), 4)})


def linear_scaling_extends_rope(results: dict) -> Verdict:
    """ROPE-14, as 004 §10.3 offers it: the linear scaling variant, suggested for very long sequences.

    The trained RoPE model re-scored with positions divided by k = n/L (position interpolation),
    without fine-tuning, against the same model unscaled: on the positions past L of a kL sequence,
    it beats plain RoPE (spread rule) at every k > 1 - holds; worse at some k - refuted; else
    undecided. (Chen et al. 2023 fine-tune after scaling; the document does not say so.)"""
    rule = ("loss on the positions past L, per k > 1: RoPE with positions / k (no fine-tuning) beats RoPE by the "
            "spread rule at every k (holds), is beaten at some k (refuted), else undecided")
    if (missing := _missing(results, "rope")) is not None:
        return missing
    parts = {}
    for n in _longer_lengths(results):
        scaled, plain = past_training(results, "rope", n, "position_interpolation"), past_training(results, "rope", n)
        parts[str(n)] = {"outcome": _compared(scaled, plain), "position_interpolation": _shown(scaled),
                         "rope": _shown(plain)}
    outcomes = [p["outcome"] for p in parts.values()]
    return Verdict(_all_of(outcomes), rule, {"by_length": parts})


def hybrid_local_benefit(results: dict) -> Verdict:
    """HYB-1a: at the training length the hybrid fits the local patterns better than its parts.

    At L, the hybrid beats RoPE and learnable by the spread rule (max over seeds of the hybrid's
    loss < min over seeds of each other's): holds; worse than either by the reversed rule: refuted;
    otherwise undecided (overlapping ranges, e.g. all at the entropy floor)."""
    rule = "at L: max hybrid < min rope and max hybrid < min learnable (holds); min hybrid > max of either (refuted)"
    if (missing := _missing(results, "hybrid", "rope", "learnable")) is not None:
        return missing
    L = results["config"]["train_length"]
    hybrid = _losses(results, "hybrid", L)
    others = {e: _losses(results, e, L) for e in ("rope", "learnable")}
    parts = {e: spread_order(hybrid, losses) for e, losses in others.items()}
    return Verdict(_all_of(list(parts.values())), rule,
                   {"hybrid": hybrid, **others, "by_comparison": parts,
                    "entropy_floor": results["chain"]["entropy_floor"]})


def hybrid_inherits_table_limit(results: dict) -> Verdict:
    """HYB-1b: past L the hybrid inherits the learnable table's limit (ABS-2).

    Holds iff the hybrid raises a ``ValueError`` naming ``max_len`` at every length > L for every
    seed; refuted otherwise."""
    return _stops_at_its_table(results, "hybrid")


def hybrid_long_range(results: dict) -> Verdict:
    """HYB-1c: the hybrid captures long-range dependencies - not decidable here.

    The data is an order-2 chain: no token depends on anything more than two back, so no model
    can show a long-range benefit on it; and past L the hybrid cannot run at all (HYB-1b)."""
    return Verdict(State.NOT_DECIDABLE, "needs data with dependencies longer than the chain's order (2)",
                   {"chain_order": 2, "train_length": results["config"]["train_length"]})


VERDICT_RULES = {
    "ROPE-10b": rope_keeps_its_loss,
    "EXT-1": extrapolation_ranking,
    "EXT-2": learnable_cannot_run_past_table,
    "EXT-3": sinusoidal_is_medium,
    "ROPE-14": linear_scaling_extends_rope,
    "HYB-1a": hybrid_local_benefit,
    "HYB-1b": hybrid_inherits_table_limit,
    "HYB-1c": hybrid_long_range,
}


def verdicts(results: dict) -> dict[str, Verdict]:
    """Every claim's :class:`Verdict` from a results table (as :func:`run_experiment` returns it)."""
    return {claim: rule(results) for claim, rule in VERDICT_RULES.items()}
