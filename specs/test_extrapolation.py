"""Length, decided by experiment: ROPE-10b (000 §4.2, 004 §1.1), ROPE-14 (004 §10.3), EXT-1, EXT-2,
EXT-3 (000 §1, §2.2, §4.1, §4.2).

Small causal language models (2 pre-LN layers, d_model 64, 4 heads), one per encoding and seed,
are trained at length ``L`` on an order-2 Markov language whose loss floor is known, then scored at
``L, 2L, 4L, 8L`` (:mod:`posenc.experiments.length_extrapolation`). Each claim is decided by a
rule stated there before any number was seen, over the whole spread of seeds:

* ROPE-10b: RoPE "keeps its loss": ``R(k) = loss(kL) / loss(L) ≤ 1.10`` for k = 2, 4, 8, every seed;
* ROPE-14, as advice "for very long sequences": RoPE with positions divided by ``k`` (no
  fine-tuning) beats plain RoPE on the positions past ``L``, at every k;
* EXT-1: RoPE < sinusoidal < learnable in loss on the positions past ``L``, each comparison by
  the spread rule (the worse design's best seed above the better one's worst); a model that
  cannot run past ``L`` is not ranked, so a comparison with it is not decidable;
* EXT-2: the learnable model raises a clear error at every length past ``L``;
* EXT-3: sinusoidal "handles slightly longer sequences": defined at every length, and on the
  positions ``L … 2L − 1`` better than NoPE (no positions at all) and worse than RoPE.

The run trains this project's implementations of the designs (the published snippets compute the
same functions where they run; their own columns say so). Slow: ``pytest specs -m slow``; the
experiment alone, with its options: ``python -m posenc extrapolation --help``. Outputs (Markdown,
JSON, TensorBoard scalars and the loss-per-position image) go to ``profiles/extrapolation``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from posenc.experiments import ExperimentConfig, run_experiment, verdicts
from posenc.harness.references.contract import Blocked
from posenc.harness.catalogue.declarations import EXPERIMENT_CELLS
from specs import support as s
from posenc.harness.catalogue.states import State

OUT = Path(__file__).resolve().parents[1] / "profiles" / "extrapolation"
_RESULTS: dict = {}
_FAILED: list[str] = []  # why the run's one attempt did not finish


class _LiveProgress:
    """Progress lines to the terminal past pytest's output capture (which holds file descriptor 2
    too), so that a long run shows where it is."""

    def __init__(self, config):
        self.capture = config.pluginmanager.getplugin("capturemanager") if config is not None else None

    def write(self, text: str) -> None:
        if self.capture is None:
            sys.__stderr__.write(text)
            return
        with self.capture.global_and_fixture_disabled():
            sys.__stderr__.write(text)
            sys.__stderr__.flush()

    def flush(self) -> None:
        sys.__stderr__.flush()


def experiment(config=None) -> dict:
    """The experiment's results, run once per session (``POSENC_EXPERIMENT=quick``: the CI-sized run;
    ``small``: half the training and evaluation, chosen because it gives the default run's verdicts;
    ``POSENC_EXPERIMENT=FILE.json``: a kept run's ``results.json``, judged without training). A run
    that did not finish (a timeout, an interrupt, an error) is not started again by the next spec:
    every later experiment cell is blocked, naming why."""
    if _FAILED:
        raise Blocked(f"blocked: the length experiment did not finish in this run ({_FAILED[0]})")
    if not _RESULTS:
        value = os.environ.get("POSENC_EXPERIMENT", "")
        if value.endswith(".json"):
            if not Path(value).is_file():
                raise ValueError(f"POSENC_EXPERIMENT={value!r}: no such results file")
            _RESULTS.update(json.loads(Path(value).read_text()))
            return _RESULTS
        sizes = {"": ExperimentConfig, "quick": ExperimentConfig.quick, "small": ExperimentConfig.small}
        if value not in sizes:
            raise ValueError(f"POSENC_EXPERIMENT={value!r}: the values are 'quick' (the CI-sized run), 'small' (half "
                             "the training, the same verdicts) and a kept run's results.json")
        settings = sizes[value]()
        out = OUT.with_name(f"extrapolation-{value}") if value else OUT  # a sized run never replaces the real one
        try:
            _RESULTS.update(run_experiment(settings, out_dir=out, progress=_LiveProgress(config)))
        except BaseException as error:
            _FAILED.append(f"{type(error).__name__}: {s.shorten(str(error))}")
            raise
    return _RESULTS


def judge(claim: str, config=None) -> None:
    verdict = verdicts(experiment(config))[claim]
    details = dict(rule=verdict.rule, evidence=s.shorten(str(verdict.evidence)), report=str(OUT / "results.md"))
    if os.environ.get("POSENC_EXPERIMENT") == "quick":  # a smoke run of the code path decides nothing
        s.undecided(f"the quick run (one seed, a few steps) only exercises the code; it would read {verdict.outcome}",
                    **details)
    if verdict.outcome == State.REFUTED:
        s.violated(f"refuted by the length experiment ({len(_RESULTS['config']['seeds'])} seeds)", **details)
    if verdict.outcome != State.HOLDS:
        s.undecided(f"{verdict.outcome} by the length experiment", **details)


def _cell(claim):
    return lambda record: record.name == EXPERIMENT_CELLS[claim]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.claim("ROPE-10b", kinds=("attention",), requires=_cell("ROPE-10b"))
def test_rope_keeps_its_loss_past_the_training_length(record, pytestconfig):
    judge("ROPE-10b", pytestconfig)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.claim("ROPE-14", kinds=("rotary",), requires=_cell("ROPE-14"))
def test_linear_scaling_beats_plain_rope_past_the_training_length(record, pytestconfig):
    judge("ROPE-14", pytestconfig)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.claim("EXT-1", kinds=("attention",), requires=_cell("EXT-1"))
def test_rope_extrapolates_better_than_sinusoidal_better_than_learnable(record, pytestconfig):
    judge("EXT-1", pytestconfig)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.claim("EXT-2", kinds=("additive",), requires=_cell("EXT-2"))
def test_learnable_cannot_run_past_the_training_length(record, pytestconfig):
    judge("EXT-2", pytestconfig)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.claim("EXT-3", kinds=("additive",), requires=_cell("EXT-3"))
def test_sinusoidal_handles_slightly_longer_sequences(record, pytestconfig):
    judge("EXT-3", pytestconfig)
