"""Start the reference engine as a real subprocess on a free loopback port (test helper).

`start_engine(...)` launches `python -m reference_engine --port 0 ...`, waits for the
`INFO: serving on http://...` line and hands back the URL. Engines started here use the sim
executor with a small model on a fast GPU so a decode step takes a few milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVING = re.compile(r"^INFO: serving on (http://\S+)$")
MODEL = "qwen2.5-3b-instruct"
# Small model, fast GPU: decode steps of ~2 ms keep each test file well under a minute.
FAST_FLAGS = ("--executor", "sim", "--model", MODEL, "--gpu", "H100-SXM",
              "--max-model-len", "4096")


def metric_key(name: str, **labels: str) -> str:
    """The sample key `EngineProcess.metrics()` uses, labels in exposition order."""
    inner = ",".join(f'{k}="{v}"' for k, v in {"model_name": MODEL, **labels}.items())
    return f"{name}{{{inner}}}"


ABORTED = metric_key("vllm:request_success_total", finished_reason="abort")


@dataclass
class EngineProcess:
    url: str
    proc: subprocess.Popen[str]
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, timeout: float = 30.0,
                ) -> tuple[int, dict[str, str], bytes]:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def get_json(self, path: str) -> Any:
        status, _, body = self.request("GET", path)
        assert status == 200, body
        return json.loads(body)

    def post_json(self, path: str, body: Any, **kw: Any) -> tuple[int, dict[str, str], Any]:
        status, headers, raw = self.request("POST", path, body, **kw)
        return status, headers, json.loads(raw)

    def metrics(self) -> dict[str, float]:
        """`name{labels}` -> value, and bare `name` for samples whose labels are only model_name."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        out: dict[str, float] = {}
        for line in body.decode().splitlines():
            if line.startswith("#") or not line:
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
            out.setdefault(re.sub(r'\{model_name="[^"]*"\}$', "", key), float(value))
        return out

    def wait_idle(self, timeout: float = 10.0) -> dict[str, float]:
        """Poll /metrics until nothing runs or waits and no KV block is held."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = (m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
                    and m["vllm:kv_cache_usage_perc"] == 0)
            if idle or time.monotonic() > deadline:
                return m
            time.sleep(0.05)


def _drain(stream: Any, sink: list[str]) -> None:
    for line in stream:
        sink.append(line.rstrip("\n"))


def launch(argv: list[str], timeout: float = 30.0) -> EngineProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VLLM_API_KEY", None)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stderr_lines: list[str] = []
    threading.Thread(target=_drain, args=(proc.stderr, stderr_lines), daemon=True).start()
    found: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = SERVING.match(line.strip())
            if m and not found:
                found.append(m.group(1))

    threading.Thread(target=read_stdout, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError("engine did not start:\n" + "\n".join(stderr_lines[-30:]))
        time.sleep(0.02)
    return EngineProcess(url=found[0], proc=proc, stderr_lines=stderr_lines)


def stop(engine: EngineProcess) -> None:
    engine.proc.terminate()
    try:
        engine.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        engine.proc.kill()
        engine.proc.wait()


@contextlib.contextmanager
def running_engine(*flags: str, argv0: tuple[str, ...] = (sys.executable, "-m",
                                                           "reference_engine"),
                   ) -> Iterator[EngineProcess]:
    engine = launch([*argv0, "--port", "0", *FAST_FLAGS, *flags])
    try:
        yield engine
    finally:
        stop(engine)
