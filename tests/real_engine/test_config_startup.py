"""What a real vLLM says about itself: `diagnose startup` on its own start-up log (started,
its KV pool) and on a truncated copy (incomplete); `config capture` of the log and of the live
endpoint, their diff (nothing ranked: the same server), and a diff against the server
restarted with two settings changed (exactly those two ranked first)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.real_engine.conftest import CHANGED_ARGS, infbench, ok
from tools.real_vllm.server import VllmServer


def _startup(log: Path, db: Path) -> tuple[int, dict]:
    r = infbench("diagnose", "startup", str(log), "--db", str(db), "--json")
    return r.returncode, json.loads(r.stdout)


def _verdicts(doc: dict) -> list[str]:
    return [f["verdict"] for f in doc["findings"]]


def _evidence(doc: dict, name: str) -> dict:
    return next(e["values"] for f in doc["findings"] for e in f["evidence"] if e["name"] == name)


def test_startup_of_the_server_that_started(vllm: VllmServer, tmp_path: Path) -> None:
    rc, doc = _startup(vllm.log_path, tmp_path / "s.duckdb")
    text = json.dumps(doc)
    assert rc == 0, text[:3000]
    assert "startup_log_incomplete" not in _verdicts(doc), text[:3000]
    # its KV pool as the log gives it: VLLM_CPU_KVCACHE_SPACE=1 GiB, sized in tokens
    assert "524288" in text.replace(",", "") or "524,288" in text, text[:3000]


def test_startup_of_a_truncated_copy_is_incomplete(vllm: VllmServer, tmp_path: Path) -> None:
    lines = vllm.log_path.read_text(errors="replace").splitlines(keepends=True)
    kv = next(i for i, ln in enumerate(lines) if "KV cache" in ln and "GiB" in ln)
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:kv]))  # ends while the engine profiles, before the KV pool
    rc, doc = _startup(cut, tmp_path / "c.duckdb")
    assert "startup_log_incomplete" in _verdicts(doc), json.dumps(doc)[:3000]
    assert "startup_ok" not in _verdicts(doc)


def _capture(src: str, label: str, db: Path) -> None:
    ok(infbench("config", "capture", src, "--label", label, "--db", str(db)))


def _diff(db: Path, a: str, b: str) -> dict:
    return json.loads(ok(infbench("config", "diff", a, b, "--db", str(db), "--json")))


def test_the_same_server_captured_twice_differs_in_nothing(vllm: VllmServer,
                                                           tmp_path: Path) -> None:
    db = tmp_path / "cfg.duckdb"
    _capture(str(vllm.log_path), "log", db)
    _capture(vllm.url, "live", db)
    doc = _diff(db, "log", "live")
    assert doc["differences"] == [], json.dumps(doc["differences"])[:3000]
    # what one side does not show is a coverage gap, listed apart, both ways
    assert doc["only_a"] and doc["only_b"]


def test_a_restart_with_two_settings_changed_ranks_exactly_those(
        vllm: VllmServer, vllm_changed: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "cfg2.duckdb"
    _capture(str(vllm.log_path), "before", db)
    _capture(str(vllm_changed.log_path), "after", db)
    doc = _diff(db, "before", "after")
    keys = [d["key"] for d in doc["differences"]]
    assert sorted(keys[:2]) == ["max_num_batched_tokens", "max_num_seqs"], keys
    # anything else that differs is the port or follows from those two (the compile ranges
    # vLLM derives from the token budget), ranked below them
    rest = doc["differences"][2:]
    assert {d["key"] for d in rest} <= {"port", "compilation_config.compile_ranges_endpoints"}, keys
    assert all(d["score"] < doc["differences"][1]["score"] for d in rest), doc["differences"]
    # the live endpoints agree: the restarted server's live capture against the first log
    _capture(vllm_changed.url, "after_live", db)
    live = _diff(db, "before", "after_live")
    assert {d["key"] for d in live["differences"]} <= {"max_num_batched_tokens", "max_num_seqs"}
    assert CHANGED_ARGS[1] == "2"
