"""LoRA adapters on a real vLLM (CPU build): two tiny adapters made locally with peft
(tools/real_vllm/make_adapter.py), served with `--enable-lora --max-loras 1 --lora-modules`.
vLLM 0.32's CPU build serves them: `/v1/models` lists both, requests name one by `model`.
`infbench run --tenants --adapters` against it: every request recorded with its tenant and
adapter, the per-adapter summary counts what was sent, and `diagnose adapters` reads the
batches' composition from vLLM's own `vllm:lora_requests_info` (no step log on a real engine):
two adapters at max_loras 1 take turns, and the fix names --max-loras 2. One server start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.real_engine.conftest import get_json, infbench, ok, start
from tools.real_vllm.make_adapter import write_adapter
from tools.real_vllm.server import VllmServer


@pytest.fixture(scope="module")
def vllm_lora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    root = tmp_path_factory.mktemp("adapters")
    sql, chat = write_adapter(root / "sql", 8, 0), write_adapter(root / "chat", 8, 1)
    srv = start(root / "server.log", ["--enable-lora", "--max-loras", "1", "--max-lora-rank", "8",
                                      "--lora-modules", f"sql={sql}", f"chat={chat}"])
    try:
        yield srv
    finally:
        srv.stop()


def test_adapters_by_name_recorded_summarised_and_diagnosed(vllm_lora: VllmServer,
                                                            tmp_path: Path) -> None:
    models = get_json(vllm_lora.url + "/v1/models")
    cards = {m["id"]: m for m in models["data"]}  # type: ignore[index]
    assert cards["sql"]["parent"] == cards["chat"]["parent"] == vllm_lora.model
    db = tmp_path / "lora.duckdb"
    out = ok(infbench("run", "--url", vllm_lora.url, "--db", str(db), "--quiet", "--json",
                      "--tenants", "ops:1,docs:1,chat:1", "--adapters", "ops=sql,docs=chat,chat=chat:1+base:1",
                      "--input-tokens", "120", "--output-tokens", "24", "--num-requests", "24",
                      "--arrival", "closed", "--concurrency", "6", "--scrape-interval", "0.25"))
    summary = json.loads(out)
    con = open_store(db)
    try:
        sent = dict(con.execute("SELECT coalesce(adapter, 'base'), count(*) FROM requests "
                                "WHERE phase = 'measure' GROUP BY 1").fetchall())
        tenants = dict(con.execute("SELECT tenant, count(*) FROM requests GROUP BY 1").fetchall())
        wrong = con.execute("SELECT count(*) FROM requests WHERE tenant = 'ops' AND adapter IS "
                            "DISTINCT FROM 'sql'").fetchone()[0]
    finally:
        con.close()
    assert summary["failed"] == 0 and set(sent) <= {"sql", "chat", "base"} and len(sent) >= 2
    assert {k: v["requests"] for k, v in summary["by_adapter"].items()} == sent
    assert all(v["completed"] == v["requests"] and v["median_ttft_ms"] > 0
               for v in summary["by_adapter"].values())
    assert sum(tenants.values()) == 24 and set(tenants) <= {"ops", "docs", "chat"} and wrong == 0
    d = json.loads(ok_or_fail(infbench("diagnose", "adapters", "last", "--db", str(db), "--json")))
    assert d["data_sources"]["server_metrics"] and not d["data_sources"]["engine_steps"]
    assert d["context"]["max_loras"] == 1
    f = d["findings"][0]
    assert f["verdict"] == "adapter_serialization" and "--max-loras 2" in f["next_actions"][0]
    comp = next(e for e in f["evidence"] if e["name"] == "batch_composition")
    assert "vllm:lora_requests_info" in comp["sql"] and comp["values"]["max_lora"] == 1


def ok_or_fail(r: object) -> str:
    """`diagnose` exits 1 when it finds a warning or worse: that is the expected outcome."""
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-2000:])  # type: ignore[attr-defined]
    return r.stdout  # type: ignore[attr-defined, no-any-return]
