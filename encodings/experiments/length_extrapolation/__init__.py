"""Length extrapolation decided by experiment: small causal LMs trained at length L, scored at L … 8L.

The documents claim RoPE "stays stable far beyond the training length" (000 §4.2, 004 §1.1:
ROPE-10b), rank extrapolation learnable "poorly" < sinusoidal "medium" < RoPE (000 §2.2 table:
EXT-1, EXT-3), say a learnable table "cannot run past L" (EXT-2) and that the hybrid
"captures local patterns and long-range dependencies" (000 §5.1: HYB-1). This module trains one
model per (encoding, seed) and decides them with rules fixed before any number was seen.

* **Data** - an order-2 Markov chain over ``vocab`` tokens (:class:`MarkovChain`): every context
  ``(a, b)`` allows ``successors`` next tokens with Dirichlet(1) weights, drawn once from
  ``chain_seed``. Tokens 0 and 1 of a sequence come from the stationary pair distribution π, so
  every later position has the same loss floor ``H(X_t | X_t-2, X_t-1) = Σ π(a,b) H(P(·|a,b))``
  (π by power iteration on the pair chain). Losses count the predictions of tokens 2 … n−1 only.
* **Model** - 2 pre-LN transformer layers, d_model 64, 4 heads, MLP 4×, untied readout
  (:class:`TinyLM`), with one of :data:`ENCODINGS`: ``nope`` (causal mask only), ``learnable``
  (table of length L added), ``sinusoidal`` (added), ``rope`` (q, k rotated per head, interleaved,
  base 10000), ``alibi`` (Press et al. 2022 bias on the logits), ``hybrid`` (learnable table added
  and RoPE on q, k: :class:`~posenc.encoders.hybrid.HybridPositionalEncoding`'s design, the table
  applied once at the input and the rotation in every layer).
* **Training** - length L, AdamW, linear warm-up then cosine decay, data drawn on the fly from a
  generator seeded by the model seed (so every encoding of one seed sees the same batches).
* **Evaluation** - a fixed held-out set per length kL: loss (nats/token), next-token accuracy,
  ``R(k) = loss(kL) / loss(L)``, loss per position bucket of width L; a *windowed control*
  (keys more than L − 1 back masked, so no query sees more keys than in training); the trained
  RoPE model re-scored with position interpolation, NTK-aware, dynamic NTK and YaRN frequencies.
  A model that cannot run at a length (the learnable table past L) is recorded as ``raises`` with
  its error message.
* **Verdicts** - :func:`verdicts`, each rule stated in its function's docstring.

:func:`run_experiment` returns the JSON-ready results; :func:`write_outputs` writes
``results.json``, ``results.md``, TensorBoard scalars and images, and ``loss_by_position.png``.
"""

from __future__ import annotations

from .config import default_workers, ENCODINGS, ExperimentConfig, ROPE_VARIANTS
from .data import MarkovChain
from .model import TinyLM
from .training import evaluation_sets, run_experiment, run_job
from .verdicts import OUTCOMES, RATIO_BAR, spread_order, Verdict, VERDICT_RULES, verdicts
from .outputs import markdown_report, write_outputs

__all__ = [
    "ENCODINGS",
    "ExperimentConfig",
    "MarkovChain",
    "OUTCOMES",
    "RATIO_BAR",
    "ROPE_VARIANTS",
    "TinyLM",
    "VERDICT_RULES",
    "Verdict",
    "default_workers",
    "evaluation_sets",
    "markdown_report",
    "run_experiment",
    "run_job",
    "spread_order",
    "verdicts",
    "write_outputs",
]
