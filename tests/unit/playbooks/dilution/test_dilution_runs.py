"""The dilution over stored runs without a target: what each run's traffic was, which
properties differ, the re-runs' requests (production's own with everything swapped), matched
strata, and the refusals (unknown run, same run, different models: one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from infbench.cli import app
from infbench.exit_codes import USAGE
from infbench.store import create_run, finish_run, new_run_id, open_store
from infbench.store.writer import insert_batch, to_arrow
from playbooks.dilution import DilutionOptions, diagnose_dilution, plan_dilution
from playbooks.dilution.plan import recipes
from tests.support.stores import new_store


def write_run(con, *, inputs: list[int], outputs: list[int], ttft_ms, model: str = "m-1",
              cached: list[int] | None = None, slots: int | None = 4, gaps_s: list[float] | None = None,
              temperature: float = 0.0, workload: str = "synthetic") -> str:
    """A run of len(inputs) requests: TTFT as given, 5 ms per further token, sent closed loop
    (`slots`) back to back or open loop at the given gaps."""
    n = len(inputs)
    run_id = new_run_id()
    arrivals = {"kind": "closed", "concurrency": slots} if slots else {"kind": "gamma", "rate": 1.0}
    create_run(con, run_id=run_id, config={"workload": {"workload": workload}, "arrivals": arrivals,
                                           "sampling": {"temperature": temperature, "ignore_eos": True},
                                           "target": {"url": "http://127.0.0.1:9", "endpoint": "completions"}},
               target_url="http://127.0.0.1:9", model=model, endpoint="completions", t0_monotonic_ns=0)
    at = np.cumsum([0.0, *(gaps_s or [0.05] * (n - 1))])[:n]
    send = (at * 1e9).astype(np.int64)
    first = send + (np.asarray(ttft_ms, dtype=float) * 1e6).astype(np.int64)
    last = first + (np.asarray(outputs) - 1) * 5_000_000
    reqs = {"request_idx": list(range(n)), "phase": ["measure"] * n, "label": ["synthetic"] * n,
            "send_ns": send.tolist(), "intended_send_ns": None if slots else send.tolist(),
            "first_content_ns": first.tolist(), "last_content_ns": last.tolist(),
            "last_choices_ns": last.tolist(), "last_chunk_ns": last.tolist(), "end_ns": last.tolist(),
            "prompt_tokens": list(inputs), "target_input_tokens": list(inputs), "output_tokens": list(outputs),
            "max_tokens": list(outputs), "cached_tokens": cached if cached is not None else [0] * n}
    if reqs["intended_send_ns"] is None:
        reqs["intended_send_ns"] = [None] * n
    insert_batch(con, run_id, "requests", to_arrow("requests", reqs))
    finish_run(con, run_id, status="completed", reason=None, summary={})
    return run_id


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    return tmp_path / "d.duckdb"


def _two(store: Path, **prod_kw) -> tuple[str, str]:
    con = new_store(store)
    try:
        rng = np.random.default_rng(5)
        n = 48
        bench = write_run(con, inputs=[256] * n, outputs=[64] * n, ttft_ms=20 + rng.random(n))
        kw = {"inputs": [256] * n, "outputs": [64] * n, "ttft_ms": 20 + rng.random(n)} | prod_kw
        prod = write_run(con, **kw)
    finally:
        con.close()
    return bench, prod


def test_only_what_differs_is_re_run_and_all_swapped_sends_production(store: Path) -> None:
    inputs = [300 + 37 * (i % 9) for i in range(48)]
    outputs = [16 + (i % 5) * 8 for i in range(48)]
    bench, prod = _two(store, inputs=inputs, outputs=outputs, temperature=0.7)
    plan = plan_dilution(store, bench, prod, requests=48, seconds=9)
    assert plan.differing == ("input_lengths", "output_lengths", "sampling")
    assert "arrivals" in plan.not_swapped and "prefix_share" in plan.not_swapped
    text = "\n".join(plan.describe("http://127.0.0.1:9"))
    assert "at most 240 requests and 45 s" in text  # baseline, three swaps and all: 5 runs
    todo = recipes(plan, "s1")
    assert [r["name"] for r in todo] == ["baseline", "input_lengths", "output_lengths", "sampling", "all"]
    every = todo[-1]
    assert [r["input_tokens"] for r in every["rows"]] == inputs
    assert [r["output_tokens"] for r in every["rows"]] == outputs
    assert every["temperature"] == 0.7 and every["arrivals"] == {"kind": "closed", "concurrency": 4}
    one = todo[1]  # production's prompts, the benchmark's replies and sampling
    assert [r["input_tokens"] for r in one["rows"]] == inputs
    assert {r["output_tokens"] for r in one["rows"]} == {64} and one["temperature"] == 0.0


def test_prefix_share_is_carried_as_a_share_of_the_prompt(store: Path) -> None:
    n = 48
    bench, prod = _two(store, cached=[0, *([128] * (n - 1))])  # half of every 256-token prompt
    plan = plan_dilution(store, bench, prod, requests=10, seconds=3, attribution="shapley")
    assert plan.differing == ("prefix_share",)
    rows = recipes(plan, "s")[-1]["rows"]
    assert [r["shared_tokens"] for r in rows] == [0, *([128] * 9)]
    assert len(recipes(plan, "s")) == 2  # Shapley over one property: the baseline and the swap


def test_a_budget_is_refused_before_anything_runs(store: Path) -> None:
    bench, prod = _two(store, inputs=[900] * 48)
    for kw, what in (({"requests": 0}, "requests"), ({"seconds": -1.0}, "seconds"), ({"repeats": 0}, "repeats")):
        with pytest.raises(ValueError, match=what):
            plan_dilution(store, bench, prod, **kw)


@pytest.mark.parametrize("shift_ms", [35.0, 120.0])
def test_matched_strata_give_a_length_only_difference_to_the_lengths(store: Path, shift_ms: float) -> None:
    """TTFT a function of the prompt's length only: production's longer prompts are the gap,
    and strata matched on length leave no interaction beyond noise."""
    con = new_store(store)
    try:
        lens_b = [200 + 100 * (i % 4) for i in range(80)]
        lens_p = [200 + 100 * (3 - (i % 4) // 2) for i in range(80)]  # the longer half, more often
        def ttft(lens):
            return [10 + shift_ms * (x - 200) / 300 for x in lens]
        bench = write_run(con, inputs=lens_b, outputs=[32] * 80, ttft_ms=ttft(lens_b))
        prod = write_run(con, inputs=lens_p, outputs=[32] * 80, ttft_ms=ttft(lens_p))
        d = diagnose_dilution(con, bench, DilutionOptions(prod=prod, metric="ttft_ms", no_rerun=True))
    finally:
        con.close()
    t = {r["part"]: r["value"] for r in d.context["table"] if r["metric"] == "ttft_ms"}
    expected = float(np.mean(ttft(lens_p)) - np.mean(ttft(lens_b)))
    assert t["gap"] == pytest.approx(expected)
    assert t["input_lengths"] == pytest.approx(expected, abs=1e-5)  # the table keeps 6 decimals
    assert abs(t["interaction"]) < 1e-5
    assert d.findings[0].verdict == "dilution_input_lengths"


def _cli(*args: str) -> object:
    return CliRunner().invoke(app, ["diagnose", "dilution", *args])


def test_an_unknown_run_is_one_line_exit_2(store: Path) -> None:
    bench, _ = _two(store)
    r = _cli(bench, "nosuchrun", "--db", str(store), "--dry-run")
    assert r.exit_code == USAGE
    assert r.stderr.strip().splitlines() == ["error: run 'nosuchrun': no such run in this store (see `infbench runs`)"]


def test_runs_of_different_models_are_refused_in_one_line(store: Path) -> None:
    bench, prod = _two(store, model="other-7b")
    r = _cli(bench, prod, "--db", str(store))
    assert r.exit_code == USAGE
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "different models" in lines[0] and "'other-7b'" in lines[0]
    r = _cli(bench, bench, "--db", str(store))
    assert r.exit_code == USAGE and "same run" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_no_rerun_refuses_a_whole_run_metric_and_dry_run_sends_nothing(store: Path) -> None:
    bench, prod = _two(store, inputs=[1024] * 48)
    r = _cli(bench, prod, "--db", str(store), "--no-rerun")
    assert r.exit_code == USAGE and "--metric ttft_ms or tpot_ms" in r.stderr
    r = _cli(bench, prod, "--db", str(store), "--dry-run", "--requests", "7", "--seconds", "2")
    assert r.exit_code == 0, r.output
    assert "re-runs: baseline, input_lengths" in r.stdout and "at most 14 requests and 4 s" in r.stdout
    con = open_store(store, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    finally:
        con.close()
    r = _cli(bench, prod, "--db", str(store), "--metric", "latency")
    assert r.exit_code == USAGE and "metric" in r.stderr


@pytest.mark.parametrize("counts", [{"requests": 40, "replicas": 1}, {"requests": 9, "replicas": 3, "configs": 1}])
def test_the_triage_never_runs_it_and_says_how_to(counts: dict) -> None:
    from playbooks.registry import BY_NAME
    runs, why = BY_NAME["dilution"].needs.check(counts, "H100-SXM", "m-7b")
    assert not runs and "infbench diagnose dilution BENCH_RUN PROD_RUN" in why
