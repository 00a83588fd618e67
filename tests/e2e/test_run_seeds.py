"""Seeds end to end: a repeated run is not served from the prefix cache unless asked
(--reuse-prompts), and one seed sends the same schedule and lengths to targets whose
tokenizers differ (the known-schedule mock: ~4 bytes a token; the reference engine: 1 byte a
token plus BOS), with the same stored workload fingerprint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.e2e.engine_process import EngineProcess
from tests.support.cli import infbench
from tests.support.docs import example_docs
from tests.support.process import sse_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with sse_server("--ttft-ms", "2", "--itl-ms", "1") as url:
        yield url


def _run(url: str, db: Path, *args: str) -> dict[str, Any]:
    r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _last_run(db: Path) -> tuple[str, dict[str, Any], str]:
    run_id, config, fp = _query(db, "SELECT run_id, config, workload_fingerprint FROM runs "
                                    "ORDER BY created_at DESC, run_id DESC LIMIT 1")[0]
    return run_id, json.loads(config), fp


def _cached_share(db: Path, run_id: str) -> float:
    (cached, prompt, n), = _query(db, "SELECT sum(cached_tokens), sum(prompt_tokens), count(cached_tokens) "
                                      f"FROM requests WHERE run_id = '{run_id}' AND error_class IS NULL")
    assert n > 0, "the engine reports cached tokens for every request"
    return cached / prompt


LOAD = ("--seed", "3", "--arrival", "closed", "--concurrency", "4", "--num-requests", "16",
        "--input-tokens", "uniform:200:400", "--output-tokens", "4")


def test_repeated_runs_get_fresh_prompts_unless_reuse_is_asked(engine: EngineProcess, tmp_path: Path) -> None:
    db = tmp_path / "cache.duckdb"
    shares, fps, warnings = [], [], []
    for extra in ((), (), ("--reuse-prompts",), ("--reuse-prompts",)):
        s = _run(engine.url, db, *LOAD, *extra)
        run_id, config, fp = _last_run(db)
        assert config["prompts"]["reuse"] == bool(extra)
        assert (config["prompts"]["salt"] is None) == bool(extra)
        assert s["workload_fingerprint"] == fp and s["prefix_cache"] is not None
        shares.append(_cached_share(db, run_id))
        fps.append(fp)
        warnings.append([w for w in s["warnings"] if "prefix cache" in w])
    salts = {json.loads(c)["prompts"]["salt"] for (c,) in _query(db, "SELECT config FROM runs")}
    assert len(salts) == 3  # two salts and the unsalted reuse runs
    # The second identical run used to be 97% cached; with fresh text only BOS-sized luck remains.
    assert shares[1] < 0.02, f"cached shares per run: {shares}"
    assert shares[2] < 0.02, f"the first reuse run follows salted runs: {shares}"
    assert shares[3] > 0.8, f"the second reuse run should be served from the cache: {shares}"
    assert warnings[:3] == [[], [], []] and len(warnings[3]) == 1 and "--reuse-prompts" in warnings[3][0]
    assert len(set(fps)) == 1, "salting changes the text, never the fingerprint"


@pytest.mark.parametrize("load", [
    ("--arrival", "poisson", "--rate", "40", "--input-tokens", "lognormal:200:0.5",
     "--output-tokens", "uniform:4:12"),
    ("--arrival", "gamma", "--rate", "30", "--burstiness", "0.4", "--input-tokens", "uniform:60:700",
     "--output-tokens", "lognormal:8:0.3", "--workload", "prefix", "--prefix-groups", "3",
     "--prefix-tokens", "50"),
], ids=["poisson-lognormal", "gamma-uniform-prefix"])
def test_one_seed_same_schedule_and_lengths_on_any_target(engine: EngineProcess, mock: str, tmp_path: Path,
                                                         load: tuple[str, ...]) -> None:
    rows, fps, per_word = [], [], []
    for url, name in ((mock, "mock"), (engine.url, "engine")):
        db = tmp_path / f"{name}.duckdb"
        _run(url, db, "--seed", "17", "--num-requests", "24", *load)
        run_id, config, fp = _last_run(db)
        per_word.append(config["token_model"]["per_word"])
        fps.append(fp)
        rows.append(_query(db, "SELECT request_idx, label, intended_send_ns, target_input_tokens, max_tokens "
                               f"FROM requests WHERE run_id = '{run_id}' ORDER BY request_idx"))
    assert per_word[1] > 2 * per_word[0], f"the targets' calibrations should differ: {per_word}"
    assert len(rows[0]) == 24 and rows[0] == rows[1]
    assert fps[0] == fps[1] and fps[0].startswith("wf1-")


def test_a_bad_seed_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = infbench("run", "--url", "http://127.0.0.1:9", "--db", str(tmp_path / "x.duckdb"), "--seed", "-1")
    assert r.returncode == 2
    assert "seed" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.duckdb").exists()


def test_help_documents_reuse_prompts() -> None:
    r = infbench("run", "--help", COLUMNS="200")
    assert r.returncode == 0 and "--reuse-prompts" in r.stdout and "prefix-cache" in r.stdout


def test_readme_reuse_example_hits_the_cache(engine: EngineProcess, tmp_path: Path) -> None:
    """The docs' two --reuse-prompts commands (README and guides), as written, against the test
    engine (the URL swapped, the run shortened): the second is served from the cache the first
    filled."""
    lines = [ln.split("#")[0].split() for doc in example_docs() for ln in doc.read_text().splitlines()
             if ln.startswith("infbench run") and "--reuse-prompts" in ln]
    assert len(lines) == 2
    db = tmp_path / "readme.duckdb"
    for argv in lines:
        args = argv[2:]
        at = args.index("--url")
        del args[at:at + 2]  # _run passes the test engine's URL instead
        _run(engine.url, db, *args, "--rate", "50", "--num-requests", "8")
        run_id, config, _ = _last_run(db)
        assert config["prompts"]["reuse"] is True
    assert _cached_share(db, run_id) > 0.8


@pytest.mark.parametrize("arrival", [("--arrival", "closed", "--concurrency", "5"),
                                     ("--arrival", "poisson", "--rate", "60")])
def test_requests_keep_the_workloads_order_when_counts_answer_out_of_order(
        tmp_path: Path, arrival: tuple[str, ...]) -> None:
    """A target whose /tokenize counts do not follow the token model is counted per request;
    counts that come back out of order (a busy server) must not reorder the stored indices, or
    two runs of one seed get different fingerprints and the gate refuses to pair them (seen on
    a real vLLM)."""
    with sse_server("--tokenize", "--tokenize-delay-ms", "15") as url:
        docs = [_run(url, tmp_path / "o.duckdb", *arrival, "--num-requests", "40", "--seed", "5",
                     "--input-tokens", "uniform:40:400", "--output-tokens", "4") for _ in range(2)]
    assert docs[0]["workload_fingerprint"] == docs[1]["workload_fingerprint"]
    rows = _query(tmp_path / "o.duckdb", "SELECT run_id, request_idx, target_input_tokens "
                                         "FROM requests ORDER BY run_id, request_idx")
    a = [r[2] for r in rows if r[0] == docs[0]["run_id"]]
    b = [r[2] for r in rows if r[0] == docs[1]["run_id"]]
    assert a == b and len(a) == 40
