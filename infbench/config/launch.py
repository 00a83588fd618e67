"""Launching an engine with a configuration, and measuring it with `infbench run`.

The launch template is any command line: `{port}` becomes a free port, `{args}` the flags
that apply the probe's settings, `{python}` this interpreter. infbench waits for the health
URL to answer 200 within a bounded time, runs the workload against it as a separate
`infbench run` process (so every probe run is an ordinary stored run, fingerprinted and
linked to the configuration the target reports), and stops the engine's process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.http_client import NoAnswer, request


class LaunchError(RuntimeError):
    """The engine did not start, or the measurement did not run; the message says which."""


@dataclass(frozen=True)
class LoadSpec:
    """The workload every probe runs: same seed and size, so runs pair request by request."""

    num_requests: int = 64
    concurrency: int = 16
    input_tokens: str = "uniform:32:128"
    output_tokens: str = "uniform:8:24"
    seed: int = 0
    extra: tuple[str, ...] = ()  # further `infbench run` options

    def describe(self) -> dict[str, Any]:
        return {"num_requests": self.num_requests, "concurrency": self.concurrency,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "seed": self.seed, "extra": list(self.extra)}


@dataclass(frozen=True)
class Launcher:
    template: str
    health_path: str = "/health"
    start_timeout_s: float = 120.0
    host: str = "127.0.0.1"
    flag_names: dict[str, str] = field(default_factory=dict)  # key -> flag, e.g. a vLLM -cc.X form

    def flags(self, settings: dict[str, Any]) -> list[str]:
        """`--max-num-seqs 64`, `--enable-prefix-caching` / `--no-enable-prefix-caching`,
        lists as `1,2,4`; `flag_names` renames a key's flag."""
        out: list[str] = []
        for key, value in sorted(settings.items()):
            flag = self.flag_names.get(key, "--" + key.replace("_", "-"))
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag.lstrip("-"))
            elif isinstance(value, list):
                out += [flag, ",".join(str(v) for v in value)]
            elif value is None:
                continue
            else:
                out += [flag, str(value)]
        return out

    def argv(self, port: int, settings: dict[str, Any]) -> list[str]:
        try:
            words = shlex.split(self.template)
        except ValueError as exc:
            raise LaunchError(f"launch template: {exc}") from None
        argv: list[str] = []
        for w in words:
            if w == "{args}":
                argv += self.flags(settings)
            else:
                argv.append(w.replace("{port}", str(port)).replace("{python}", sys.executable))
        if "{args}" not in words:
            argv += self.flags(settings)
        return argv

    @contextlib.contextmanager
    def running(self, settings: dict[str, Any], log_dir: Path) -> Iterator[str]:
        """Start the engine with `settings` applied; yields its base URL; always stops it."""
        port = free_port(self.host)
        argv = self.argv(port, settings)
        log_path = log_dir / f"engine-{port}.log"
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            except OSError as exc:
                raise LaunchError(f"launch: cannot start {argv[0]!r}: {exc}") from None
            try:
                url = f"http://{self.host}:{port}"
                self._wait_healthy(proc, url, log_path)
                yield url
            finally:
                stop(proc)

    def _wait_healthy(self, proc: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LaunchError(f"the engine exited with code {proc.returncode} before it was "
                                  f"healthy: {tail(log_path)}")
            with contextlib.suppress(NoAnswer):  # not listening yet
                if request("GET", url + self.health_path, timeout_s=2).status == 200:
                    return
            time.sleep(0.2)
        raise LaunchError(f"the engine was not healthy at {url}{self.health_path} within "
                          f"{self.start_timeout_s:g} s: {tail(log_path)}")


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the engine's process group, SIGKILL what is left after 10 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def measure(url: str, db: Path, load: LoadSpec, num_requests: int, timeout_s: float = 900) -> str:
    """One stored `infbench run` against `url`; returns its run id."""
    argv = [sys.executable, "-m", "infbench", "run", "--url", url, "--db", str(db),
            "--num-requests", str(num_requests), "--arrival", "closed",
            "--concurrency", str(load.concurrency), "--input-tokens", load.input_tokens,
            "--output-tokens", load.output_tokens, "--seed", str(load.seed),
            "--quiet", "--json", *load.extra]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"the measurement run took longer than {timeout_s:g} s") from None
    try:
        return str(json.loads(r.stdout)["run_id"])
    except (json.JSONDecodeError, KeyError, TypeError):
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise LaunchError(f"the measurement run failed (exit {r.returncode}): {err}") from None


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="infbench-bisect-")
