"""`infbench run` against a real vLLM: both endpoints and every workload that a real engine
serves, prompt sizes exact through its `/tokenize`, the report, and vLLM's prefix cache seen
through `--reuse-prompts` (and not through the default salted text)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.real_engine.conftest import infbench, metric, ok
from tools.real_vllm.server import VllmServer


def run(srv: VllmServer, db: Path, *args: str) -> duckdb.DuckDBPyConnection:
    ok(infbench("run", "--url", srv.url, "--db", str(db), "--quiet", *args))
    return duckdb.connect(str(db), read_only=True)


def last_run(con: duckdb.DuckDBPyConnection) -> tuple[str, str, dict]:
    rid, status, summary = con.execute(
        "SELECT run_id, status, summary FROM runs ORDER BY created_at DESC LIMIT 1").fetchall()[0]
    return rid, status, json.loads(summary) if isinstance(summary, str) else summary


@pytest.mark.parametrize("endpoint,n,conc,inp,out", [
    ("completions", 24, 4, 300, 24),
    ("chat", 18, 3, 170, 40),
])
def test_synthetic_run_prompt_sizes_exact(vllm: VllmServer, tmp_path: Path, endpoint: str, n: int,
                                          conc: int, inp: int, out: int) -> None:
    con = run(vllm, tmp_path / "r.duckdb", "--endpoint", endpoint, "--num-requests", str(n),
              "--concurrency", str(conc), "--input-tokens", str(inp), "--output-tokens", str(out))
    rid, status, _ = last_run(con)
    assert status == "completed"
    rows = con.execute("""SELECT prompt_tokens, prompt_tokens_source, output_tokens, status_code,
                                 first_content_ns IS NOT NULL
                          FROM requests WHERE run_id = ? AND phase = 'measure'""",
                       [rid]).fetchall()
    assert len(rows) == n
    # the server's own usage: every prompt exactly the asked size (sized with /tokenize), every
    # answer exactly max_tokens (ignore_eos). A random-weight model can answer in special
    # tokens only, which stream as chunks without text: those requests have no TTFT (NULL),
    # and they stay rare
    assert {r[0] for r in rows} == {inp}, rows
    assert {r[2] for r in rows} == {out}
    assert {r[3] for r in rows} == {200}, rows
    assert sum(not r[4] for r in rows) <= max(1, n // 8), rows


@pytest.mark.parametrize("workload,extra", [
    ("prefix", ("--prefix-groups", "3", "--prefix-tokens", "256", "--input-tokens", "384")),
    ("multiturn", ("--turns", "3", "--input-tokens", "120")),
    ("structured", ("--input-tokens", "150")),
])
def test_workloads_complete_on_the_real_server(vllm: VllmServer, tmp_path: Path, workload: str,
                                               extra: tuple[str, ...]) -> None:
    endpoint = "chat" if workload in ("multiturn", "structured") else "completions"
    con = run(vllm, tmp_path / "w.duckdb", "--workload", workload, "--endpoint", endpoint,
              "--num-requests", "15", "--concurrency", "3", "--output-tokens", "20", *extra)
    rid, status, _ = last_run(con)
    assert status == "completed"
    n, bad, tokens = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE status_code <> 200 OR error_class IS NOT NULL),
                  min(prompt_tokens) FROM requests WHERE run_id = ?""", [rid]).fetchall()[0]
    assert n >= 15 and bad == 0 and tokens > 0
    if workload == "multiturn":
        # each later turn carries the conversation so far: its prompt is longer than turn 1's
        grow = con.execute("""SELECT bool_and(p2 > p1) FROM (
            SELECT conversation_id, min(prompt_tokens) FILTER (WHERE turn = 1) p1,
                   max(prompt_tokens) FILTER (WHERE turn > 1) p2
            FROM requests WHERE run_id = ? GROUP BY 1 HAVING p2 IS NOT NULL)""",
                           [rid]).fetchall()[0][0]
        assert grow


def test_report_terminal_and_html(vllm: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "rep.duckdb"
    run(vllm, db, "--num-requests", "12", "--concurrency", "3", "--input-tokens", "200",
        "--output-tokens", "30", "--scrape-interval", "0.5").close()
    text = ok(infbench("show", "last", "--db", str(db)))
    assert "TTFT" in text
    html = tmp_path / "run.html"
    ok(infbench("report", "last", "--db", str(db), "--html", str(html)))
    page = html.read_text()
    assert "<html" in page.lower() and "tiny-llama" in page


def _cached(con: duckdb.DuckDBPyConnection, rid: str) -> tuple[int, int]:
    return con.execute("""SELECT coalesce(sum(cached_tokens), 0), sum(prompt_tokens)
                          FROM requests WHERE run_id = ?""", [rid]).fetchall()[0]


def test_reuse_prompts_hits_vllms_prefix_cache_and_salted_text_does_not(
        vllm: VllmServer, tmp_path: Path) -> None:
    args = ("--num-requests", "10", "--concurrency", "2", "--input-tokens", "640",
            "--output-tokens", "8", "--seed", "7")
    db = tmp_path / "c.duckdb"
    # salted (the default): the same seed twice sends the same lengths in fresh text, which
    # the second run must not find in vLLM's prefix cache
    for _ in range(2):
        hits0 = metric(vllm, "vllm:prefix_cache_hits_total")
        con = run(vllm, db, *args)
        rid, _, _ = last_run(con)
        cached, prompt = _cached(con, rid)
        con.close()
        hits = metric(vllm, "vllm:prefix_cache_hits_total") - hits0
        assert cached < 0.05 * prompt and hits < 0.05 * prompt, (cached, hits, prompt)
    # --reuse-prompts twice: the second run sends byte-identical prompts, served from the cache
    # (whole blocks only; vLLM always computes the last prompt token)
    run(vllm, db, *args, "--reuse-prompts").close()
    hits0 = metric(vllm, "vllm:prefix_cache_hits_total")
    con = run(vllm, db, *args, "--reuse-prompts")
    rid, _, _ = last_run(con)
    cached, prompt = _cached(con, rid)
    hits = metric(vllm, "vllm:prefix_cache_hits_total") - hits0
    assert cached > 0.75 * prompt, (cached, prompt)
    assert hits >= 0.9 * cached, (hits, cached)
