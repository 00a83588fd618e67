"""The reference engine's vLLM-style profiling endpoints, through HTTP: POST /start_profile
and /stop_profile bracket the steps recorded, the trace comes back by path and imports;
misuse gets a 400 with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.store import open_store
from probes.traces import import_trace
from probes.traces.frame import TraceFrame
from tests.e2e.engine_process import running_engine
from tests.unit.probes.traces_support import same_as_store

pytestmark = pytest.mark.e2e


def _complete(eng, n: int = 3) -> None:
    for _ in range(n):
        status, _, body = eng.post_json("/v1/completions", {
            "model": eng.get_json("/v1/models")["data"][0]["id"], "prompt": "hello " * 40,
            "max_tokens": 12, "ignore_eos": True})
        assert status == 200, body


def test_start_stop_profile_writes_a_trace_of_the_steps_between(tmp_path: Path) -> None:
    prof = tmp_path / "prof"
    with running_engine("--profile-dir", str(prof)) as eng:
        _complete(eng, 1)  # before: not in the trace
        before = max(s["step_id"] for s in eng.get_json("/engine/steps")["steps"])
        status, _, body = eng.post_json("/start_profile", {})
        assert status == 200 and body["status"] == "profiling"
        status, _, body = eng.post_json("/start_profile", {})
        assert status == 400 and "already" in body["error"]["message"]
        _complete(eng, 3)
        status, _, body = eng.post_json("/stop_profile", {})
        assert status == 200, body
        path = Path(body["trace"])
        status, _, again = eng.post_json("/stop_profile", {})
        assert status == 400 and "start_profile" in again["error"]["message"]
        logged = [s for s in eng.get_json("/engine/steps")["steps"] if s["step_id"] > before]
    assert path.parent == prof and path.exists()
    doc = json.loads(path.read_text())
    steps = [e for e in doc["traceEvents"] if e.get("name", "").startswith("engine_step#")]
    assert [int(e["name"].split("#")[1]) for e in steps] == [s["step_id"] for s in logged]
    con = open_store(tmp_path / "s.duckdb")
    t = import_trace(con, path)
    # qwen2.5-3b: 36 layers x 5 kernels + the head per step
    assert t.counts["trace_gpu_ops"] == len(steps) * (36 * 5 + 1)
    # the same file analysed in memory gives the imported trace's numbers
    same_as_store(TraceFrame.read(path), con, t.trace_id)
    con.close()


def test_profiling_endpoints_without_a_profile_dir_say_how_to_enable_it() -> None:
    with running_engine() as eng:
        for path in ("/start_profile", "/stop_profile"):
            status, _, body = eng.post_json(path, {})
            assert status == 400 and "--profile-dir" in body["error"]["message"]
