"""transformers' causal LMs (``--plugin posenc.ecosystem --encoders 'lm_*'``): the model relations
on at least 15 architectures, every FAIL a known upstream finding with its reproducer, and the
findings page rendered from this run.

Known, in transformers 5.24.0 (``docs/findings/models.md``, each with a standalone script run here):

* ``model.to(torch.bfloat16)`` rounds the rotary ``inv_freq`` buffer of every RoPE architecture
  but dynamic NTK (which recomputes it in float32): a query far from its keys turns by the wrong
  angles, its logits off by about 1 at distance 3000 where bf16's own rounding moves them by
  about 0.1 (MODEL-6); keeping ``inv_freq`` in float32 after the cast removes it;
* past ``n_positions`` GPT-2 and GPT-J, and past ``max_seq_len`` MPT, raise errors that name no
  limit (``index out of range in self``, ``index 32 is out of bounds…``, a tensor size mismatch)
  (MODEL-7).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc.ecosystem import support
from posenc.ecosystem.findings import MODEL_ENCODERS, MODEL_FINDINGS, MODEL_MEASURED, MODEL_UNDECIDED, kept_matrix
from posenc.harness.catalogue.states import SURPRISES, State
from tests.spec_runs import WORKERS

pytestmark = pytest.mark.xdist_group("model_ecosystem")
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "findings" / "models.md"


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    out = tmp_path_factory.mktemp("models")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", *WORKERS, "--plugin",
               "posenc.ecosystem", "--encoders", MODEL_ENCODERS, "--matrix-dir", str(out)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert (out / "verdicts.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text()), result, wall


def test_at_least_fifteen_architectures_print_their_relations(model_run):
    verdicts, result, wall = model_run
    names = verdicts["header"]["encoders"]
    assert len(names) >= 15 and "whole models" in result.stdout, result.stdout[-2000:]
    assert all(verdicts["matrix"][f"MODEL-{i}"][name] != State.NOT_RUN for i in range(1, 9) for name in names)
    print(f"model run: {len(names)} models in {wall:.0f} s (-n 2)")


def test_every_fail_is_a_known_finding_and_nothing_else_is_red(model_run):
    verdicts, result, _ = model_run
    cells = {(encoder, claim): state for claim, row in verdicts["matrix"].items() for encoder, state in row.items()}
    red = {cell: state for cell, state in cells.items() if state in SURPRISES}
    assert set(red) == MODEL_FINDINGS and set(red.values()) == {State.UNEXPECTEDLY_FAILING}, red
    undecided = {cell for cell, state in cells.items() if state == State.UNDECIDED}
    assert undecided == set(MODEL_UNDECIDED), undecided
    assert result.returncode == 1


def test_the_bf16_findings_are_the_cast_not_autocast(model_run):
    """Every MODEL-6 finding names the cast in one pass (and, but on a hybrid whose decode step
    crosses a recurrent layer, decoded too), never bf16 autocast (which holds)."""
    verdicts, _, _ = model_run
    for o in verdicts["outcomes"]:
        if o["claim"] == "MODEL-6" and o["state"] == State.UNEXPECTEDLY_FAILING:
            ways = o["message"].split("lost precision under ", 1)[1].split(":", 1)[0].split("; ")
            assert ways[0] == "model.to(torch.bfloat16), in one pass", o["message"]
            assert all(way.startswith("model.to(torch.bfloat16)") for way in ways), o["message"]


def test_each_finding_carries_a_reproducer(model_run):
    verdicts, _, _ = model_run
    for encoder, claim in MODEL_FINDINGS:
        found = [o for o in verdicts["outcomes"] if (o["encoder"], o["claim"]) == (encoder, claim)
                 and o["state"] == State.UNEXPECTEDLY_FAILING]
        assert found and all("--plugin posenc.ecosystem" in o["reproducer"] and o["python"] for o in found), found


def test_the_findings_page_shows_this_run(model_run):
    verdicts, _, _ = model_run
    assert kept_matrix(verdicts) == json.loads((ROOT / MODEL_MEASURED).read_text()), \
        "the model matrix changed: python -m posenc docs --model-json VERDICTS.json --write"


def _snippet(first_line: str) -> str:
    page = PAGE.read_text()
    start = page.index(first_line)
    return page[start:page.index("```", start)]


def test_the_bf16_snippet_shows_the_far_query_off_and_the_fix():
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    ran = subprocess.run([sys.executable, "-c", _snippet("# transformers 5.24.0: model.to(torch.bfloat16) rounds")],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = [line for line in ran.stdout.splitlines() if line.startswith("query at")]
    rounded = {int(line.split()[2].rstrip(":")): float(line.split("= ")[1].split(",")[0]) for line in lines}
    kept = {int(line.split()[2].rstrip(":")): float(line.rsplit(" ", 1)[1]) for line in lines}
    assert rounded[3000] > 4 * rounded[16] and rounded[100_000] > 4 * rounded[16], ran.stdout
    assert max(kept.values()) < 4 * min(kept.values()), ran.stdout  # the fix: no growth with distance


def test_the_past_maximum_snippet_shows_errors_that_name_no_limit():
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    ran = subprocess.run([sys.executable, "-c", _snippet("# transformers 5.24.0: past their maximum length")],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    said = dict(line.split(": ", 1) for line in ran.stdout.splitlines() if line.startswith(("GPT-2", "GPT-J", "MPT")))
    assert said["GPT-2"] == "IndexError: index out of range in self", said
    assert said["GPT-J"].startswith("IndexError: index 32 is out of bounds") and said["MPT"].startswith("RuntimeError")


def test_keeping_inv_freq_in_float32_removes_every_bf16_finding():
    """The MODEL-6 findings checked without the harness's verdict: on every architecture it names,
    copying the float32 model's frequency buffers back after ``.to(bfloat16)`` makes a query far
    from its keys as close to the fp32 model as one near them, and without the copy it is not."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    import torch
    from transformers import DynamicCache

    import posenc
    import posenc.ecosystem  # noqa: F401  (registers the records)
    from posenc.ecosystem.findings import MODEL_CAST_ROUNDS_FREQUENCIES, MODEL_CAST_ROUNDS_MORE

    def decoded(m, position, ids):
        """One query at ``position`` decoded after 16 keys at 0 … 15."""
        with torch.no_grad():
            cache = DynamicCache(config=m.config)
            m(ids[:, :16], position_ids=torch.arange(16)[None], cache=cache)
            return m(ids[:, 16:], position_ids=torch.tensor([[position]]), attention_mask=torch.ones(1, 17),
                     cache=cache).logits.float()

    def one_pass(m, position, ids):
        """The same query in one pass at positions [0 … 15, position]."""
        with torch.no_grad():
            positions = torch.cat((torch.arange(16), torch.tensor([position])))[None]
            return m(ids, position_ids=positions, attention_mask=torch.ones(1, 17)).logits[:, -1:].float()

    def far_over_near(model, reference, ids):
        """The larger, over both paths, of a far query's distance to fp32 over a near one's."""
        ratios = []
        for query in (decoded, one_pass):
            distance = {p: float((query(model, p, ids) - query(reference, p, ids)).abs().max())
                        for p in (16, 17, 18, 3000, 100_000)}
            ratios.append(max(distance[3000], distance[100_000]) / max(distance[16], distance[17], distance[18]))
        return max(ratios)

    for name in (*MODEL_CAST_ROUNDS_FREQUENCIES, *MODEL_CAST_ROUNDS_MORE):
        build = posenc.get(name).build
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            reference = build(posenc.BuildConfig()).model
        cast, fixed = (type(reference)(reference.config).eval() for _ in range(2))
        for copy in (cast, fixed):
            copy.load_state_dict(reference.state_dict())
            copy.to(torch.bfloat16)
        for (module_name, module), source in zip(fixed.named_modules(), reference.modules(), strict=True):
            for buffer, value in source.named_buffers(recurse=False):
                if "freq" in buffer:
                    setattr(module, buffer, value.clone())
        ids = torch.randint(3, 128, (1, 17), generator=torch.Generator().manual_seed(30))
        assert far_over_near(cast, reference, ids) > 4, name
        assert far_over_near(fixed, reference, ids) < 4, name


def _tiny(name):
    """The record's transformers model as built, outside the harness (its config, seed 0)."""
    import torch

    import posenc
    import posenc.ecosystem  # noqa: F401  (registers the records)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return posenc.get(name).build(posenc.BuildConfig()).model


def _cache_of(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


def test_a_cache_kept_across_the_rescaling_threshold_is_stale_without_the_harness():
    """MODEL-2/3's findings on dynamic NTK and longrope, checked with transformers alone: a forward
    that continues a cache past the threshold differs from a fresh pass on the prefix, and the
    same prefix below the threshold does not."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    import torch

    from posenc.ecosystem.findings import MODEL_STALE_CACHE

    for name in MODEL_STALE_CACHE:
        model = _tiny(name)
        threshold = model.config.max_position_embeddings if "dynamic" in name else \
            model.config.original_max_position_embeddings
        ids = torch.randint(3, 128, (1, threshold + 4), generator=torch.Generator().manual_seed(1))

        def continued(end):
            """A prefill below the threshold, then one token a call (a decode) to ``end``."""
            prefill = max(4, threshold - 4)
            with torch.no_grad():
                out = model(ids[:, :prefill], use_cache=True)
                for j in range(prefill, end):
                    out = model(ids[:, j : j + 1], cache=_cache_of(out), position_ids=torch.tensor([[j]]))
                return out.logits[0, -1]

        def fresh(end):
            with torch.no_grad():
                return _tiny(name)(ids[:, :end]).logits[0, -1]

        below = float((continued(threshold - 2) - fresh(threshold - 2)).abs().max())
        past = float((continued(threshold + 4) - fresh(threshold + 4)).abs().max())
        assert below < 1e-3 < 0.1 < past, (name, below, past)


def test_bamba_continues_a_chunk_at_other_positions_without_position_ids():
    """MODEL-3's finding on Bamba, with transformers alone: a chunk of 7 continuing a cache of 5
    matches the full pass with position ids, and not without them."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    import torch

    model = _tiny("lm_bamba")
    ids = torch.randint(3, 128, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids).logits[:, 5:]
        given = model(ids[:, 5:], cache=_cache_of(model(ids[:, :5], use_cache=True)),
                      position_ids=torch.arange(5, 12)[None]).logits
        own = model(ids[:, 5:], cache=_cache_of(model(ids[:, :5], use_cache=True))).logits
    assert float((given - full).abs().max()) < 1e-4 < 0.1 < float((own - full).abs().max())


def test_bamba_decodes_a_bare_step_at_position_0():
    """MODEL-2's finding on Bamba, with transformers alone: ``model(ids)``, then the next id with
    the cache and nothing else, differs from the full pass (its position is read from a Mamba
    layer's cache length, 0); the same step with its position id given matches."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    import torch

    model = _tiny("lm_bamba")
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        bare = model(ids[:, 5:], cache=_cache_of(model(ids[:, :5], use_cache=True))).logits[:, -1]
        given = model(ids[:, 5:], cache=_cache_of(model(ids[:, :5], use_cache=True)),
                      position_ids=torch.tensor([[5]])).logits[:, -1]
    assert float((given - full).abs().max()) < 1e-4 < 0.1 < float((bare - full).abs().max())


def test_gpt_oss_lets_packed_documents_attend_each_other():
    """MODEL-8's finding on gpt-oss, with transformers alone: two documents packed with position
    ids that restart; Llama's second document equals it alone, gpt-oss's does not."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    import torch

    ids = torch.randint(3, 128, (1, 12), generator=torch.Generator().manual_seed(3))
    positions = torch.cat((torch.arange(5), torch.arange(7)))[None]
    for name, leaks in (("lm_llama", False), ("lm_gpt_oss", True)):
        model = _tiny(name)
        with torch.no_grad():
            packed = model(ids, position_ids=positions, use_cache=False).logits[:, 5:]  # a training call
            alone = model(ids[:, 5:], use_cache=False).logits
        assert (float((packed - alone).abs().max()) > 0.1) == leaks, name
