"""The engine's /metrics as real Prometheus tooling sees it: promtool's lint and a real scrape.

Needs Debian's `prometheus` package (`prometheus` and `promtool` on PATH); `.ci/run` installs
it. The only lint allowed is the colon in vLLM's own metric names, which vLLM's endpoint
shares (the `vllm:` prefix is what every dashboard queries).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.engine_process import MODEL, EngineProcess, running_engine

pytestmark = pytest.mark.e2e

COLON_LINT = re.compile(r"^vllm:\S+ metric names should not contain ':'$")
# The simulated GPUs' series use dcgm-exporter's own names and labels (UUID, modelName,
# Hostname; counters such as DCGM_FI_DEV_ECC_SBE_VOL_TOTAL), which draw exactly these two lints
# on a real dcgm-exporter too; nothing else may.
DCGM_LINT = re.compile(r"^DCGM_\S+ (label names should be written in 'snake_case' not 'camelCase'"
                       r"|counter metrics should have \"_total\" suffix)$")
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:num_preemptions_total", "vllm:request_success_total")


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: install Debian's prometheus package (.ci/run does)"
    return path


@pytest.fixture(scope="module")
def busy_engine() -> Iterator[EngineProcess]:
    with running_engine() as e:
        for n in (3, 7, 12):  # something in every histogram and counter
            status, _, _ = e.post_json("/v1/completions",
                                       {"model": MODEL, "prompt": "a b c " * n, "max_tokens": n})
            assert status == 200
        yield e


def test_promtool_finds_nothing_but_the_vllm_colon_names(busy_engine: EngineProcess) -> None:
    status, _, body = busy_engine.request("GET", "/metrics")
    assert status == 200
    r = subprocess.run([_tool("promtool"), "check", "metrics"], input=body, capture_output=True,
                       timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).decode().splitlines() if ln.strip()]
    assert problems, "promtool printed nothing: the colon lint vLLM shares is expected"
    assert [p for p in problems if not (COLON_LINT.match(p.strip()) or DCGM_LINT.match(p.strip()))] == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_a_real_prometheus_scrapes_typed_counters(busy_engine: EngineProcess,
                                                  tmp_path: Path) -> None:
    host, port = busy_engine.host_port
    web = _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: engine\n    static_configs: [{{targets: ['{host}:{port}']}}]\n")
    proc = subprocess.Popen(
        [_tool("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{web}/api/v1"
    try:
        deadline = time.monotonic() + 60
        meta: dict = {}
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                meta = _get(f"{api}/metadata")["data"]
            except OSError:
                continue
            if all(c in meta for c in COUNTERS):
                break
        for name in COUNTERS:
            assert name in meta, sorted(meta)
            assert {m["type"] for m in meta[name]} == {"counter"}, (name, meta[name])
        assert {m["type"] for m in meta["vllm:time_to_first_token_seconds"]} == {"histogram"}
        assert {m["type"] for m in meta["vllm:kv_cache_usage_perc"]} == {"gauge"}
        got = _get(f"{api}/query?query=vllm:generation_tokens_total")["data"]["result"]
        assert [float(r["value"][1]) for r in got] == [3 + 7 + 12]
        up = _get(f"{api}/query?query=up")["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
