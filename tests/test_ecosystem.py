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
  (PATH-2), and the cached scales, centred on an earlier call's length, serve a later call (ROPE-9).

x-transformers and transformers' other rope types raise nothing.
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

pytestmark = pytest.mark.xdist_group("ecosystem")
ROOT = Path(__file__).resolve().parents[1]
SURPRISES = {"unexpectedly failing", "crashed", "failing and crashed", "timed out", "unexpectedly holds", "blocked"}
#: (encoder, claim) cells that must read FAIL: the upstream defects above, and nothing else.
_HALF_PRECISION_POSITIONS = {"ROPE-1", "ROPE-4", "ROPE-8", "ROPE-11", "ROPE-13"}
KNOWN_DEFECTS = {
    ("hf_dynamic", "ROPE-9"), ("torchtune_rope", "contract"),
    *{("ret_rope", claim) for claim in _HALF_PRECISION_POSITIONS | {"ROPE-9", "contract"}},
    *{("ret_interpolate", claim) for claim in _HALF_PRECISION_POSITIONS | {"ROPE-14", "ROPE-9", "contract"}},
    ("ret_xpos", "PATH-2"), ("ret_xpos", "ROPE-9"),
}
ENCODERS = "hf_*,torchtune_*,xtf_*,ret_*"


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
    command = [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", "-n", "2",
               "--plugin", "posenc.ecosystem", "--encoders", ENCODERS, "--matrix-dir", str(out)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - start
    assert (out / "verdicts.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "verdicts.json").read_text()), result, wall


def test_known_defects_fail_and_nothing_else_is_red(ecosystem_run):
    verdicts, result, wall = ecosystem_run
    cells = {(encoder, claim): state for claim, row in verdicts["matrix"].items() for encoder, state in row.items()}
    red = {cell: state for cell, state in cells.items() if state in SURPRISES}
    assert set(red) == KNOWN_DEFECTS and set(red.values()) == {"unexpectedly failing"}, red
    assert result.returncode == 1
    print(f"ecosystem run: {len(verdicts['header']['encoders'])} encoders in {wall:.0f} s (-n 2)")


def test_each_known_defect_carries_a_reproducer(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    for encoder, claim in KNOWN_DEFECTS:
        found = [o for o in verdicts["outcomes"]
                 if (o["encoder"], o["claim"]) == (encoder, claim) and o["state"] == "unexpectedly failing"]
        assert found and all("--plugin posenc.ecosystem" in o["reproducer"] and o["python"] for o in found), found


def test_the_header_names_the_library_versions(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    libraries = verdicts["header"]["libraries"]
    assert set(libraries) == set(support.LIBRARIES) and "not installed" not in libraries.values(), libraries


def test_positions_in_the_input_dtype_fail_in_half_precision_only(ecosystem_run):
    verdicts, _, _ = ecosystem_run
    for o in verdicts["outcomes"]:
        if o["encoder"] in ("ret_rope", "ret_interpolate") and o["claim"] in _HALF_PRECISION_POSITIONS | {"ROPE-14"} \
                and o["state"] == "unexpectedly failing":
            assert o["test_id"].endswith(("-bfloat16]", "-float16]")), o["test_id"]
