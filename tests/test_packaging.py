"""The folder encodings/ installs as the import package posenc; the stdlib keeps ``encodings``."""

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_stdlib_encodings_is_untouched_and_posenc_imports_from_anywhere(tmp_path):
    code = "import encodings, posenc; print(encodings.__file__); print(posenc.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    stdlib_file, posenc_file = out.stdout.split()
    assert stdlib_file.startswith(sysconfig.get_paths()["stdlib"])
    assert Path(posenc_file).parent == ROOT / "encodings"


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in readme.split("```bash")[1].split("```")[0].splitlines()
                if line.strip() and not line.startswith("#")]
    assert commands, "README's first bash block holds the commands"
    for command in commands + ["pytest tests"]:
        assert command in ci, f".ci/run does not run README's `{command}`"
