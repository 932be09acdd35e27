"""The claim catalogue's IDs (``specs/claims.md``) and the harness's claim-violation error.

ROPE-10 has two parts in the catalogue; they are tracked as ROPE-10a
(mathematical) and ROPE-10b (empirical).
"""

from __future__ import annotations

from dataclasses import dataclass

# Not a catalogue claim: the calling contract every encoder must honour
# (shape, dtype and device preserved; bad input rejected with a clear error).
CONTRACT = "contract"

CLAIMS: dict[str, str] = {
    "ABS-1": "learnable: x + E[p], max_len × d trainable parameters",
    "ABS-2": "learnable past max_len: clear error",
    "ABS-3": "sinusoidal formula, deterministic, no parameters, values in [-1, 1]",
    "ABS-4": "sinusoidal defined for any length",
    "ABS-5": "absolute encodings express relative position poorly (logits not shift-invariant)",
    "ABS-6": "learnable memory grows with max_len; sinusoidal is low",
    "ROPE-1": "pairs rotated by m·θ_i (2×2 matrix = complex multiplication)",
    "ROPE-2": "θ_i = base^(-2i/d)",
    "ROPE-3": "norm preservation",
    "ROPE-4": "⟨R_m q, R_n k⟩ depends only on m − n",
    "ROPE-5": "no trainable parameters",
    "ROPE-6": "V is not rotated",
    "ROPE-7": "every head rotated with the same head_dim angles",
    "ROPE-8": "complex multiplication = real rotation",
    "ROPE-9": "sin/cos caching changes no result, also where a cache grows",
    "ROPE-10a": "ROPE-3/ROPE-4 hold at positions 10^4 … 10^6",
    "ROPE-10b": "trained at L, loss kept at 2L, 4L, 8L",
    "ROPE-11": "suits fp16 / mixed precision",
    "ROPE-12": "overhead relatively small; efficient for long sequences",
    "ROPE-13": "concatenated output layout = formula up to a fixed permutation",
    "ROPE-14": "linear position scaling = RoPE at p / s",
    "ATT-1": "equals plain attention on rotated q, k and unrotated v",
    "ATT-2": "scores scaled by 1/√d_k, softmax rows sum to 1",
    "ATT-3": "causal mask: no dependence on later tokens",
    "ATT-4": "shifting all positions leaves attention unchanged",
    "ATT-5": "d_model not divisible by heads: clear error",
    "LIN-1": "linear attention costs O(n) in time and memory",
    "LIN-2": "linear attention keeps RoPE's position awareness (ATT-4)",
    "HYB-1": "hybrid captures local patterns and long-range dependencies",
    "DYN-1": "dynamic accepts non-contiguous explicit positions",
    "DYN-2": "dynamic learns a position scale (gets gradient)",
    "DYN-3": "dynamic mixes 0.7 : 0.3; at scale 1 equals the base",
    "PERF-1": "forward time: learnable < sinusoidal < RoPE (V100 ms)",
    "PERF-2": "memory: learnable 3.8 MB, sinusoidal 0.2 MB, RoPE 1.5 MB",
    # The length experiment (specs/claims.md): the documents' comparative claims about length.
    "EXT-1": "trained at L: RoPE extrapolates better than sinusoidal, sinusoidal better than learnable",
    "EXT-2": "trained at L: a learnable-table model cannot run past L at all",
    "EXT-3": "trained at L: sinusoidal extrapolates partially (between learnable and RoPE)",
    # The literature's ALiBi (Press et al. 2022), the experiment's baseline: not the documents' claims.
    "ALIBI-1": "ALiBi's bias depends only on the offset q − k (literature)",
    "ALIBI-2": "ALiBi's bias is causal: keys after the query are masked (literature)",
    "ALIBI-3": "ALiBi's slopes follow the paper's geometric rule (literature)",
    # The literature's multi-axis RoPE (M-RoPE of Qwen2-VL and Qwen3-VL, 2D RoPE of Heo et al. 2024).
    "MROPE-1": "each pair turns by the position on the axis that owns it (literature)",
    "MROPE-2": "moving one axis by one turns exactly the pairs its section owns (literature)",
    "MROPE-3": "equal ids on every axis = 1D RoPE at that id (Qwen2-VL, literature)",
    "MROPE-4": "logits depend only on the vector offset, in every axis, far positions included (literature)",
    "MROPE-5": "the norm is kept at per-axis positions (literature)",
    # The harness's own additions (specs/claims.md): equivalent call paths agree.
    "PATH-1": "offset path = explicit positions (harness)",
    "PATH-2": "decoding against cached keys = full sequence (harness)",
    "PATH-3": "module.to(dtype) keeps the frequencies (harness)",
    # The harness's relations of a whole model around its RoPE (specs/test_models.py).
    "MODEL-1": "shifting every position id (inside the maximum) leaves the logits unchanged (harness, from ROPE-4)",
    "MODEL-2": "decoding token by token with the cache = a fresh pass on each prefix (harness, from ROPE-9)",
    "MODEL-3": "a prefill in chunks of unequal sizes = a fresh pass on each prefix (harness, from ROPE-9)",
    "MODEL-4": "a left-padded row with its mask = the unpadded row alone, forward and decode (harness, from ROPE-4)",
    "MODEL-5": "a row of a padded batch of unequal rows = the same row alone, forward and decode (harness)",
    "MODEL-6": "model.to(bf16) and bf16 autocast keep position information past 2048 (harness, from ROPE-11)",
    "MODEL-7": "past the maximum: the design's extrapolation, or an error naming the limit (harness, from ROPE-9)",
    "MODEL-8": "documents packed in one row = each document alone (harness, from ROPE-4 and ROPE-9)",
    # The harness's relations of a vision-language model around its M-RoPE (specs/test_vision_language.py).
    "VLM-1": "text rows: the model's own ids = 1D ids = equal ids on every axis (harness, from MROPE-3)",
    "VLM-2": "shifting every axis's ids by one constant leaves the logits (harness, from MROPE-4)",
    "VLM-3": "the model's own ids are the paper's: text after a picture from its largest id + 1, per row "
             "(harness, Qwen2-VL, Qwen2.5-VL)",
    "VLM-4": "a batch mixing a row with a picture and a text row = each row alone (harness)",
    "VLM-5": "a forward after a generate with another batch size = a fresh model's (harness)",
    "VLM-6": "a prefill in chunks through pictures = a fresh pass on each prefix (harness, from ROPE-9)",
    # The code that makes position ids, judged on its own (specs/test_id_builders.py, test_packing.py,
    # test_sharding.py): M-RoPE id builders and vision-tower grids, packing collators, context-parallel shards.
    "IDS-1": "text: one id on every axis, one more than the token before (Qwen2-VL)",
    "IDS-2": "a picture: one time id, its merged grid's rows and columns from the block's start (Qwen2-VL)",
    "IDS-3": "text after a picture or video resumes at the block's largest id on any axis + 1 (Qwen2-VL)",
    "IDS-4": "a video's time ids in its declared unit: frame index, or seconds × tokens per second (Qwen2.5-VL)",
    "IDS-5": "each row of a left-padded batch = the row alone, ids and delta (harness)",
    "IDS-6": "the delta continues the row: text appended later gets cache position + delta (harness)",
    "IDS-7": "a vision tower's grid ids: (row, col) in merge-block order, every frame alike (Qwen2-VL)",
    "PACK-1": "packed documents keep their tokens in order, positions 0 … len − 1 in each (harness)",
    "PACK-2": "the declared boundaries (cu_seq_lens, seq_idx) agree with the documents (harness)",
    "PACK-3": "packed ids have the tokens' length on every axis, padding included (harness)",
    "PACK-4": "a document's ids do not depend on the documents packed beside it (harness)",
    "CP-1": "every token keeps its global position id on its rank (harness)",
    "CP-2": "the ranks' shards hold every token of the sequence exactly once (harness)",
    "CP-3": "3D ids are cut on the sequence axis: every rank keeps all three axes (harness)",
    "CP-4": "restore(shards) gives the sequence back in order (harness)",
}
#: The model relations: the harness's own, each derived from the documents' claim it names.
MODEL_CLAIMS = tuple(c for c in CLAIMS if c.startswith("MODEL-"))
#: The relations of a vision-language model's M-RoPE inside it.
VLM_CLAIMS = tuple(c for c in CLAIMS if c.startswith("VLM-"))
#: The claims about the code that makes position ids, by the producer's protocol.
PRODUCER_CLAIMS: dict[str, tuple[str, ...]] = {
    "mrope_ids": tuple(c for c in CLAIMS if c.startswith("IDS-") and c != "IDS-7"),
    "vision_grid": ("IDS-7",),
    "packing": tuple(c for c in CLAIMS if c.startswith("PACK-")),
    "cp_shard": tuple(c for c in CLAIMS if c.startswith("CP-")),
}
#: Claims the harness adds; the documents do not make them.
HARNESS_CLAIMS = ("PATH-1", "PATH-2", "PATH-3", *MODEL_CLAIMS, *VLM_CLAIMS,
                  *(c for claims in PRODUCER_CLAIMS.values() for c in claims))
#: Claims from the literature about a design the documents do not present (ALiBi, the baseline).
LITERATURE_CLAIMS = ("ALIBI-1", "ALIBI-2", "ALIBI-3")
#: The literature's claims about multi-axis RoPE (a position per axis: M-RoPE, 2D RoPE).
MULTIAXIS_CLAIMS = tuple(c for c in CLAIMS if c.startswith("MROPE-"))

#: The designs the documents present (an encoder record names the ones it implements).
DESIGNS: dict[str, str] = {
    "learnable": "learnable absolute table (000 §2.1)",
    "sinusoidal": "sinusoidal absolute table (000 §2.2)",
    "rope": "rotary embedding of q and k (000 §3.1-3.2, 004 §3, §6-7)",
    "rope_004_real": "004 §3.2's real-valued code: outputs written as [even, odd]",
    "rope_attention": "softmax attention with RoPE on q and k (000 §3.3, 004 §4-5)",
    "linear_attention": "linear attention with RoPE (000 §5.2)",
    "hybrid": "learnable table, then RoPE (000 §5.1)",
    "dynamic": "0.7 : 0.3 mix of RoPE at p and at a learned s·p (000 §5.3)",
    "rope_linear_scaling": "RoPE's linear scaling variant: positions divided by s (004 §10.3)",
    "alibi": "ALiBi, a linear bias on attention logits (Press et al. 2022): not in the documents",
    "model": "a whole causal language model around its positional encoding (the harness's relations)",
    "mrope": "M-RoPE: time, height and width ids turning sections of the pairs (Qwen2-VL, Qwen3-VL): not in "
             "the documents",
    "rope_2d": "2D RoPE of image patches, axial or mixed (Heo et al. 2024): not in the documents",
    "mrope_ids": "code that builds M-RoPE's (time, height, width) ids of a batch: not in the documents",
    "vision_grid": "code that builds a vision tower's (row, col) patch ids: not in the documents",
    "packing": "a collator that packs documents in one row with their positions: not in the documents",
    "cp_shard": "code that cuts a sequence's ids across context-parallel ranks: not in the documents",
}
_ROTARY_DESIGNS = ("rope", "rope_004_real", "rope_linear_scaling")

#: The designs each claim is made about. A cell on any other design is a cross-check, shown
#: apart and never counted as a verdict on the documents.
SUBJECTS: dict[str, tuple[str, ...]] = {
    "ABS-1": ("learnable",),
    "ABS-2": ("learnable",),
    "ABS-3": ("sinusoidal",),
    "ABS-4": ("sinusoidal",),
    "ABS-5": ("learnable", "sinusoidal"),
    "ABS-6": ("learnable", "sinusoidal"),
    **{c: _ROTARY_DESIGNS for c in ("ROPE-1", "ROPE-2", "ROPE-3", "ROPE-4", "ROPE-5", "ROPE-7", "ROPE-8",
                                    "ROPE-9", "ROPE-10a", "ROPE-11")},
    "ROPE-6": ("rope_attention",),
    "ROPE-10b": ("rope_attention",),
    "ROPE-12": ("rope_attention",),
    "ROPE-13": ("rope_004_real",),
    "ROPE-14": ("rope_linear_scaling",),
    **{c: ("rope_attention",) for c in ("ATT-1", "ATT-2", "ATT-3", "ATT-4")},
    "ATT-5": ("rope_attention", "rope"),
    "LIN-1": ("linear_attention",),
    "LIN-2": ("linear_attention",),
    "HYB-1": ("hybrid",),
    "DYN-1": ("dynamic",),
    "DYN-2": ("dynamic",),
    "DYN-3": ("dynamic",),
    "EXT-1": ("rope_attention",),
    "EXT-2": ("learnable",),
    "EXT-3": ("sinusoidal",),
    **{c: ("alibi",) for c in LITERATURE_CLAIMS},
    **{c: ("mrope", "rope_2d") for c in MULTIAXIS_CLAIMS},
    "MROPE-3": ("mrope",),  # Qwen2-VL's claim about M-RoPE; a 2D RoPE's θ restarts on each axis
    "PERF-1": ("learnable", "sinusoidal", "rope"),
    "PERF-2": ("learnable", "sinusoidal", "rope"),
    **{c: _ROTARY_DESIGNS for c in HARNESS_CLAIMS if c.startswith("PATH-")},
    **{c: ("model",) for c in MODEL_CLAIMS},
    **{c: ("model",) for c in VLM_CLAIMS},
    **{c: (protocol,) for protocol, claims in PRODUCER_CLAIMS.items() for c in claims},
}


@dataclass(frozen=True)
class Revision:
    """A change in what a claim's specs decide: a declaration written before it may now read XPASS."""

    date: str  # ISO date of the change
    change: str  # what the claim no longer decides, in one clause
    moved_to: str | None  # the claim that decides the old meaning now (None: no claim does)


#: Each claim's revisions, oldest first (``specs/claims.md``'s history is generated from it). An
#: XPASS on a revised claim names them, so that a refutation written for the old meaning moves in one edit.
REVISIONS: dict[str, tuple[Revision, ...]] = {
    "ROPE-9": (Revision("2026-12-01", "a fixed cache's end is a limit, not a cache effect: positions past the rows "
                        "a table declares are no longer ROPE-9's", "ROPE-10a"),),
    "ROPE-11": (Revision("2026-12-01", "half precision is blamed only for the error a half dtype adds over float32 "
                         "on the same draws; what float32 shows too (a table that wraps, a clamp, a length-dependent "
                         "schedule such as dynamic NTK) is no longer ROPE-11's", "ROPE-10a"),
                Revision("2026-12-05", "an output that is not finite in float32 too at a far position is no longer "
                         "ROPE-11's (bfloat16 has float32's range)", "ROPE-10a")),
    "ROPE-3": (Revision("2026-12-05", "the orthogonality of R_m is judged up to position 10^4; far positions are "
                        "no longer ROPE-3's", "ROPE-10a"),),
    "ROPE-2": (Revision("2026-12-05", "the frequencies are read off a fresh module for each matrix; state a "
                        "reading leaves is no longer ROPE-2's", "ROPE-9"),),
    "ATT-2": (Revision("2026-12-05", "the weights are judged over the keys the module lets a query see where those "
                       "include the design's; a key seen past the causal mask is no longer ATT-2's", "ATT-3"),),
}


def revision_hint(claim: str) -> str:
    """What an XPASS on ``claim`` adds: its revisions and where the old meaning lives now; empty if none."""
    return "; ".join(f"{claim} was revised on {r.date}: {r.change}" + (f"; a refutation of that belongs on "
                                                                       f"{r.moved_to}" if r.moved_to else "")
                     for r in REVISIONS.get(claim, ()))


#: Claims no spec can decide, with the reason (specs/claims.md says the same).
NOT_DECIDABLE: dict[str, str] = {
    "HYB-1": "'captures local patterns and long-range dependencies' names no observable quantity; the "
             "length experiment reports the hybrid's losses next to learnable and RoPE",
}


def is_subject(claim: str, designs) -> bool:
    """Whether a cell of ``claim`` on an encoder of ``designs`` is a verdict (not a cross-check)."""
    return claim == CONTRACT or bool(set(SUBJECTS[claim]) & set(designs))


#: The claim an encoder whose output depends on its earlier calls fails (see :mod:`..references.contract`).
HISTORY_CLAIM = "ROPE-9"


class _ClaimFailure(AssertionError):
    """A failure of ``claim`` on ``encoder``: ``[claim] encoder: summary``, then a line per detail."""

    def __init__(self, encoder: str, claim: str, summary: str, **details):
        self.encoder, self.claim, self.details = encoder, claim, details
        lines = [f"[{claim}] {encoder}: {summary}"]
        lines += [f"  {key}: {value}" for key, value in details.items()]
        super().__init__("\n".join(lines))


class ClaimViolation(_ClaimFailure):
    """Raised by a spec when an encoder does not satisfy a claim.

    The only exception a declared refutation accepts: any other exception is a crash.
    """


class NotPositional(ClaimViolation):
    """A violation that persists with the model's position code neutralised: a defect of the model
    that the positions do not cause (a recurrent state dropped, a selection that follows a call's
    length). Still a violation of the relation, blamed on ``blame`` with its evidence."""

    def __init__(self, encoder: str, claim: str, summary: str, blame: str = "the model, not its positions",
                 **details):
        self.blame = blame
        super().__init__(encoder, claim, f"not positional ({blame}): {summary}", **details)


class GeometryContradiction(_ClaimFailure):
    """What an encoder does contradicts a fact its record declares of its geometry (the pairs it
    turns against its rotated fraction): a finding that no declared refutation excuses, since the
    refutation's reason was written about the declared geometry. Judged ``unexpectedly failing``."""


class NoClearError(ClaimViolation):
    """Bad input met with no error, or an error that names no limit, where the result is not
    garbage (an integer input computed with, a negative position rotated by −p). The only failure a
    declared contract refutation ("this library validates no input") excuses; silent garbage (a
    negative position wrapping to a table's end, positions silently sliced) is a plain
    :class:`ClaimViolation` and stays reported."""
