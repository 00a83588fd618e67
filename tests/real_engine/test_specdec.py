"""The specdec playbook on a real vLLM (CPU build) speculating with its n-gram drafter
(`--speculative-config '{"method": "ngram", ...}'`): the acceptance the playbook reads from the
run's scrapes equals vLLM's own counters over the run's window, and the per-position counts
add up to the accepted tokens as vLLM counts them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.real_engine.conftest import infbench, metric, ok, start
from tools.real_vllm.server import VllmServer

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3}
COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total")


@pytest.fixture(scope="module")
def vllm_spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    srv = start(tmp_path_factory.mktemp("vllm_spec") / "server.log",
                ["--speculative-config", json.dumps(SPEC)])
    try:
        yield srv
    finally:
        srv.stop()


def test_acceptance_from_the_scrapes_is_vllms_own(vllm_spec: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "sd.duckdb"
    ok(infbench("run", "--url", vllm_spec.url, "--db", str(db), "--quiet",
                "--prompt-text", "repetitive", "--input-tokens", "200", "--output-tokens", "40",
                "--num-requests", "12", "--arrival", "closed", "--concurrency", "3",
                "--scrape-interval", "0.5"))
    final = {name: metric(vllm_spec, name) for name in COUNTERS}
    diag = json.loads(ok(infbench("diagnose", "specdec", "last", "--db", str(db), "--json")))
    con = open_store(db)
    try:
        # what the server had counted when the run's window opened (preflight's probes)
        at_open = dict(con.execute(
            "SELECT name, arg_min(value, t_ns) FROM metric_samples WHERE source = 'metrics' "
            "AND list_contains(?, name) GROUP BY name", [list(COUNTERS)]).fetchall())
        # a real engine keeps no step log: the counters and the streams are all there is
        assert con.execute("SELECT count(*) FROM engine_steps").fetchone()[0] == 0
    finally:
        con.close()
    drafts, draft_tokens, accepted = (final[n] - at_open[n] for n in COUNTERS)
    assert draft_tokens > 0
    f = next(f for f in diag["findings"] if f["verdict"] in ("spec_acceptance", "spec_low_acceptance"))
    v = next(e["values"] for e in f["evidence"] if e["name"] == "spec_decode_counters")
    assert v["acceptance_rate"] == pytest.approx(accepted / draft_tokens, rel=0.01)
    assert v["mean_accepted_length"] == pytest.approx(1 + accepted / drafts, rel=0.01)
    assert v["num_speculative_tokens"] == SPEC["num_speculative_tokens"]
    pos = next(e["values"] for e in f["evidence"] if e["name"] == "acceptance_per_position")
    assert sum(pos[f"position_{i}"] for i in range(3)) * drafts == pytest.approx(accepted, rel=0.01)
