"""The reference engine's own start-up log: run `python -m reference_engine ARGS`, collect
stderr until it serves (or exits), stop it. `python tests/support/startup_logs.py` rewrites
the `reference_*.log` fixtures in tests/fixtures/startup_logs/."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs"
REFERENCE_LOGS: dict[str, tuple[str, ...]] = {
    "reference_8b_h100_started.log": ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM",
                                      "--max-model-len", "32768"),
    "reference_70b_2xh100_128k_failed.log": ("--model", "llama-3.1-70b", "--gpu", "h100", "-tp",
                                             "2", "--max-model-len", "131072"),
    "reference_qwen3b_a100_eager_started.log": ("--model", "qwen2.5-3b-instruct", "--gpu",
                                                "A100-80GB", "--max-model-len", "4096",
                                                "--gpu-memory-utilization", "0.55",
                                                "--enforce-eager"),
}


def engine_startup_log(args: tuple[str, ...], timeout_s: float = 30.0) -> str:
    """stderr of the engine's start, up to the moment it serves or exits."""
    proc = subprocess.Popen([sys.executable, "-m", "reference_engine", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "serving on " in line:
                break
        proc.terminate()
        _, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The lines up to the end of start-up: shutdown chatter is not part of it.
    return "".join(ln + "\n" for ln in err.splitlines() if "shutting down" not in ln)


if __name__ == "__main__":
    for name, engine_args in REFERENCE_LOGS.items():
        (FIXTURES / name).write_text(engine_startup_log(engine_args), encoding="utf-8")
        print(FIXTURES / name)
