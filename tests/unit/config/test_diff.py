"""`infbench config diff`: two captured vLLM configurations several defaults apart, ranked
for the stated workload, each difference with why it matters and why it differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.config.capture import capture_source
from infbench.config.diff import DiffResult, diff_sides, side_of
from infbench.config.impact import Workload, price
from infbench.config.render import to_json, to_markdown, to_text
from tests.support.cli import infbench

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "config_logs"
LLAMA = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100"}


def _diff(a: str, b: str, wl: Workload) -> DiffResult:
    ca, cb = capture_source(str(FIX / a)), capture_source(str(FIX / b))
    return diff_sides(side_of(ca.engine, ca.version, ca.settings), side_of(cb.engine, cb.version, cb.settings),
                      wl, ({"label": "old"}, {"label": "new"}))


def _rank(r: DiffResult) -> list[str]:
    return [d.key for d in r.differences]


def test_busy_long_prompt_workload_ranks_engine_graphs_and_budget_first() -> None:
    r = _diff("vllm_0.4.1_v0.log", "vllm_0.10.2_v1.log",
              Workload(concurrency=64, input_tokens=2048, output_tokens=256, **LLAMA))
    top = _rank(r)[:6]
    assert top[0] == "engine_v1"
    assert {"enforce_eager", "cudagraph_mode", "max_num_batched_tokens", "enable_chunked_prefill"} <= set(top)
    by = {d.key: d for d in r.differences}
    assert "default moved False (0.4.1) -> True (0.10.2)" in by["engine_v1"].why_different
    assert "PR #15064" in by["engine_v1"].why_different
    assert by["enforce_eager"].why_different.startswith("set explicitly on B")
    budget = by["max_num_batched_tokens"]
    assert budget.priced and budget.a == 8192 and budget.b == 2048  # V0: max(max_model_len, 2048)
    assert "prefills in 1 -> 2 steps" in budget.reason
    graphs = by["cudagraph_mode"]
    assert graphs.priced and graphs.worse == "b" and "eager" in graphs.reason
    # Everything ranked has a reason; settings without a known effect come last; where the
    # server listens is no cause at all: listed apart, never ranked.
    assert all(d.reason and d.why_different for d in r.differences)
    unknown = [i for i, d in enumerate(r.differences) if "no known effect" in d.reason]
    known = [i for i, d in enumerate(r.differences) if "no known effect" not in d.reason]
    assert not unknown or max(known) < min(unknown)
    assert [d.key for d in r.inert] == ["host"] and "host" not in {d.key for d in r.differences}
    assert "no effect on speed (not ranked): host" in to_text(r)


def test_shared_prefix_light_workload_puts_prefix_caching_above_the_token_budget() -> None:
    busy = _diff("vllm_0.4.1_v0.log", "vllm_0.10.2_v1.log",
                 Workload(concurrency=64, input_tokens=2048, output_tokens=256, **LLAMA))
    light = _diff("vllm_0.4.1_v0.log", "vllm_0.10.2_v1.log",
                  Workload(concurrency=2, input_tokens=256, output_tokens=64, shared_prefix=True, **LLAMA))
    rb, rl = _rank(busy), _rank(light)
    assert rb.index("max_num_batched_tokens") < rb.index("enable_prefix_caching")
    assert rl.index("enable_prefix_caching") < rl.index("max_num_batched_tokens")


def test_a_default_neither_log_prints_is_catalog_context_not_a_difference() -> None:
    r = _diff("vllm_0.4.1_v0.log", "vllm_0.10.2_v1.log", Workload(**LLAMA))
    assert "generation_config" not in _rank(r) and all(g.key != "generation_config" for g in r.gaps)
    gen = next(m for m in r.unobserved_moves if m["key"] == "generation_config")
    assert (gen["a"], gen["b"], gen["approx"]) == ("vllm", "auto", True) and "PR #12622" in gen["source"]
    assert "shown by neither side (not observed): generation_config vllm -> auto" in to_text(r)


def test_kv_capacity_is_priced_against_the_workloads_concurrency() -> None:
    base = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100", "max_num_seqs": 512,
            "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8"}
    wl = Workload(concurrency=256, input_tokens=3000, output_tokens=1000)
    p = price("kv", base, {**base, "kv_cache_dtype": "auto"}, wl)
    assert p is not None and p.worse == "b"
    fp8, bf16 = p.numbers["kv_sequences"]
    assert 1.9 < fp8 / bf16 < 2.1  # fp8 KV holds twice the sequences
    assert f"holds {fp8} -> {bf16} sequences" in p.reason and "wait or are preempted" in p.reason
    small = price("kv", base, {**base, "kv_cache_dtype": "auto"}, Workload(concurrency=8))
    assert small is not None and "both hold the 8" in small.reason


def test_renderings_agree() -> None:
    r = _diff("sglang_2025-01.log", "sglang_2026-02.log", Workload(concurrency=64, shared_prefix=True))
    doc = json.loads(to_json(r))
    assert [d["key"] for d in doc["differences"]] == _rank(r)
    md = to_markdown(r)
    assert md.count("\n| ") == len(r.differences) + 2  # header, rule, one row each
    text = to_text(r, top=5)
    assert text.count("why it matters:") == 5 and "more with lower expected impact" in text
    policy = next(d for d in r.differences if d.key == "scheduling_policy")
    assert (policy.a, policy.b) == ("lpm", "fcfs")


def test_cli_diff(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    for name, label in (("vllm_0.4.1_v0.log", "old"), ("vllm_0.10.2_v1.log", "new")):
        assert infbench("config", "capture", str(FIX / name), "--db", db, "--label", label).returncode == 0
    md = tmp_path / "d.md"
    r = infbench("config", "diff", "old", "new", "--db", db, "--model", "meta-llama/Llama-3.1-8B",
                 "--gpu", "H100", "--concurrency", "64", "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("A: old (vllm 0.4.1)") and " 1. engine_v1: false -> true" in r.stdout
    assert md.read_text().startswith("## infbench config diff")
    r = infbench("config", "diff", "old", "missing", "--db", db)
    assert r.returncode == 2 and "no such config" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["--concurrency", "0"], ["--top", "0"]])
def test_cli_diff_rejects_bad_workloads(tmp_path: Path, args: list[str]) -> None:
    r = infbench("config", "diff", "a", "b", "--db", str(tmp_path / "s.duckdb"), *args)
    assert r.returncode == 2 and "must be positive" in r.stderr
