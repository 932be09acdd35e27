"""The tools room runs: the docs generators and the phase-precision table the docs quote."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

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
    from posenc.__main__ import COMMANDS

    shown = _posenc("--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m posenc COMMAND")
    listed = [line.split()[0] for line in shown.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
    bare = _posenc()
    assert bare.returncode == 2 and "commands:" in bare.stderr
    unknown = _posenc("frobnicate")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "unknown command 'frobnicate'" in unknown.stderr


def _posenc_here(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    """``python -m posenc ARGS`` in this process (the front door above runs the real one): exit code,
    stdout, stderr. An exception other than the exit propagates: the test shows its traceback."""
    from posenc.__main__ import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main sets the command's own
    try:
        code = main(list(args))
    except SystemExit as done:
        code = 0 if done.code is None else done.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy, on a module imported here
@pytest.mark.parametrize("command", ["compare", "docs", "precision", "identify", "extrapolation", "suite-benchmark",
                                     "model-benchmark"])
def test_every_subcommand_has_help_and_rejects_unknown_flags(command, capsys, monkeypatch):
    code, out, err = _posenc_here(capsys, monkeypatch, command, "--help")
    assert code == 0 and out.startswith(f"usage: python -m posenc {command}"), err
    code, _, err = _posenc_here(capsys, monkeypatch, command, *(["target.py:rope"] if command == "identify" else []),
                                "--no-such-flag")
    assert code == 2
    (line,) = err.strip().splitlines()  # one line
    assert line.startswith(f"python -m posenc {command}: error: unrecognized arguments: --no-such-flag"), line


def test_every_command_is_tested_for_its_help():
    from posenc.__main__ import COMMANDS

    tested = next(m for m in test_every_subcommand_has_help_and_rejects_unknown_flags.pytestmark if m.name == "parametrize")
    assert set(tested.args[1]) == set(COMMANDS)
