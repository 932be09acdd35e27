"""``pytest specs -m perf`` ends with posenc's own tables, the scaling table last, none wider than 160."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("perf_summary")


def test_a_perf_run_ends_with_the_posenc_tables_within_160_columns(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    command = [sys.executable, "-m", "pytest", "specs", "-m", "perf", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               "--encoders", "rope_complex,attention_rope", "-k", "test_benchmark and b1 and not backward or scaling",
               "--benchmark-max-time=0.05", "--matrix-dir", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
    lines = result.stdout.splitlines()
    too_wide = [line for line in lines if len(line) > 160]
    assert too_wide == [], too_wide
    benchmark_tables = max(i for i, line in enumerate(lines) if line.startswith("Name (time in"))
    posenc_tables = next(i for i, line in enumerate(lines) if "posenc performance" in line)
    scaling = next(i for i, line in enumerate(lines) if line.startswith("scaling: forward"))
    assert benchmark_tables < posenc_tables < scaling
    assert lines[posenc_tables + 1].startswith("perf run: 2 benchmarks, "), lines[posenc_tables + 1]
    groups = [i for i, line in enumerate(lines) if line.startswith("cpu forward: batch 1")]
    assert groups and all(lines[i + 1].startswith("best ×copy: ") for i in groups), lines[posenc_tables:]
    rows = [line.split()[0] for line in lines[scaling + 2:] if line and not line.startswith(("=", " "))]
    assert rows[:2] == ["attention_rope", "rope_complex"] and len(rows) == 3 and rows[2][0].isdigit(), rows  # then only pytest's last line
