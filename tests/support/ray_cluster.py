"""A local Ray cluster on loopback for tests and benchmarks: a head and N more nodes, each its
own `ray start --block` process group, all ours and all ended on exit.

Each node is a real raylet (its own node id, object store and workers) on 127.0.0.1, as on a
cluster of hosts except that they share this host's clock. The nodes' processes are found by
the session directory this cluster was given, so cleanup ends exactly them (by pid), and
nothing of another cluster on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_START_TIMEOUT_S = 120.0
# Owns: the process group of each extra node of a running cluster, by the head's address
# (a test that loses a node kills one: `lose_node`).
_NODE_GROUPS: dict[str, list[int]] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_env() -> dict[str, str]:
    """The environment a test's Ray processes and drivers share: the repository importable on
    every node (as an installed infbench would be), no token handshake on loopback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["RAY_AUTH_MODE"] = "disabled"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _wait_started(proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{what} exited ({proc.poll()}) before it started")
        if "Ray runtime started" in line:
            return
    raise RuntimeError(f"{what} did not start within {_START_TIMEOUT_S:.0f}s")


def _pids_under(temp_dir: str) -> list[int]:
    """Processes whose command line names this cluster's directory (its raylets, stores, agents
    and workers), or that belong to our `ray start` process groups."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp_dir in cmd and int(entry) != os.getpid():
            out.append(int(entry))
    return out


@contextlib.contextmanager
def ray_cluster(extra_nodes: int = 1, cpus_per_node: int = 2) -> Iterator[str]:
    """Yield the head's address (`127.0.0.1:PORT`) once the head and `extra_nodes` have started."""
    temp_dir = tempfile.mkdtemp(prefix="infbench-ray-")
    port = _free_port()
    env = ray_env()
    common = ["--block", "--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}",
              "--disable-usage-stats"]
    procs: list[subprocess.Popen[str]] = []
    try:
        head = subprocess.Popen(
            [_ray_cli(), "start", "--head", f"--port={port}", "--include-dashboard=false",
             f"--temp-dir={temp_dir}", *common],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        procs.append(head)
        _wait_started(head, "the Ray head")
        for i in range(extra_nodes):
            node = subprocess.Popen(
                [_ray_cli(), "start", f"--address=127.0.0.1:{port}", *common],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
            procs.append(node)
            _wait_started(node, f"Ray node {i + 1}")
        _NODE_GROUPS[f"127.0.0.1:{port}"] = [p.pid for p in procs[1:]]
        yield f"127.0.0.1:{port}"
    finally:
        _NODE_GROUPS.pop(f"127.0.0.1:{port}", None)
        # SIGKILL at once: a test cluster has nothing to save, and `ray start --block` takes
        # tens of seconds over a graceful stop on a busy host.
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()
        # Workers a raylet started in a session of their own: found by this cluster's directory.
        deadline = time.monotonic() + 10
        while (left := _pids_under(temp_dir)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        shutil.rmtree(temp_dir, ignore_errors=True)


def lose_node(address: str, index: int = 0) -> None:
    """Kill extra node `index` of the cluster at `address` at once (its raylet, object store
    and workers), as a host that drops off the network or powers off."""
    os.killpg(_NODE_GROUPS[address][index], signal.SIGKILL)


def cluster_pids(temp_hint: str = "infbench-ray-") -> list[int]:
    """Processes of any cluster this module started that are still alive (a test's leak check)."""
    return _pids_under(temp_hint)
