"""Run the `infbench` CLI of this checkout in a subprocess (never an installed copy)."""

from __future__ import annotations

import atexit
import json
import locale
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


def infbench(*args: str, timeout: float = 120, cwd: Path = ROOT,
             **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m infbench ARGS` in its own process, as subprocess.run gives it (returncode,
    stdout, stderr as text; TimeoutExpired after `timeout`). The process is forked from a
    server that has the CLI's stack imported (cli_zygote.py), unless INFBENCH_TEST_FORK=0."""
    argv = [sys.executable, "-m", "infbench", *args]
    zygote = _zygote()
    if zygote is None:
        return subprocess.run(argv, cwd=cwd, env=cli_env(**env), capture_output=True, text=True,
                              timeout=timeout)
    return zygote.run(argv, cwd, cli_env(**env), timeout)


class Zygote:
    """This process's fork server (one per pytest-xdist worker), started on first use."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="infbench-zygote-")
        self.path = os.path.join(self.dir, "sock")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.cli_zygote", self.path],
                                     cwd=ROOT, env=cli_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            self.proc.kill()
            raise RuntimeError("the CLI fork server did not start (tests/support/cli_zygote.py)")
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        """`argv` is [python, "-m", module, *args]."""
        deadline = time.monotonic() + timeout
        with tempfile.TemporaryDirectory(prefix="infbench-call-") as d, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
            sock.connect(self.path)
            sock.sendall(json.dumps({"module": argv[2], "argv": argv[3:], "env": env, "cwd": str(cwd),
                                     "stdout": out, "stderr": err}).encode() + b"\n")
            reader = _Lines(sock)
            pid = int(reader.next(deadline).split()[1])
            try:
                status = reader.next(deadline)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # what subprocess.run does on its timeout
                reader.next(None)
                raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err)) from None
            if not status.startswith(b"status "):
                raise RuntimeError(f"the CLI fork server lost {argv[3:]!r} (pid {pid})")
            return subprocess.CompletedProcess(argv, int(status.split()[1]), _read(out), _read(err))


class _Lines:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self, deadline: float | None) -> bytes:
        while b"\n" not in self.buf:
            self.sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
            part = self.sock.recv(4096)
            if not part:
                return b""
            self.buf += part
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _read(path: str) -> str:
    try:
        with open(path, encoding=locale.getpreferredencoding(False)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


_ZYGOTE: list[Zygote] = []


def _zygote() -> Zygote | None:
    if os.environ.get("INFBENCH_TEST_FORK", "1") == "0":
        return None
    if not _ZYGOTE or not _ZYGOTE[0].alive():
        _ZYGOTE[:] = [Zygote()]
    return _ZYGOTE[0]


def closed_loop(n: int, conc: int, inp: str, out: str) -> tuple[str, ...]:
    """`infbench run`'s options for `n` requests at concurrency `conc`, with these input and
    output length distributions (as the CLI spells them: "64", "uniform:40:120")."""
    return ("--arrival", "closed", "--concurrency", str(conc), "--num-requests", str(n),
            "--input-tokens", inp, "--output-tokens", out)


def triage(db: Path, *extra: str, timeout: float = 180) -> tuple[int, dict]:
    """`infbench diagnose last --json` on a store: its exit code (0 nothing above info, 1
    findings) and the document; any other exit fails the test with the command's stderr."""
    r = infbench("diagnose", "last", "--db", str(db), "--json", *extra, timeout=timeout)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)
