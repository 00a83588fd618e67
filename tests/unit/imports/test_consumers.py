"""Imported runs are runs: show, report, compare, diagnose and `export --format trace` read them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import infbench
from tests.unit.imports.support import FIXTURES

VLLM = FIXTURES / "vllm-bench" / "vllm-bench-serve.json"
GUIDELLM = FIXTURES / "guidellm" / "benchmarks.json"


def _import(db: Path, tool: str, path: Path) -> str:
    r = infbench("import", "--from", tool, str(path), "--db", str(db))
    assert r.returncode == 0, r.stderr
    return r.stdout.split("imported run ", 1)[1].split()[0]


def test_show_report_compare_and_diagnose(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    v, g = _import(db, "vllm-bench", VLLM), _import(db, "guidellm", GUIDELLM)
    shown = json.loads(infbench("show", v, "--db", str(db), "--json").stdout)
    assert shown["config"]["imported"]["tool"] == "vllm-bench"
    assert shown["summary"]["completed"] == 40
    r = infbench("report", v, "--db", str(db), "--html", str(tmp_path / "v.html"))
    assert r.returncode == 0 and (tmp_path / "v.html").stat().st_size > 10_000, r.stderr
    r = infbench("compare", v, g, "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    # The stalls playbook reads the per-token timeline vLLM kept ...
    r = infbench("diagnose", "stalls", v, "--db", str(db))
    assert r.returncode == 0 and "over 600 gaps" in r.stdout, r.stdout + r.stderr
    # ... and says there is none in guidellm's report.
    r = infbench("diagnose", "stalls", g, "--db", str(db))
    assert r.returncode == 0 and "No inter-token gaps in this run" in r.stdout, r.stdout + r.stderr


def test_export_trace_writes_the_imported_requests(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    run = _import(db, "vllm-bench", VLLM)
    r = infbench("export", run, "--db", str(db), "--format", "trace", "--out", str(tmp_path / "t"))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "t" / "trace.jsonl").read_text().splitlines()]
    doc = json.loads(VLLM.read_text())
    assert [x["input_tokens"] for x in rows] == doc["input_lens"]
    assert [x["output_tokens"] for x in rows] == doc["output_lens"]
    t0 = doc["start_times"][0]
    assert [round(x["timestamp"], 6) for x in rows] == [round(t - t0, 6) for t in doc["start_times"]]


def test_export_trace_says_what_it_left_out(tmp_path: Path) -> None:
    doc = json.loads(VLLM.read_text())
    doc["errors"][2], doc["latencies"][2], doc["ttfts"][2], doc["itls"][2] = "Bad Gateway", 0.0, 0.0, []
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc))
    db = tmp_path / "s.duckdb"
    run = _import(db, "vllm-bench", path)
    r = infbench("export", run, "--db", str(db), "--format", "trace", "--out", str(tmp_path / "t"))
    assert r.returncode == 0
    assert "1 of 40 requests have no recorded length and were left out" in r.stderr
    assert len((tmp_path / "t" / "trace.jsonl").read_text().splitlines()) == 39
