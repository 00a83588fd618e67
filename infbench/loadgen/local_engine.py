"""Start the bundled reference engine as a child process on a free loopback port.

Only a subprocess: the load generator never imports the engine. The child gets its own
session so that Ctrl-C reaches infbench (which records and stops cleanly) and not the engine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from infbench.loadgen.preflight import PreflightError

READY_MARK = "serving on "


class Console(Protocol):
    def print(self, *objects: Any) -> None: ...


@contextlib.contextmanager
def bundled_engine(args: list[str], start_timeout_s: float = 120.0) -> Iterator[str]:
    """Yield the engine's base URL; the engine is ours and is stopped on exit."""
    cmd = [sys.executable, "-m", "reference_engine", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    tail: deque[str] = deque(maxlen=20)
    url_box: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        # Keeps reading for the engine's whole life so its output pipe never fills up.
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            if not url_box and READY_MARK in line:
                url_box.append(line.strip().split(READY_MARK, 1)[1].split()[0])
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, name="engine-output", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not ready.wait(0.2):
            if time.monotonic() > deadline:
                raise PreflightError(f"the bundled engine did not start within {start_timeout_s:.0f}s")
        if not url_box:
            last = tail[-1] if tail else "no output"
            raise PreflightError(f"the bundled engine exited ({proc.poll()}): {last}")
        yield url_box[0].rstrip("/")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(timeout=2)


@contextlib.contextmanager
def target_url(url: str | None, engine_args: list[str], console: Console) -> Iterator[str]:
    """The URL to load: the given one, or the bundled engine started for the block."""
    if url:
        yield url
        return
    console.print("[dim]no --url: starting the bundled reference engine (sim executor)…[/]")
    with bundled_engine(engine_args) as engine_url:
        console.print(f"[dim]reference engine serving on {engine_url}[/]")
        yield engine_url
    console.print("[dim]reference engine stopped[/]")
