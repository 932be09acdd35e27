"""The length-extrapolation experiment and ALiBi (:mod:`posenc.experiments.length_extrapolation`,
:mod:`posenc.encoders.alibi`).

* the Markov chain's entropy floor against counts from sampled sequences;
* every verdict rule on synthetic result tables, each shown reaching each of its outcomes;
* a reduced run through the real code path (worker processes included) writing the JSON,
  Markdown, TensorBoard events and PNG;
* ALiBi's slopes (Press et al. 2022 and the authors' ``get_slopes``), a bias that depends on
  ``q − k`` only, causality, no parameters, clear errors.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from posenc.encoders.alibi import ALiBiAttention, ALiBiBias, alibi_slopes
from posenc.experiments import length_extrapolation as experiment
from posenc.experiments.length_extrapolation import ExperimentConfig, MarkovChain, TinyLM, spread_order, verdicts
from posenc.experiments.length_extrapolation.verdicts import against_nope, past_training
from posenc.tools.extrapolation import parse_config
from posenc.harness.catalogue.states import State
from tests.spec_runs import interruptible

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- the chain


def test_entropy_floor_matches_counts_from_sampled_sequences():
    chain = MarkovChain.generate(vocab=16, successors=3, seed=0)
    tokens = chain.sample(400, 256, torch.Generator().manual_seed(1))
    v = chain.vocab
    triples = torch.bincount((tokens[:, :-2] * v * v + tokens[:, 1:-1] * v + tokens[:, 2:]).flatten(),
                             minlength=v**3).double().view(v * v, v)
    contexts = triples.sum(-1, keepdim=True)
    seen = triples > 0
    plug_in = float(-(triples[seen] * (triples / contexts.clamp_min(1))[seen].log()).sum() / triples.sum())
    assert plug_in == pytest.approx(chain.entropy_floor(), abs=0.02)
    assert chain.entropy_floor() < chain.baselines()["order1_entropy"] < chain.baselines()["order0_entropy"]


def test_pairs_start_stationary_and_the_stationary_distribution_is_a_fixed_point():
    chain = MarkovChain.generate(vocab=16, successors=3, seed=0)
    following = torch.einsum("ab,abc->bc", chain.stationary, chain.transition)
    assert torch.allclose(following, chain.stationary, atol=1e-12)
    tokens = chain.sample(20000, 2, torch.Generator().manual_seed(2))
    first_pairs = torch.bincount(tokens[:, 0] * chain.vocab + tokens[:, 1], minlength=chain.vocab**2) / 20000
    assert (first_pairs.double() - chain.stationary.flatten()).abs().max() < 0.01


def test_windowed_mask_lets_each_query_see_at_most_window_keys():
    model = TinyLM("nope", ExperimentConfig.quick(workers=1))
    mask = model.attention_mask(10, window=4)[0]
    visible = torch.isfinite(mask).sum(-1)
    assert visible.tolist() == [min(i + 1, 4) for i in range(10)]
    assert bool(torch.isneginf(mask[torch.ones(10, 10, dtype=torch.bool).triu(1)]).all())


# ---------------------------------------------------------------- verdict rules on synthetic tables

L = 16
LONGER = (32, 64, 128)


def entry(loss: float | str, n: int, base: float | None = None) -> dict:
    """One length's entry: ``loss`` on every L-position bucket past the first, ``base`` on the first."""
    if loss == "raises":
        return {"raises": f"ValueError: position 31 is past the learnable table of max_len={L}"}
    result = {"loss": loss, "accuracy": 0.5, "buckets": [base if base else loss] + [loss] * (n // L - 1)}
    return {**result, "ratio": loss / base} if base else result


def table(losses: dict[str, list[list]], variants: dict[str, list[list]] | None = None) -> dict:
    """Results with ``losses[encoding][seed] = [loss at L, 2L, 4L, 8L]`` (a float or "raises") and
    RoPE re-scored with ``variants[name][seed] = [loss at 2L, 4L, 8L]``."""
    runs = {}
    for encoding, by_seed in losses.items():
        runs[encoding] = {}
        for seed, row in enumerate(by_seed):
            base = row[0]
            runs[encoding][str(seed)] = {
                "lengths": {str(n): entry(v, n, base if n > L else None) for n, v in zip((L, *LONGER), row)},
                "windowed": {str(n): entry(v, n, base) for n, v in zip(LONGER, row[1:])},
                "train": {"curve": [[1, 2.0]], "final_loss": 2.0, "seconds": 1.0},
            }
            if encoding == "rope" and variants:
                runs[encoding][str(seed)]["rope_variants"] = {
                    name: {str(n): entry(v, n, base) for n, v in zip(LONGER, rows[seed])} for name, rows in variants.items()}
    return {"config": {"train_length": L, "multipliers": [1, 2, 4, 8], "vocab": 16}, "chain": {"entropy_floor": 0.8},
            "runs": runs}


FLAT = [[1.0, 1.0, 1.05, 1.08]] * 3
RISING = [[1.0, 1.5, 2.0, 3.0]] * 3
RAISES = [[1.0, "raises", "raises", "raises"]] * 3
NOPE = [[1.0, 1.3, 1.8, 2.3]] * 3  # a model with no positions: worse past L, but never wild
BASE = {"learnable": RAISES, "hybrid": RAISES, "nope": NOPE}


def outcome(claim: str, losses: dict) -> str:
    return verdicts(table({**BASE, **losses}))[claim].outcome


def test_spread_order_reaches_all_three_outcomes():
    assert spread_order([1.0, 1.1], [1.2, 1.3]) == State.HOLDS
    assert spread_order([1.4, 1.5], [1.2, 1.3]) == State.REFUTED
    assert spread_order([1.0, 1.25], [1.2, 1.3]) == State.UNDECIDED


def test_rope_keeps_its_loss_holds_refuted_or_undecided_by_seed_agreement():
    assert outcome("ROPE-10b", {"rope": FLAT}) == State.HOLDS
    assert outcome("ROPE-10b", {"rope": RISING}) == State.REFUTED
    assert outcome("ROPE-10b", {"rope": [FLAT[0], RISING[0], FLAT[0]]}) == State.UNDECIDED
    assert outcome("ROPE-10b", {"rope": [[1.0, 1.0, 1.0, 1.11]] * 3}) == State.REFUTED  # the 10% bar, at any k
    verdict = verdicts(table({**BASE, "rope": FLAT}))["ROPE-10b"]
    assert "1.1" in verdict.rule and verdict.evidence["ratios_by_seed"]["0"]["128"] == pytest.approx(1.08)


def test_extrapolation_ranking_uses_the_whole_seed_spread_and_ranks_no_model_that_cannot_run():
    better = [[1.0, 1.1, 1.2, 1.3], [1.0, 1.12, 1.22, 1.32]]
    worse = [[1.0, 1.5, 2.0, 3.0], [1.0, 1.6, 2.1, 3.1]]
    overlapping = [[1.0, 1.11, 1.5, 2.0], [1.0, 1.2, 1.6, 2.0]]
    # the learnable model cannot run past L: not ranked, so the claim's second pair cannot be decided
    assert outcome("EXT-1", {"rope": better, "sinusoidal": worse}) == State.NOT_DECIDABLE
    assert outcome("EXT-1", {"rope": worse, "sinusoidal": better}) == State.REFUTED
    assert outcome("EXT-1", {"rope": better, "sinusoidal": overlapping}) == State.NOT_DECIDABLE
    # sinusoidal against a learnable table that runs past L: the spread rule decides
    runs = {"rope": better, "sinusoidal": worse}
    assert outcome("EXT-1", {**runs, "learnable": [[1.0, 1.0, 1.0, 1.0]] * 2}) == State.REFUTED
    assert outcome("EXT-1", {**runs, "learnable": [[1.0, 9.0, 9.0, 9.0]] * 2}) == State.HOLDS
    assert outcome("EXT-1", {"rope": better, "sinusoidal": overlapping,
                             "learnable": [[1.0, 9.0, 9.0, 9.0]] * 2}) == State.UNDECIDED
    evidence = verdicts(table({**BASE, **runs}))["EXT-1"].evidence
    assert evidence["sinusoidal_better_than_learnable"]["by_length"]["32"]["learnable"] == "cannot run past L"
    assert evidence["rope_better_than_sinusoidal"]["by_length"]["32"]["rope"] == [1.1, 1.12]


def test_past_training_reads_the_positions_past_l_only():
    results = table({**BASE, "rope": [[1.0, 2.0, 3.0, 4.0]] * 3})
    assert past_training(results, "rope", 64) == [3.0] * 3  # the first L positions (loss 1.0) are left out
    assert past_training(results, "learnable", 64) is None
def test_learnable_cannot_run_past_its_table_holds_only_with_a_clear_error_everywhere():
    assert outcome("EXT-2", {}) == State.HOLDS
    assert outcome("EXT-2", {"learnable": FLAT}) == State.REFUTED
    assert outcome("EXT-2", {"learnable": [RAISES[0], FLAT[0], RAISES[0]]}) == State.REFUTED


def test_sinusoidal_handles_slightly_longer_sequences_only_if_it_beats_nope_past_l():
    low, middle, high = [[1.0, 1.1, 1.1, 1.1]] * 3, [[1.0, 1.2, 1.5, 2.0]] * 3, [[1.0, 2.0, 3.0, 4.0]] * 3
    assert outcome("EXT-3", {"rope": low, "sinusoidal": middle}) == State.HOLDS  # below NoPE's 1.3 at 2L
    assert outcome("EXT-3", {"rope": low, "sinusoidal": high}) == State.REFUTED  # worse than no positions at 2L
    assert outcome("EXT-3", {"rope": high, "sinusoidal": middle}) == State.REFUTED  # better than RoPE: not medium
    assert outcome("EXT-3", {"rope": low, "sinusoidal": [[1.0, 1.2, math.inf, 2.0]] * 3}) == State.REFUTED
    overlapping = [[1.0, 1.25, 3.0, 4.0], [1.0, 1.28, 3.0, 4.0], [1.0, 1.35, 3.0, 4.0]]  # NoPE's 1.3 inside at 2L
    assert outcome("EXT-3", {"rope": low, "sinusoidal": overlapping}) == State.UNDECIDED
    evidence = verdicts(table({**BASE, "rope": low, "sinusoidal": high}))["EXT-3"].evidence
    assert evidence["positions_past_L_at_2L"] == {"sinusoidal": [2.0] * 3, "nope": [1.3] * 3, "rope": [1.1] * 3}


def test_linear_scaling_is_judged_against_plain_rope_without_fine_tuning():
    rope = [[1.0, 1.5, 2.0, 3.0]] * 3
    helps, hurts = [[1.2, 1.5, 2.0]] * 3, [[2.0, 1.5, 2.0]] * 3
    assert verdicts(table({**BASE, "rope": rope}, {"position_interpolation": helps}))["ROPE-14"].outcome == State.HOLDS
    assert verdicts(table({**BASE, "rope": rope}, {"position_interpolation": hurts}))["ROPE-14"].outcome == \
        State.REFUTED
    assert verdicts(table({**BASE, "rope": rope}))["ROPE-14"].outcome == State.NOT_DECIDABLE  # never re-scored


def test_against_nope_names_where_each_encoding_is_worse_than_no_positions():
    results = table({**BASE, "rope": [[1.0, 1.1, 2.0, 3.0]] * 3, "sinusoidal": [[1.0, 2.0, 3.0, 4.0]] * 3},
                    {"position_interpolation": [[2.0, 2.0, 3.0]] * 3})
    table_ = against_nope(results)
    assert table_["rope"] == {"32": "better", "64": "worse", "128": "worse"}
    assert table_["sinusoidal"] == {"32": "worse", "64": "worse", "128": "worse"}
    assert table_["rope, position_interpolation"]["32"] == "worse"
    assert "learnable" not in table_  # cannot run past L: nothing to compare


def test_hybrid_verdicts_decide_what_the_experiment_can_and_say_why_not_for_the_rest():
    at_l = {"rope": [[1.0, 1, 1, 1], [1.02, 1, 1, 1]], "learnable": [[1.1, "raises", "raises", "raises"]] * 2}
    better = [[0.9, "raises", "raises", "raises"], [0.95, "raises", "raises", "raises"]]
    worse = [[1.2, "raises", "raises", "raises"]] * 2
    between = [[1.05, "raises", "raises", "raises"]] * 2
    assert verdicts(table({**at_l, "hybrid": better}))["HYB-1a"].outcome == State.HOLDS
    assert verdicts(table({**at_l, "hybrid": worse}))["HYB-1a"].outcome == State.REFUTED
    level = [[1.0, "raises", "raises", "raises"]] * 2  # inside RoPE's range at L
    assert verdicts(table({**at_l, "hybrid": level}))["HYB-1a"].outcome == State.UNDECIDED
    assert verdicts(table({**at_l, "hybrid": between}))["HYB-1a"].outcome == State.REFUTED  # worse than RoPE
    assert verdicts(table({**at_l, "hybrid": better}))["HYB-1b"].outcome == State.HOLDS
    assert verdicts(table({**at_l, "hybrid": [[1.0, 1, 1, 1]] * 2}))["HYB-1b"].outcome == State.REFUTED
    long_range = verdicts(table({**at_l, "hybrid": better}))["HYB-1c"]
    assert long_range.outcome == State.NOT_DECIDABLE and "order" in long_range.rule


def test_a_claim_whose_encodings_did_not_run_is_not_decidable():
    judged = verdicts(table({"rope": FLAT}))
    assert judged["ROPE-10b"].outcome == State.HOLDS
    assert judged["EXT-1"].outcome == State.NOT_DECIDABLE
    assert judged["EXT-1"].evidence[State.NOT_RUN] == ["sinusoidal", "learnable"]


# ---------------------------------------------------------------- a reduced run, end to end


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("extrapolation")
    progress = io.StringIO()
    config = ExperimentConfig.quick(steps=4, warmup_steps=2, workers=min(2, experiment.default_workers()))
    results = experiment.run_experiment(config, out_dir=out, progress=progress)
    return results, out, progress.getvalue()


def test_reduced_run_writes_json_markdown_tensorboard_and_png(reduced_run):
    results, out, progress = reduced_run
    saved = json.loads((out / "results.json").read_text())
    assert saved["chain"]["entropy_floor"] == pytest.approx(results["chain"]["entropy_floor"])
    assert set(saved["verdicts"]) == set(experiment.VERDICT_RULES)
    assert saved["wall_seconds"] > 0 and saved["machine"]["cpu_count"] >= 1
    assert saved["runs"]["learnable"]["0"]["lengths"]["32"]["raises"].startswith("ValueError: position 31")
    assert math.isfinite(saved["runs"]["rope"]["0"]["rope_variants"]["yarn"]["64"]["loss"])
    assert len(saved["runs"]["sinusoidal"]["0"]["lengths"]["64"]["buckets"]) == 4
    markdown = (out / "results.md").read_text()
    assert "## Verdicts" in markdown and "| learnable | " in markdown and "raises" in markdown
    assert list((out / "tensorboard" / "seed0").glob("events.out.tfevents.*"))
    from PIL import Image

    with Image.open(out / "loss_by_position.png") as image:
        assert image.size == (900, 560)
    assert "rope seed 0: step" in progress and "loss" in progress


def test_reduced_run_tensorboard_holds_loss_against_length_and_the_image(reduced_run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, _ = reduced_run
    seed_run = EventAccumulator(str(out / "tensorboard" / "seed0")).Reload()
    steps = [e.step for e in seed_run.Scalars("extrapolation/loss_vs_length/rope")]
    assert steps == [16, 32, 64]
    assert [e.step for e in seed_run.Scalars("extrapolation/loss_vs_length/learnable")] == [16]
    mean_run = EventAccumulator(str(out / "tensorboard" / "mean")).Reload()
    assert "extrapolation/loss_by_position" in mean_run.Tags()["images"]


def test_a_job_is_deterministic_given_its_encoding_and_seed():
    config = ExperimentConfig.quick(steps=3, warmup_steps=1, workers=1, multipliers=(1, 2))
    chain = MarkovChain.generate(config.vocab, config.successors, config.chain_seed)
    eval_sets = experiment.evaluation_sets(config, chain)
    first, second = (experiment.run_job("alibi", 5, config, chain, eval_sets, lambda line: None) for _ in range(2))
    assert first["lengths"] == second["lengths"] and first["windowed"] == second["windowed"]


def test_command_line_options_reach_the_config():
    config, out = parse_config(["--quick", "--seeds", "2", "--steps", "7", "--workers", "1",
                                "--encodings", "rope", "alibi", "--out", "somewhere"])
    assert (config.seeds, config.steps, config.workers, config.encodings, out) == ((0, 1), 7, 1, ("rope", "alibi"),
                                                                                   "somewhere")
    assert config.train_length == 16 and parse_config([])[0] == ExperimentConfig()
    with pytest.raises(SystemExit):
        parse_config(["--workers", "999"])


# ---------------------------------------------------------------- ALiBi


def official_get_slopes(n: int) -> list[float]:
    """ofirpress/attention_with_linear_biases, ``get_slopes``."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + official_get_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_slopes_follow_the_paper():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    for n in range(1, 40):
        assert alibi_slopes(n).tolist() == pytest.approx(official_get_slopes(n), rel=1e-12), n
    assert alibi_slopes(8).dtype == torch.float64
    with pytest.raises(ValueError, match="n_heads must be a positive integer"):
        alibi_slopes(0)


def test_alibi_bias_depends_only_on_the_offset_and_is_causal():
    bias = ALiBiBias(4)
    positions = torch.arange(12)
    expected = -alibi_slopes(4).float()[:, None, None] * (positions[:, None] - positions[None, :]).float()
    out = bias(positions)
    assert out.shape == (4, 12, 12) and out.dtype == torch.float32
    lower = torch.ones(12, 12, dtype=torch.bool).tril()
    assert torch.equal(out[:, lower], expected[:, lower])
    assert bool(torch.isneginf(out[:, ~lower]).all())
    assert torch.equal(bias(positions + 1000), out)  # a shift changes nothing
    batched = bias(torch.stack((positions, positions + 7)), dtype=torch.float64)
    assert batched.shape == (2, 4, 12, 12) and batched.dtype == torch.float64
    assert torch.equal(batched[0], batched[1])


def test_alibi_has_no_position_parameters():
    assert list(ALiBiBias(8).parameters()) == []
    attention = ALiBiAttention(32, 4)
    assert {name for name, _ in attention.named_parameters()} == {"qkv.weight", "qkv.bias", "out.weight", "out.bias"}
    assert ALiBiBias(6).half().slopes.dtype == torch.float64


def test_alibi_attention_is_causal_and_shift_invariant():
    torch.manual_seed(0)
    attention = ALiBiAttention(32, 4)
    x = torch.randn(2, 10, 32)
    out = attention(x)
    changed = x.clone()
    changed[:, 6:] = torch.randn(2, 4, 32)
    assert torch.allclose(attention(changed)[:, :6], out[:, :6], atol=1e-6)
    assert torch.allclose(attention(x, offset=500), out, atol=1e-5)
    windowed = ALiBiAttention(32, 4, max_len=3)
    windowed.load_state_dict(attention.state_dict())
    far = x.clone()
    far[:, 0] = torch.randn(2, 32)
    assert torch.allclose(windowed(far)[:, 3:], windowed(x)[:, 3:], atol=1e-6)  # token 0 is out of their window


def test_alibi_refuses_bad_input_with_clear_errors():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        ALiBiAttention(30, 4)
    attention = ALiBiAttention(32, 4)
    with pytest.raises(ValueError, match="rank 3"):
        attention(torch.randn(10, 32))
    with pytest.raises(TypeError, match="floating-point dtype"):
        attention(torch.ones(1, 4, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="must be integers"):
        ALiBiBias(4)(torch.tensor([0.0, 1.5]))
    with pytest.raises(ValueError, match=r"rank 1 \(seq,\) or 2 \(batch, seq\)"):
        ALiBiBias(4)(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at most 16777216"):
        ALiBiBias(4)(torch.tensor([0, 2**24 + 1]))


# ---------------------------------------------------------------- the kept run, judged by the slow specs


def test_the_kept_run_is_judged_by_the_slow_specs_without_training(tmp_path):
    """``POSENC_EXPERIMENT=FILE.json`` judges a kept ``results.json``: the matrix cells follow from its losses."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POSENC_")},
           "POSENC_EXPERIMENT": str(ROOT / "docs" / "measurements" / "length-experiment.json")}
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "-m", "slow", "-q", "-p", "no:cacheprovider",
                           "--matrix-dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    cells = {(o["claim"], o["encoder"]): (o["state"], o["message"])
             for o in json.loads((tmp_path / "verdicts.json").read_text())["outcomes"]}
    assert cells[("EXT-3", "sinusoidal")][0] == State.REFUTED  # worse than NoPE just past L
    assert cells[("ROPE-14", "rope_linear_scaled")][0] == State.REFUTED  # worse than plain RoPE at 2L
    assert cells[("EXT-1", "attention_rope_causal")][0] == State.UNDECIDED
    assert State.NOT_DECIDABLE in cells[("EXT-1", "attention_rope_causal")][1]  # learnable is not ranked
    assert cells[("EXT-2", "learnable")][0] == State.HOLDS and cells[("ROPE-10b", "attention_rope_causal")][0] == \
        State.REFUTED
    assert "no surprise" in done.stdout


KEPT = ROOT / "docs" / "measurements"


def test_the_small_size_was_chosen_because_it_gives_the_default_runs_verdicts():
    """``POSENC_EXPERIMENT=small`` / ``--small``: the kept small run is ``ExperimentConfig.small()``
    (workers aside) and every verdict it reaches is the kept default run's."""
    small, default = (json.loads((KEPT / name).read_text())
                      for name in ("length-experiment-small.json", "length-experiment.json"))
    config = {k: v for k, v in small["config"].items() if k != "workers"}
    expected = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(ExperimentConfig.small()).items()
                if k != "workers"}
    assert config == expected, "ExperimentConfig.small() changed: run it again and keep its results.json"
    assert {c: v.outcome for c, v in verdicts(small).items()} == {c: v.outcome for c, v in verdicts(default).items()}
    assert ExperimentConfig.small().steps < ExperimentConfig().steps
    assert parse_config(["--small"])[0] == ExperimentConfig.small()
    with pytest.raises(SystemExit):
        parse_config(["--small", "--quick"])


def test_a_results_file_that_does_not_exist_is_refused(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POSENC_")},
           "POSENC_EXPERIMENT": str(tmp_path / "missing.json")}
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "-m", "slow", "-q", "-p", "no:cacheprovider",
                           "-k", "sinusoidal", "--matrix-dir", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert "no such results file" in done.stdout + done.stderr, done.stdout[-2000:]


# ---------------------------------------------------------------- the slow run stops when told to

MARK = "EXPERIMENT_STOP_PROBE"  # inherited by the run's worker processes, so they can be found after it


def _marked(value: str) -> list[int]:
    """Live processes whose environment carries ``MARK=value`` (Linux: /proc)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"{MARK}={value}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def _slow_run(tmp_path, *options) -> subprocess.Popen:
    """``pytest specs -m slow`` at the experiment's full size (minutes of training per job: a run
    that waited for its jobs instead of stopping them could not end in the tests' bounded waits)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}, MARK: tmp_path.name}
    command = [sys.executable, "-m", "pytest", "specs", "-m", "slow", "-q", "-p", "no:cacheprovider",
               "--matrix-dir", str(tmp_path / "reports"), *options]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=interruptible)



def _ended(run: subprocess.Popen, within: float) -> str:
    """The run's output once it ends; a run still going after ``within`` seconds is killed and fails
    the test (a liveness bound: stopping takes seconds, the jobs it must not wait for take minutes)."""
    try:
        return run.communicate(timeout=within)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        pytest.fail(f"the run did not stop within {within:g} s: it waited for its training jobs")


def _kill_marked(tmp_path) -> None:
    """Whatever a failed test left running (a regression's orphaned workers) is ended, not left training."""
    for pid in _marked(tmp_path.name):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _no_worker_left(tmp_path) -> list[int]:
    for _ in range(50):  # the processes end within a few seconds of the run
        left = _marked(tmp_path.name)
        if not left:
            return []
        time.sleep(0.2)
    return left


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
@pytest.mark.skipif(experiment.default_workers() < 2, reason="one CPU: the run trains in this process, no workers")
def test_a_timeout_stops_the_training_workers_and_blocks_the_other_cells(tmp_path):
    try:
        out = _ended(_slow_run(tmp_path, "--timeout", "8"), within=300)
        assert _no_worker_left(tmp_path) == [], "training processes outlived the run"
    finally:
        _kill_marked(tmp_path)
    outcomes = json.loads((tmp_path / "reports" / "verdicts.json").read_text())["outcomes"]
    states = sorted(o["state"] for o in outcomes)
    assert states.count(State.TIMED_OUT) == 1 and states.count(State.BLOCKED) == len(states) - 1, (states, out[-2000:])
    blocked = [o["message"] for o in outcomes if o["state"] == State.BLOCKED]
    assert all("did not finish in this run" in m or " timed out in " in m for m in blocked), blocked  # never again
    assert any("did not finish in this run" in m for m in blocked), blocked


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
@pytest.mark.skipif(experiment.default_workers() < 2, reason="one CPU: the run trains in this process, no workers")
def test_an_interrupt_leaves_no_training_process_behind(tmp_path):
    run = _slow_run(tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(run.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        for _ in range(1200):  # until a training step is reported: the workers are training
            if any(" step " in line for line in list(lines)):
                break
            time.sleep(0.1)
        assert any(" step " in line for line in list(lines)), "the run never reported a training step"
        assert len(_marked(tmp_path.name)) > 1, "the run trains without worker processes"
        run.send_signal(signal.SIGINT)
        try:
            run.wait(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            pytest.fail("the run did not stop within 120 s: it waited for its training jobs")
        reader.join(timeout=10)
        out = "".join(lines)
        assert _no_worker_left(tmp_path) == [], "training processes outlived the interrupted run"
    finally:
        if run.poll() is None:
            run.kill()
        _kill_marked(tmp_path)
    assert "extrapolation: 6 encodings" in out, out[-2000:]  # progress reaches the terminal past pytest's capture
