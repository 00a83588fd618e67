"""The startup playbook over imported logs: the same verdict and fixes as `plan memory`, the
term that differs, and what it says when the arithmetic cannot be done."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.specs import get_gpu, get_model
from infbench.specs.memory import plan_memory
from playbooks.startup import StartupOptions, diagnose_startup
from probes.startup_log import import_startup_log
from reference_engine import startup_log
from tests.support.stores import new_store

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "startup_logs"


@pytest.fixture
def con(tmp_path: Path):  # noqa: ANN201
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def diagnose(con, name: str, **opts):  # noqa: ANN001, ANN003, ANN201
    imported = import_startup_log(con, FIXTURES / name)
    return diagnose_startup(con, imported.log_id, StartupOptions(**opts))


def test_70b_on_two_h100_at_128k_gets_plan_memorys_verdict_and_fixes(con) -> None:  # noqa: ANN001
    d = diagnose(con, "reference_70b_2xh100_128k_failed.log")
    plan = plan_memory(get_model("llama-3.1-70b"), get_gpu("h100"), tp=2, max_model_len=131072)
    assert d.verdicts()[0] == "startup_kv_cache_too_small"
    assert d.context["fits_as_configured"] is plan.fits is False
    assert d.context["failing_term"] == plan.failing_term == "kv_cache"
    fixes = d.context["fixes"]
    assert [(f["change"], f["fits"], f["kv_tokens"]) for f in fixes[:len(plan.fixes)]] == [
        (f.change, f.fits, f.kv_tokens) for f in plan.fixes]
    # ... and the command line says the same: `infbench plan memory --json`.
    out = subprocess.run([sys.executable, "-m", "infbench", "plan", "memory", "-m", "llama-3.1-70b",
                          "-g", "h100", "-tp", "2", "--max-model-len", "131072", "--json"],
                         capture_output=True, text=True, timeout=60)
    cli = json.loads(out.stdout)
    assert [f["change"] for f in cli["fixes"]] == [f["change"] for f in fixes[:len(cli["fixes"])]]
    assert cli["failing_term"] == d.context["failing_term"]
    # The one change plan memory does not list: graphs freed, not enough on their own here.
    assert fixes[-1]["change"].startswith("fewer CUDA graph sizes") and not fixes[-1]["fits"]
    assert not any(f.verdict == "startup_term_differs" for f in d.findings)


def _reference_log(path: Path, plan) -> Path:  # noqa: ANN001
    """The reference engine's start-up lines for `plan`, as its engine writes them."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(startup_log.VLLM_FORMAT, startup_log.VLLM_DATEFMT))
    startup_log.log.addHandler(handler)
    old = startup_log.log.level
    startup_log.log.setLevel(logging.INFO)
    try:
        startup_log.log_plan(plan)
    finally:
        startup_log.log.removeHandler(handler)
        startup_log.log.setLevel(old)
        handler.close()
    return path


def test_graph_memory_is_a_priced_fix_when_it_is_the_margin(con, tmp_path: Path) -> None:  # noqa: ANN001
    # 8B at 32K with utilization 0.256 of 80 GiB: the 0.5 GiB graph estimate decides whether it fits.
    model, gpu = get_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM")
    plan = plan_memory(model, gpu, gpu_memory_utilization=0.256, max_model_len=32768)
    eager = plan_memory(model, gpu, gpu_memory_utilization=0.256, max_model_len=32768,
                        enforce_eager=True)
    assert not plan.fits and eager.fits  # the case this test is about
    imported = import_startup_log(con, _reference_log(tmp_path / "ref.log", plan))
    d = diagnose_startup(con, imported.log_id, StartupOptions(
        model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", gpu_memory_utilization=0.256))
    assert d.verdicts()[0] == "startup_kv_cache_too_small"
    graph = d.context["fixes"][-1]
    assert graph["fits"] and graph["kv_tokens"] == eager.kv_tokens
    assert "enforce-eager" in graph["change"]


def test_term_that_differs_is_named_with_its_size(con) -> None:  # noqa: ANN001
    # vLLM 0.6.4 on a 24 GiB card: the profile run peaked 2.99 GiB above the weights where the
    # arithmetic's estimate for 29000-token max_num_batched_tokens default is about 1 GiB.
    d = diagnose(con, "vllm_0.6.4_v0_kv_too_small.log", model="meta-llama/Llama-3.1-8B",
                 gpu="L4")
    differs = next(f for f in d.findings if f.verdict == "startup_term_differs")
    assert differs.title == "The activation term differs from the arithmetic"
    assert "2.99 GiB" in differs.summary
    assert d.context["setup"]["max_model_len"] == 29000
    assert d.context["setup"]["source"]["max_model_len"] == "the error line"


def test_without_model_and_gpu_phases_are_still_read(con) -> None:  # noqa: ANN001
    d = diagnose(con, "vllm_0.6.5_v0_started.log")
    assert d.verdicts() == ["startup_ok"]
    assert any("pass --model and --gpu" in n for n in d.notes)
    # vLLM V0 printed the profiling time first, then one line with weights, non-torch,
    # activation and the KV rest; graph capture came after the pool.
    assert d.context["phases"] == ["profile", "weights", "kv_cache", "cuda_graphs"]


def test_incomplete_log_says_so(con) -> None:  # noqa: ANN001
    d = diagnose(con, "vllm_0.6.5_v0_results_table_truncated.log", model="meta-llama/Llama-3.1-8B",
                 gpu="H100-SXM", tp=2)
    assert d.verdicts()[0] == "startup_log_incomplete"
    assert d.findings[0].severity == "warning"


def test_evidence_sql_reruns_to_the_same_numbers(con) -> None:  # noqa: ANN001
    d = diagnose(con, "sglang_tp8_started.log")
    ev = next(e for f in d.findings for e in f.evidence if e.name == "phases_in_order")
    rows = con.execute(ev.sql).fetchall()
    assert [r[0] for r in rows] == d.context["phases"] == ["kv_cache", "cuda_graphs"]
