"""A real vLLM (CPU build, a tiny random-weight Llama made locally) on loopback.

Every test here carries the `real_engine` marker (`-m 'not real_engine'` skips them). The
server is installed by `python -m tools.real_vllm.install` (the README's test command starts it
in the background first, and the first test here waits for it); where it is missing, the tests
fail with the install's last log line and the command to run, never skip silently.
One base server serves every test in this directory (package scope: it stops after the last
of them); tests that need other settings start their own, one at a time: vLLM's CPU build binds
every server's worker to CPU 0, so four started side by side (round R11) took 173 s together at
a load average of 17, no faster than one after another. Under `--dist loadfile` the files here
are one unit of work, run in one worker beside the rest of the suite (tests/support/schedule.py).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import cli
from tools.real_vllm import install
from tools.real_vllm.server import VllmServer

# --enforce-eager: the CPU build otherwise traces the model with torch.compile at every start,
# once per distinct setting (its cache key): 17-31 s of a 53 s start on a 2-CPU host, five
# starts a session; eager it is ready in 29 s ("init engine ... took 0.51 s"). Many users
# serve eager too; no test here measures compiled step times.
BASE_ARGS = ["--enable-prompt-tokens-details", "--enforce-eager"]
# The server restarted with two settings changed: the config diff must rank exactly these
# two, and the first one slows a load of more than two streams (the gate's real regression).
CHANGED_ARGS = ["--max-num-seqs", "2", "--max-num-batched-tokens", "1024"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_engine)


@pytest.fixture(scope="package", autouse=True)
def _vllm_installed() -> None:
    """Before the first test here: wait for an install the README's command started in the
    background, then require a finished one."""
    install.wait()
    if not install.installed():
        pytest.fail(install.failure())


def start(log: Path, extra: list[str] | None = None) -> VllmServer:
    if not install.installed():
        pytest.fail(install.failure())
    return VllmServer(log, extra_args=[*BASE_ARGS, *(extra or [])]).start()


@pytest.fixture(scope="package")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    srv = start(tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="package")
def vllm_changed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    srv = start(tmp_path_factory.mktemp("vllm_changed") / "server.log", CHANGED_ARGS)
    try:
        yield srv
    finally:
        srv.stop()


def infbench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return cli.infbench(*args, timeout=timeout)  # forked as the e2e tests' (docs/testing.md)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def metric(srv: VllmServer, name: str) -> float:
    """Sum of a vLLM counter or gauge over its label sets, from the live /metrics."""
    with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
