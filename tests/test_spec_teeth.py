"""Specs that once could not fail, each shown failing on the encoder it used to pass.

The cheap cases are mutants (``tests/mutants/``: ``learnable_reads_next_row`` for ABS-1,
``linear_attention_without_rotation`` for LIN-2, ``rope_claims_without_rotation_ignoring_positions``
for ROPE-4 and ATT-4 on designs without ROPE-1, ``rope_positions_wrap_every_1024`` for pinned
shifts that are multiples of a power of two, ``rope_positions_wrap_every_4096`` for pinned pairs
across 4096, ``learnable_wrong_row_at_even_positions`` for ABS-1 read at a few rows only), killed
in ``tests/test_mutants.py``. LIN-1 is
measured (``-m perf``), so its case runs here: a softmax attention registered as linear. The
gradient check, judged with a record's declared fp32 precision, keeps its teeth too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from posenc.harness.catalogue.states import State

ROOT = Path(__file__).resolve().parents[1]


def run_specs(tmp_path, *options) -> tuple[dict, str]:
    """``pytest specs OPTIONS`` in a subprocess, without the user's POSENC_* variables: its report and stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", *options,
               "--matrix-dir", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    runs = sorted((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    assert runs, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((runs[-1] / "verdicts.json").read_text()), result.stdout[-3000:]


def test_lin1_refuses_a_softmax_attention_registered_as_linear(tmp_path):
    report, out = run_specs(tmp_path, "-m", "perf", "-k", "test_linear_attention_time_is_linear_in_length",
                            "--plugin", "tests/plugins/softmax_as_linear.py",
                            "--encoders", "softmax_attention_as_linear*,linear_attention_rope")
    matrix = report["matrix"]
    # FAIL on an idle machine; where other jobs flatten the softmax control's slope, or the timed
    # growth itself, the cell reads undecided and says why: never a pass (a slow machine is never red)
    for name in ("softmax_attention_as_linear", "softmax_attention_as_linear_capped"):
        assert matrix["LIN-1"][name] in (State.UNEXPECTEDLY_FAILING, State.UNDECIDED), (name, out)
    messages = [o["message"] for o in report["outcomes"] if o["claim"] == "LIN-1" and o["state"] == State.UNDECIDED]
    assert all("cannot tell O(n) from O(n²)" in m or "the machine is busy" in m for m in messages), messages
    # only LIN-1's perf spec was selected: the cell is partial (undecided on a busy machine), never FAIL
    assert matrix["LIN-1"]["linear_attention_rope"] in (State.HOLDS_PARTIAL, State.UNDECIDED), out


def test_a_busy_machine_leaves_the_timing_claims_undecided_never_refuted(tmp_path):
    report, _ = run_specs(tmp_path, "-m", "perf", "-k",
                          "test_rope_overhead_inside_attention_is_small or test_forward_time_ranks_as_the_documents_table",
                          "--plugin", "tests/plugins/noisy_timer.py",
                          "--encoders", "attention_rope,published_learnable,published_sinusoidal,published_rope")
    judged = {(o["claim"], o["encoder"]): (o["state"], o["message"]) for o in report["outcomes"]}
    timing = {cell: state for cell, state in judged.items() if cell[0] in ("ROPE-12", "PERF-1")}
    assert {claim for claim, _ in timing} == {"ROPE-12", "PERF-1"}, judged
    assert {state for state, _ in timing.values()} == {State.UNDECIDED}, timing
    assert all("the machine is busy" in message for _, message in timing.values()), timing


def test_the_gradient_check_takes_fp32_computation_as_declared_and_keeps_its_teeth(tmp_path):
    """float64 input computed in fp32 (declared by angle_dtype): an exact gradient holds, where finite
    differences at float64's step read it as FAIL; a backward that rotates by R_p instead of R_pᵀ fails."""
    report, out = run_specs(tmp_path, "-k", "test_gradcheck_in_float64", "--plugin", "tests/plugins/fp32_compute.py",
                            "--encoders", "rope_float64_in_fp32*")
    contract = report["matrix"]["contract"]
    assert contract["rope_float64_in_fp32"] == State.HOLDS_PARTIAL, out  # one contract spec ran
    assert contract["rope_float64_in_fp32_wrong_backward"] == State.UNEXPECTEDLY_FAILING, out


def test_right_aligned_positions_are_a_missing_error_and_truncated_ones_garbage(tmp_path):
    """x-transformers' documented right-alignment of longer position ids is excused by a record that
    declares it validates no input; cutting them from the left is silent garbage whatever it declares."""
    report, out = run_specs(tmp_path, "-k", "test_rejects_positions_of_wrong_shape",
                            "--plugin", "tests/plugins/right_aligned.py",
                            "--encoders", "rope_right_aligned,rope_left_truncated,rope_right_aligned_undeclared")
    contract = report["matrix"]["contract"]
    assert contract["rope_right_aligned"] == State.REFUTED, out
    assert contract["rope_left_truncated"] == State.UNEXPECTEDLY_FAILING, out
    assert contract["rope_right_aligned_undeclared"] == State.UNEXPECTEDLY_FAILING, out
    (hinted,) = {o["message"] for o in report["outcomes"] if o["encoder"] == "rope_right_aligned_undeclared"}
    assert hinted.endswith("it is the rotation at the last 4, right-aligned as x-transformers documents: declare the "
                           "contract refuted for this spec if yours does"), hinted
    (garbage,) = {o["message"] for o in report["outcomes"] if o["encoder"] == "rope_left_truncated"}
    assert "declare" not in garbage  # silent garbage gets no declaration to hide behind
