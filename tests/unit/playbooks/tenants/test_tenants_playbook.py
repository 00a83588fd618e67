"""The tenants playbook on stores written row by row from a one-at-a-time server simulated
here, each request served for its roofline price (infbench.specs.token_cost): the heavy tenant
named under FCFS, not under a fair order of the same arrivals, nothing on a balanced mix."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.specs.token_cost import (
    decode_layer_tokens,
    kv_seconds,
    prefill_seconds,
    step_weight_seconds,
)
from infbench.store import create_run
from playbooks.tenants import diagnose_tenants, tenant_table
from playbooks.tenants.accounting import run_cost_model
from tests.support.stores import insert_rows, new_store

MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM"
CM = run_cost_model(MODEL, GPU)


def cost(prompt: int, out: int) -> tuple[float, float]:
    """(prefill, decode) seconds of a request served alone (decode batch 1)."""
    return (prefill_seconds(CM, prompt, 0),
            (out - 1) * step_weight_seconds(CM, 1) + kv_seconds(CM, decode_layer_tokens(CM.kv, prompt + 1, out - 1)))


def simulate(tenants: dict[str, tuple[float, int, int]], rate: float, n: int, policy: str,
             seed: int) -> list[tuple[str, int, int, int, int, int]]:
    """Poisson arrivals, tenant drawn by weight; one request served at a time, fcfs or the
    tenant least charged so far. Rows: (tenant, prompt, out, send, first, last) in ns."""
    rng = np.random.default_rng(seed)
    names = list(tenants)
    w = np.array([tenants[t][0] for t in names])
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    who = rng.choice(len(names), n, p=w / w.sum())
    queue: list[int] = []
    charged = {t: 0.0 for t in names}
    rows, now, k = [], 0.0, 0
    while k < n or queue:
        while k < n and arrivals[k] <= now:
            queue.append(k)
            k += 1
        if not queue:
            now = arrivals[k]
            continue
        if policy == "fcfs":
            i = queue.pop(0)
        else:
            best = min(queue, key=lambda j: (charged[names[who[j]]], arrivals[j]))
            queue.remove(best)
            i = best
        t = names[who[i]]
        _, prompt, out = tenants[t]
        pre, dec = cost(prompt, out)
        charged[t] += pre + dec
        first, now = now + pre, now + pre + dec
        rows.append((t, prompt, out, int(arrivals[i] * 1e9), int(first * 1e9), int(now * 1e9)))
    return rows


def store(tmp_path: Path, rows: list[tuple[str, int, int, int, int, int]]) -> duckdb.DuckDBPyConnection:
    tmp_path.mkdir(parents=True, exist_ok=True)
    con = new_store(tmp_path / "t.duckdb")
    config = {"engine_config": {"model": {"value": MODEL}, "gpu": {"value": GPU}}}
    create_run(con, run_id="r", config=config, target_url="http://127.0.0.1:1", model=MODEL,
               endpoint="completions", t0_monotonic_ns=0)
    insert_rows(con, "requests", [
        {"run_id": "r", "request_idx": i, "phase": "measure", "tenant": t, "send_ns": s,
         "first_content_ns": f, "last_content_ns": last, "end_ns": last, "prompt_tokens": p,
         "output_tokens": o} for i, (t, p, o, s, f, last) in enumerate(rows)])
    return con


@pytest.mark.parametrize(("docs", "chat", "rate", "seed"), [
    ((1, 3000, 2), (3, 200, 2), 80.0, 1),       # 25% of requests, most of the engine
    ((1, 4000, 2), (1, 500, 2), 70.0, 2),       # 1:1, 8x longer documents
    ((2, 2500, 3), (5, 150, 3), 60.0, 3)])
def test_fcfs_names_the_heavy_tenant_and_a_fair_order_does_not(
        tmp_path: Path, docs: tuple, chat: tuple, rate: float, seed: int) -> None:
    mix = {"docs": docs, "chat": chat}
    fcfs = diagnose_tenants(store(tmp_path / "a", simulate(mix, rate, 500, "fcfs", seed)), "r")
    [f] = fcfs.findings
    assert f.verdict == "tenant_unfair_share" and f.scope == {"tenant": "docs"}
    assert f.severity in ("warning", "critical")
    values = f.evidence[0].values
    assert values["docs.engine"] > 1.5 * values["docs.requests"]
    assert values["docs.contended"] > values["docs.entitled"] + 0.05
    assert f.evidence[0].sql and "FROM requests" in f.evidence[0].sql
    fair = diagnose_tenants(store(tmp_path / "b", simulate(mix, rate, 500, "fair", seed)), "r")
    assert fair.findings == []
    share, se = fair.context["contended_share"]["docs"], fair.context["contended_share_se"]["docs"]
    assert abs(share - 0.5) <= 3 * se, fair.context  # within the run's own noise of its weight


def test_a_balanced_mix_has_no_finding(tmp_path: Path) -> None:
    mix = {"a": (1, 600, 32), "b": (3, 600, 32)}
    d = diagnose_tenants(store(tmp_path, simulate(mix, 40.0, 400, "fcfs", 4)), "r")
    assert d.findings == []
    rows = {r["tenant"]: r for r in d.context["tenants"]}
    assert rows["a"]["share_ratio"] == pytest.approx(1.0, abs=0.25)


def test_the_tenant_table_prices_tokens_and_keeps_its_sql(tmp_path: Path) -> None:
    rows = [("docs", 3000, 16, 0, 10**8, 2 * 10**8), ("chat", 200, 16, 0, 2 * 10**8, 3 * 10**8)]
    df = tenant_table(store(tmp_path, rows), "r")
    by = df.set_index("tenant")
    assert by.loc["docs", "prefill_tokens"] == 3000 and by.loc["chat", "output_tokens"] == 16
    assert by.loc["docs", "prefill_s"] == pytest.approx(prefill_seconds(CM, 3000, 0))
    assert by["engine_share"].sum() == pytest.approx(1.0)
    assert "FROM requests" in df.attrs["sql"]


def test_a_run_without_a_gpu_is_refused_with_one_line(tmp_path: Path) -> None:
    con = new_store(tmp_path / "g.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://127.0.0.1:1", model=MODEL,
               endpoint="completions", t0_monotonic_ns=0)
    with pytest.raises(ValueError, match="--gpu"):
        diagnose_tenants(con, "r")
