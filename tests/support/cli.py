"""Run the `infbench` CLI of this checkout in a subprocess (never an installed copy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


def infbench(*args: str, timeout: float = 120, cwd: Path = ROOT,
             **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infbench", *args], cwd=cwd, env=cli_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def closed_loop(n: int, conc: int, inp: str, out: str) -> tuple[str, ...]:
    """`infbench run`'s options for `n` requests at concurrency `conc`, with these input and
    output length distributions (as the CLI spells them: "64", "uniform:40:120")."""
    return ("--arrival", "closed", "--concurrency", str(conc), "--num-requests", str(n),
            "--input-tokens", inp, "--output-tokens", out)
