"""The real vLLM's install lock: a background install holds it from the moment the README's
command starts it until it ends, a second install waits for the first, and the real-engine
tests' `wait()` returns only once no install runs. The background path is run for real in a
scratch environment whose pip can reach no package, so it fails fast and must say why."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.real_vllm import install

ROOT = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(INFBENCH_VLLM_VENV=str(tmp_path / "venv"), INFBENCH_VLLM_MODEL=str(tmp_path / "model"),
               PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "none"))
    return env


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    venv = tmp_path / "venv"
    monkeypatch.setattr(install, "VENV", venv)
    monkeypatch.setattr(install, "MODEL", tmp_path / "model")
    monkeypatch.setattr(install, "STAMP", venv / "infbench-install.json")
    monkeypatch.setattr(install, "LOCK", tmp_path / "venv.install.lock")
    monkeypatch.setattr(install, "LOG", tmp_path / "venv.install.log")
    return tmp_path


def _holder(lock: Path, marker: Path) -> subprocess.Popen[str]:
    """A process that takes the install lock, says so, and holds it until told to go."""
    code = textwrap.dedent(f"""
        import fcntl, os, sys
        fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        sys.stdin.readline()
        open({str(marker)!r}, "w").write("done")
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_wait_returns_at_once_when_no_install_runs(scratch: Path) -> None:
    install.wait(timeout_s=0.0)
    assert not install.installed()


def test_wait_outlasts_a_running_install_and_times_out_while_it_runs(scratch: Path) -> None:
    marker = scratch / "released"
    proc = _holder(install.LOCK, marker)
    try:
        with pytest.raises(TimeoutError, match="still runs"):
            install.wait(timeout_s=0.3)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        install.wait(timeout_s=60)
        assert marker.read_text() == "done"  # returned only after the holder let go
    finally:
        proc.kill()
        proc.wait()


def test_background_while_an_install_runs_starts_nothing(scratch: Path, capsys) -> None:
    proc = _holder(install.LOCK, scratch / "released")
    try:
        assert install.main(["--background"]) == 0
        assert "already running" in capsys.readouterr().out
        assert not install.LOG.exists() and not install.VENV.exists()
    finally:
        proc.kill()
        proc.wait()


def test_unknown_arguments_are_one_line_and_exit_2(capsys) -> None:
    assert install.main(["--bogus"]) == 2
    assert capsys.readouterr().err.strip() == "usage: python -m tools.real_vllm.install [--background]"


def test_a_background_install_holds_the_lock_until_it_ends_and_its_failure_is_one_line(
        tmp_path: Path) -> None:
    env = _env(tmp_path)
    r = subprocess.run([sys.executable, "-m", "tools.real_vllm.install", "--background"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "in the background" in r.stdout, r.stderr
    lock, log = tmp_path / "venv.install.lock", tmp_path / "venv.install.log"
    fd = os.open(lock, os.O_RDWR)
    try:  # the command has returned; its detached child holds the lock it inherited
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        deadline = time.monotonic() + 240
        while True:  # ends once pip finds no torch to install
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the background install never ended"
                time.sleep(0.2)
    finally:
        os.close(fd)
    text = log.read_text()
    assert "Traceback" not in text
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert last.startswith("the real vLLM install failed: -m pip "), last
    assert "torch==2.13.0" in last
    assert not (tmp_path / "venv" / "infbench-install.json").exists()


def test_the_tests_message_names_the_logs_last_line(scratch: Path) -> None:
    install.LOG.write_text("Collecting torch\nthe real vLLM install failed: -m pip install torch: exit 1\n")
    msg = install.failure()
    assert msg.startswith(f"the real vLLM is not installed (log {install.LOG}: the real vLLM install failed")
    assert msg.endswith("run `python -m tools.real_vllm.install`")
