"""The ecosystem's RoPEs (``--plugin posenc.ecosystem``): known upstream defects are FAIL on their
claims, the correct configurations raise nothing, and a missing library is a clear skip.

Known, in the pinned versions (``pyproject.toml``, extra ``ecosystem``):

* transformers' ``dynamic`` rope type keeps the base grown by a longer call: a call of exactly
  ``max_position_embeddings`` positions afterwards differs from the same call on a fresh module
  (ROPE-9);
* torchtune 0.6.1 raises ``IndexError`` past ``max_seq_len``, naming no limit, although its
  docstring says the cache is recomputed, and a negative ``input_pos`` wraps to the table's end
  (the contract row);
* rotary-embedding-torch 0.9.1 forms positions in the input's dtype: in bf16 and fp16 the
  rotation is wrong from position 257 / 2049 (ROPE-1, ROPE-4, ROPE-8, ROPE-11, ROPE-13, and
  ROPE-14 with ``interpolate_factor``); a bf16 call of more than 256 positions writes its angle
  cache, which a later fp32 call reads (ROPE-9); a negative offset reads the end of the cache
  buffer (contract); with xPos, the cached-keys path gives other logits than the full path
  (PATH-2), and the cached scales, centred on an earlier call's length, serve a later call (ROPE-9);
* ``module.to(torch.bfloat16)`` (or float16) rounds the frequencies of transformers' rotary module
  (``inv_freq`` and ``original_inv_freq`` are float buffers), of rotary-embedding-torch (``freqs``
  is a float parameter) and of x-transformers (``inv_freq`` a float buffer): after the cast the
  rotation is wrong, a defect no library documents (PATH-3, every rope type and record of the three;
  torchtune keeps its cache and holds).

Nothing else of x-transformers and transformers' other rope types is red. Outside the records:
rotary-embedding-torch's ``rotate_queries_with_cached_keys`` with xPos and ``seq_dim=-3`` crashes,
or scales each head as another position (the findings page's snippet, run here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posenc.ecosystem import support
from posenc.ecosystem.findings import ENCODERS, FINDINGS, HALF_PRECISION_POSITIONS
from posenc.harness.catalogue.states import State
from tests.spec_runs import WORKERS

pytestmark = pytest.mark.xdist_group("ecosystem")
ROOT = Path(__file__).resolve().parents[1]
SURPRISES = {State.UNEXPECTEDLY_FAILING, State.CRASHED, State.FAILING_AND_CRASHED, State.TIMED_OUT, State.UNEXPECTEDLY_HOLDS, State.BLOCKED}
KNOWN_DEFECTS = FINDINGS  # (encoder, claim) cells that must read FAIL: the upstream defects above, and nothing else


def test_a_missing_library_is_a_skip_with_the_install_hint():
    build = support.missing("somelibrary")
    with pytest.raises(pytest.skip.Exception, match=r"somelibrary is not installed: pip install -e '\.\[ecosystem\]'"):
        build(None)


@pytest.fixture(scope="module")
def ecosystem_run(tmp_path_factory):
    for library in support.LIBRARIES:
        if not support.available(library):
            pytest.skip(f"{library} is not installed: {support.INSTALL_HINT}")
    out = tmp_path_factory.mktemp("ecosystem")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", *WORKERS,
               "--plugin", "posenc.ecosystem", "--encoders", ENCODERS, "--matrix-dir", str(out)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert (out / "verdicts.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text()), result, wall


def test_known_defects_fail_and_nothing_else_is_red(ecosystem_run):
    verdicts, result, wall = ecosystem_run
    cells = {(encoder, claim): state for claim, row in verdicts["matrix"].items() for encoder, state in row.items()}
    red = {cell: state for cell, state in cells.items() if state in SURPRISES}
    assert set(red) == KNOWN_DEFECTS and set(red.values()) == {State.UNEXPECTEDLY_FAILING}, red
    assert result.returncode == 1
    print(f"ecosystem run: {len(verdicts['header']['encoders'])} encoders in {wall:.0f} s (-n 2)")


def test_the_findings_page_shows_this_run(ecosystem_run):
    """docs/findings/ecosystem.md's table is rendered from a kept run: it must be the run seen here."""
    from posenc.ecosystem.findings import MEASURED, kept_matrix

    verdicts, _, _ = ecosystem_run
    kept = json.loads((ROOT / MEASURED).read_text())
    assert kept_matrix(verdicts) == kept, \
        "the ecosystem matrix changed: python -m posenc docs --ecosystem-json VERDICTS.json --write"


def test_each_known_defect_carries_a_reproducer(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    for encoder, claim in KNOWN_DEFECTS:
        found = [o for o in verdicts["outcomes"]
                 if (o["encoder"], o["claim"]) == (encoder, claim) and o["state"] == State.UNEXPECTEDLY_FAILING]
        assert found and all("--plugin posenc.ecosystem" in o["reproducer"] and o["python"] for o in found), found


def test_the_header_names_the_library_versions(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    libraries = verdicts["header"]["libraries"]
    assert set(libraries) == set(support.LIBRARIES) and "not installed" not in libraries.values(), libraries


def test_positions_in_the_input_dtype_fail_in_half_precision_only(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    for o in verdicts["outcomes"]:
        if o["encoder"] in ("ret_rope", "ret_interpolate") and o["claim"] in HALF_PRECISION_POSITIONS | {"ROPE-14"} \
                and o["state"] == State.UNEXPECTEDLY_FAILING:
            assert o["test_id"].endswith(("-bfloat16]", "-float16]")), o["test_id"]


@pytest.mark.parametrize("rope_type, family, parameters", [
    ("default", "default", {"base": 10000.0}),
    ("linear", "linear", {"factor": 4.0, "base": 10000.0}),
    ("yarn", "yarn", {"factor": 4.0, "original_max_position": 2048, "base": 10000.0}),
    ("llama3", "llama3", {"factor": 8.0, "original_max_position": 8192, "base": 10000.0}),
])
def test_identify_names_transformers_rope_types_from_the_raw_library_functions(rope_type, family, parameters):
    """No record: the library's own module and apply function, identified from their outputs."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from posenc.ecosystem.transformers_rope import _parameters
    from posenc.harness.identify.identification import identify
    from posenc.harness.catalogue.records import SPEC_CONFIG

    rope_parameters, max_positions = _parameters(rope_type, SPEC_CONFIG)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=max_positions,
                         rope_parameters=rope_parameters)
    found = identify(LlamaRotaryEmbedding(config), protocol="cos_sin", head_dim=16,
                     apply=lambda q, k, cos, sin: apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2))
    assert (found.layout, found.family) == ("half_split", family), found.report()
    for key, value in parameters.items():
        assert found.parameters[key] == pytest.approx(value, rel=1e-6), found.report()


@pytest.mark.parametrize("rope_parameters, family, parameters", [
    ({"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
      "original_max_position_embeddings": 8192}, "llama3",
     {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0, "original_max_position": 8192}),  # Llama 4
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 131072, "truncate": False}, "yarn",
     {"factor": 4.0, "original_max_position": 131072, "truncate": False}),
])
def test_identify_names_llama4_and_untruncated_yarn_as_transformers_computes_them(rope_parameters, family, parameters):
    """Settings the schedules once could not express: transformers' own θ, named with every parameter."""
    if not support.available("transformers"):
        pytest.skip(f"transformers is not installed: {support.INSTALL_HINT}")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from posenc.harness.identify.identification import identify

    config = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters={**rope_parameters, "rope_theta": 10000.0},
                         max_position_embeddings=int(rope_parameters["factor"] * rope_parameters[
                             "original_max_position_embeddings"]))
    found = identify(LlamaRotaryEmbedding(config), protocol="cos_sin", head_dim=64,
                     apply=lambda q, k, cos, sin: apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2))
    assert (found.family, found.parameters) == (family, {**parameters, "base": 10000.0}), found.report()


def test_identify_reads_torchtune_and_x_transformers_raw():
    for library in ("torchtune", "x-transformers"):
        if not support.available(library):
            pytest.skip(f"{library} is not installed: {support.INSTALL_HINT}")
    from torchtune.modules import RotaryPositionalEmbeddings
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    from posenc.harness.identify.identification import identify

    torchtune_rope = RotaryPositionalEmbeddings(16, max_seq_len=8192)
    found = identify(lambda x, p: torchtune_rope(x, input_pos=p), head_dim=16)
    assert (found.layout, found.family, found.parameters["base"]) == ("interleaved", "default", 10000.0), found.report()
    assert found.limit.startswith("raises at position 8193: IndexError"), found.limit

    xtf = RotaryEmbedding(16)

    def pair(q, k, m, n):
        freqs, _ = xtf(torch.cat((m, n), dim=-1))
        half = q.shape[1]
        return (apply_rotary_pos_emb(q.transpose(1, 2), freqs[:, :half]).transpose(1, 2),
                apply_rotary_pos_emb(k.transpose(1, 2), freqs[:, half:]).transpose(1, 2))

    found = identify(pair, protocol="pair", head_dim=16)
    assert (found.layout, found.family, found.parameters["base"]) == ("interleaved", "default", 10000.0), found.report()


def test_identify_reads_rotary_embedding_torch_raw_and_names_its_bf16_positions():
    if not support.available("rotary-embedding-torch"):
        pytest.skip(f"rotary-embedding-torch is not installed: {support.INSTALL_HINT}")
    from rotary_embedding_torch import RotaryEmbedding

    from posenc.harness.identify.identification import identify

    rope = RotaryEmbedding(16, seq_before_head_dim=True)

    def at_positions(x, positions):  # the library takes an offset: one call per token
        return torch.cat([rope.rotate_queries_or_keys(x[:, j : j + 1], offset=int(p))
                          for j, p in enumerate(positions.reshape(-1).tolist())], dim=1)

    found = identify(at_positions, head_dim=16)
    assert (found.layout, found.family, found.parameters["base"]) == ("interleaved", "default", 10000.0), found.report()
    assert "input's dtype" in found.precision["bfloat16"] and "fp32 or wider" in found.precision["float32"], \
        found.precision


def test_the_cached_keys_xpos_snippet_of_the_findings_page_shows_the_defect():
    if not support.available("rotary-embedding-torch"):
        pytest.skip(f"rotary-embedding-torch is not installed: {support.INSTALL_HINT}")
    page = (ROOT / "docs" / "findings" / "ecosystem.md").read_text()
    marker = "# rotary-embedding-torch 0.9.1, use_xpos=True: rotate_queries_with_cached_keys"
    snippet = page[page.index(marker):page.index("```", page.index(marker))]
    ran = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    crash, silent = ran.stdout.splitlines()
    assert crash.startswith("seq_dim=-3: RuntimeError The size of tensor a (2) must match"), crash
    assert float(silent.rsplit("=", 1)[1]) > 1e-3, silent  # wrong scales, no error
