"""The verdict rules, fixed in code before any number was read: one function per claim."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...harness.states import State


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


def _combine(outcomes: list[str]) -> str:
    """"holds" if every part holds, "refuted" if any part is refuted, else "undecided"."""
    if outcomes and all(o == State.HOLDS for o in outcomes):
        return State.HOLDS
    return State.REFUTED if State.REFUTED in outcomes else State.UNDECIDED


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


def _better_at(results: dict, better: str, worse: str, length: int) -> tuple[str, dict]:
    """``better`` extrapolates better than ``worse`` at one length.

    Both run (finite loss at every seed): :func:`spread_order`. Only ``better`` runs: holds (a model
    that gives no prediction at a length ranks below any that does). Only ``worse`` runs: refuted.
    Neither: undecided."""
    ours, theirs = _losses(results, better, length), _losses(results, worse, length)
    evidence = {better: ours if ours is not None else "raises", worse: theirs if theirs is not None else "raises"}
    if ours is not None and theirs is not None:
        return spread_order(ours, theirs), evidence
    if ours is not None:
        return State.HOLDS, evidence
    return (State.REFUTED if theirs is not None else State.UNDECIDED), evidence


def _ranked(results: dict, better: str, worse: str) -> tuple[str, dict]:
    parts = {str(n): _better_at(results, better, worse, n) for n in _longer_lengths(results)}
    return _combine([o for o, _ in parts.values()]), {n: {"outcome": o, "losses": e} for n, (o, e) in parts.items()}


def extrapolation_ranking(results: dict) -> Verdict:
    """EXT-1: RoPE extrapolates better than sinusoidal, which does better than learnable.

    "A better than B at length kL" (k > 1): if both give finite losses at every seed, A's worst
    seed beats B's best (max A < min B) - holds; reversed ranges (min A > max B) - refuted;
    overlapping ranges - undecided. If only A runs at that length, A is better (the table ranks
    extrapolation; a model that cannot predict at all there ranks last); if only B runs, refuted.
    Each pair holds iff it holds at every k > 1 and is refuted iff refuted at some k; the claim
    holds iff both pairs hold and is refuted iff either pair is refuted."""
    rule = ("per k > 1: max over seeds of A's loss < min of B's (holds), min A > max B (refuted), else undecided; "
            "a model that raises at kL ranks below one that runs; pair holds iff at every k, refuted iff at some k; "
            "claim = both pairs (rope < sinusoidal, sinusoidal < learnable)")
    if (missing := _missing(results, "rope", "sinusoidal", "learnable")) is not None:
        return missing
    rope_vs_sin, rope_evidence = _ranked(results, "rope", "sinusoidal")
    sin_vs_learnable, sin_evidence = _ranked(results, "sinusoidal", "learnable")
    return Verdict(_combine([rope_vs_sin, sin_vs_learnable]), rule,
                   {"rope_better_than_sinusoidal": {"outcome": rope_vs_sin, "by_length": rope_evidence},
                    "sinusoidal_better_than_learnable": {"outcome": sin_vs_learnable, "by_length": sin_evidence}})


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
    """EXT-3 (ABS-4 in the empirical sense): sinusoidal is defined for any length, with "medium" extrapolation.

    Defined: a finite loss at every length for every seed. Medium: between RoPE and learnable at
    every k > 1, each comparison by :func:`extrapolation_ranking`'s per-length rule (RoPE better
    than sinusoidal, sinusoidal better than learnable). Holds iff defined and both comparisons hold
    at every k; refuted iff undefined somewhere or either comparison is refuted at some k; else
    undecided."""
    rule = ("defined = finite loss at every length and seed; medium = rope better than sinusoidal and sinusoidal "
            "better than learnable at every k > 1 (spread rule); holds iff both, refuted iff either fails")
    if (missing := _missing(results, "rope", "sinusoidal", "learnable")) is not None:
        return missing
    lengths = [k * results["config"]["train_length"] for k in results["config"]["multipliers"]]
    losses = {str(n): _losses(results, "sinusoidal", n) for n in lengths}
    defined = all(v is not None for v in losses.values())
    below_rope, rope_evidence = _ranked(results, "rope", "sinusoidal")
    above_learnable, _ = _ranked(results, "sinusoidal", "learnable")
    outcome = _combine([below_rope, above_learnable]) if defined else State.REFUTED
    return Verdict(outcome, rule, {"defined": defined, "sinusoidal_losses": losses,
                                   "rope_better": below_rope, "better_than_learnable": above_learnable,
                                   "rope_vs_sinusoidal_by_length": rope_evidence})


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
    return Verdict(_combine(list(parts.values())), rule,
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
    "HYB-1a": hybrid_local_benefit,
    "HYB-1b": hybrid_inherits_table_limit,
    "HYB-1c": hybrid_long_range,
}


def verdicts(results: dict) -> dict[str, Verdict]:
    """Every claim's :class:`Verdict` from a results table (as :func:`run_experiment` returns it)."""
    return {claim: rule(results) for claim, rule in VERDICT_RULES.items()}
