"""The tools room runs: README generators and the phase-precision table README quotes."""

import math
import subprocess
import sys
from pathlib import Path

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
    readme = subprocess.run([sys.executable, "-m", "posenc.tools.readme"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    assert "<!-- matrix:start -->" in readme and "<!-- specs-by-claim:start -->" in readme
    table = subprocess.run([sys.executable, "-m", "posenc.tools.precision"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    assert table.splitlines()[0].startswith("| implementation | p = 10^2") and len(table.splitlines()) == 7
