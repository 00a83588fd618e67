"""Start a server subprocess that prints `INFO: serving on URL`, and stop it again (and stop
any other process a test started: `stop_process`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SSE_SERVER = Path(__file__).with_name("sse_server.py")


@contextlib.contextmanager
def serving(args: list[str], timeout_s: float = 20.0, nice: int = 0) -> Iterator[str]:
    """Run `python <args>` and yield its URL; the process is ours and is killed on exit.

    `nice` > 0 lowers the server's CPU priority: a timing test whose truth is the server's
    own write log wants the client, not the server, to win when both are runnable on a
    small machine (a late server write is logged late, so it never biases the truth).
    """
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    try:
        deadline = time.monotonic() + timeout_s
        assert proc.stdout is not None
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "serving on " in line:
                url = line.strip().split("serving on ", 1)[1]
                break
        if url is None:
            raise RuntimeError(f"server {args} did not start (exit {proc.poll()})")
        yield url
    finally:
        stop_process(proc, timeout_s=5)


def stop_process(proc: subprocess.Popen, timeout_s: float) -> None:  # type: ignore[type-arg]
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`; reaped either way, so
    no test leaves a process or a zombie behind."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sse_server(*flags: str, nice: int = 0) -> contextlib.AbstractContextManager[str]:
    return serving([str(SSE_SERVER), "--port", "0", *flags], nice=nice)

