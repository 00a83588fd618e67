"""The project's own rules, run as tests: ruff clean and the import arrows one way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    # The checkout itself goes first on the path so the contracts judge this tree, whatever
    # else is installed.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)


def test_ruff_clean() -> None:
    result = _run([sys.executable, "-m", "ruff", "check", "."])
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "import-linter is not installed (pip install -e '.[dev]')"
    result = _run([lint_imports, "--no-cache"])
    assert result.returncode == 0, result.stdout + result.stderr
