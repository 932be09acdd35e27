"""The tools room runs: the docs generators and the phase-precision table the docs quote."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.__main__ import COMMANDS
from posenc.tools import precision

ROOT = Path(__file__).resolve().parent.parent


def test_precision_table_ranks_angle_dtypes_as_readme_says():
    table = dict(precision.precision_table())
    fp32_angles = table["built-in (fp32 angles), fp32 input"]
    bf16_angles = table["angles in bf16"]
    fp16_angles = table["angles in fp16"]
    assert len(fp32_angles) == len(precision.FAR_POSITIONS)
    assert all(error < 1e-3 for error in fp32_angles), fp32_angles
    # bf16 angles break the bf16 tolerance (2^-6) from position 1000 on; fp16 angles overflow past 65504
    assert all(error > 2.0**-6 for error in bf16_angles[1:]), bf16_angles
    assert all(math.isnan(error) for error in fp16_angles[3:]), fp16_angles


def test_tools_run_as_documented_commands():
    matrix = subprocess.run([sys.executable, "-m", "posenc.tools.docs", "--print", "matrix"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    assert matrix.startswith("| claim | `learnable`") and "#### Cross-checks" in matrix
    table = subprocess.run([sys.executable, "-m", "posenc.tools.precision"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    assert table.splitlines()[0].startswith("| implementation | p = 10^2") and len(table.splitlines()) == 7


def _posenc(*args):
    return subprocess.run([sys.executable, "-m", "posenc", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_front_door_lists_every_subcommand_with_one_line_each():
    shown = _posenc("--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m posenc COMMAND")
    listed = [line.split()[0] for line in shown.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
    bare = _posenc()
    assert bare.returncode == 2 and "commands:" in bare.stderr
    unknown = _posenc("frobnicate")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "unknown command 'frobnicate'" in unknown.stderr


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy, on a module imported here
@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help_and_rejects_unknown_flags(command, posenc_here):
    helped = posenc_here(command, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: python -m posenc {command}"), helped.stderr
    wrong = posenc_here(command, *(["target.py:rope"] if command == "identify" else []), "--no-such-flag")
    assert wrong.returncode == 2
    (line,) = wrong.stderr.strip().splitlines()  # one line
    assert line.startswith(f"python -m posenc {command}: error: unrecognized arguments: --no-such-flag"), line



def test_model_budget_states_each_thread_count_idle_and_beside_a_job(tmp_path):
    """The model-benchmark figures render as one row per torch thread count, idle and beside a job,
    each the median with the models less the median start-up."""
    import json

    from posenc.tools import model_benchmark

    conditions = {model_benchmark.condition(threads, load): {"with_models": [10.0 * threads + i, 30.0],
                                                              "start_up": [2.0, 4.0]}
                  for threads in model_benchmark.THREADS for i, load in enumerate(model_benchmark.LOADS)}
    kept = tmp_path / "model-benchmark.json"
    kept.write_text(json.dumps({"machine": "a CPU, 2 logical CPUs, 2 torch threads", "torch": "2", "transformers": "5",
                                "date": "2026-12-03", "repeat": 2, "models": 3, "cases": 30,
                                "conditions": conditions, "per_model": {"lm_a": 1.0, "lm_b": 0.5}}))
    text = model_benchmark.budget_markdown(kept)
    # medians: with models (10·t + i + 30) / 2, start-up 3
    assert "| 1 | 17.0 s | 17.5 s |" in text and "| 2 | 22.0 s | 22.5 s |" in text, text
    assert "median of 2 runs" in text and max(len(line) for line in text.splitlines()) <= 100, text
