"""Issue 24 through the playbook: the real vLLM 0.32.0 CPU server's log is a start with its
pool as evidence; copies cut before readiness, or in wordings never seen, say so by line; and
what a CPU log cannot tell names data that exists for a CPU server (never a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.startup import StartupOptions, diagnose_startup
from probes.startup_log import import_startup_log
from tests.support.stores import new_store
from tests.unit.probes.startup_log.real_cpu_log import (
    KV_REWORDED,
    KV_TOKENS_LINE,
    REAL,
    WEIGHTS_LAST,
    cut,
    join,
    reworded,
)


@pytest.fixture
def con(tmp_path: Path):  # noqa: ANN201
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def diagnose(con, path: Path, **opts):  # noqa: ANN001, ANN003, ANN201
    return diagnose_startup(con, import_startup_log(con, path).log_id, StartupOptions(**opts))


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "copy.log"
    p.write_bytes(text.encode())  # bytes: the "\r" the real log holds stay as they are
    return p


def _said(d) -> str:  # noqa: ANN001
    return " ".join([*d.notes, *(a for f in d.findings for a in f.next_actions)])


def test_the_real_cpu_log_is_a_start_with_its_pool_as_evidence(con) -> None:  # noqa: ANN001
    d = diagnose(con, REAL)
    assert d.verdicts() == ["startup_ok"]
    f = d.findings[0]
    assert f.title == "The engine started"
    assert "ready (line 63)" in f.summary and "1.00 GiB = 524,288 tokens" in f.summary
    kv = next(e for e in f.evidence if e.name == "kv_pool")
    assert (kv.values["kv_tokens"], kv.values["kv_pool"], kv.values["bytes_per_token"]) == (
        524288, "1.00 GiB", 2048)
    assert kv.values["set"] == "explicitly (VLLM_CPU_KVCACHE_SPACE)"
    assert con.execute(kv.sql).fetchall()  # the evidence SQL reruns
    figs = next(e for e in f.evidence if e.name == "logged_vs_arithmetic").values
    assert figs["cuda_graphs_log"] == "none on CPU" and figs["kv_pool_log"] == "1.00 GiB"
    unknown = next(e for e in f.evidence if e.name == "not_in_this_log").values
    assert "process_resident_memory_bytes" in unknown["weights_in_memory"]
    # Advice that exists for a CPU server only: no GPU to pass, no arithmetic for one.
    said = _said(d)
    assert "--gpu" not in said and "VLLM_CPU_KVCACHE_SPACE" in said
    assert any("each GiB holds 524,288 tokens" in a for a in f.next_actions)
    assert any(n.startswith("no arithmetic to compare with") for n in d.notes)
    assert d.context["ready_line"] == 63 and d.context["not_recognised_from"] is None


def test_a_gpu_given_for_a_cpu_log_prices_nothing(con) -> None:  # noqa: ANN001
    d = diagnose(con, REAL, model="meta-llama/Llama-3.1-8B", gpu="H100-SXM")
    assert d.verdicts() == ["startup_ok"] and "fixes" not in d.context


def test_kv_line_never_seen_on_a_started_server(con, tmp_path: Path) -> None:  # noqa: ANN001
    d = diagnose(con, write(tmp_path, join(reworded(KV_REWORDED))))
    assert d.verdicts() == ["startup_ok"]
    f = d.findings[0]
    assert f.title == "The engine started; its KV pool line was not recognised"
    assert f"not recognised from line {WEIGHTS_LAST + 1}" in f.summary
    assert "ends" not in f.summary
    assert "vllm:cache_config_info" in f.next_actions[0]
    assert d.context["not_recognised_from"] == WEIGHTS_LAST + 1


def test_cut_after_the_pool_before_readiness(con, tmp_path: Path) -> None:  # noqa: ANN001
    d = diagnose(con, write(tmp_path, cut(60)))
    f = d.findings[0]
    assert d.verdicts() == ["startup_log_incomplete"] and f.severity == "warning"
    assert f.title == "The log ends after the KV pool was sized, before the server was ready"
    assert f"Not recognised from line {KV_TOKENS_LINE + 1}" in f.summary
    assert "CUDA graph" not in f.summary  # a CPU server captures none
    assert "--gpu" not in _said(d)


@pytest.mark.parametrize(("n", "title"), [
    (50, f"Start-up not recognised from line {WEIGHTS_LAST + 1}; the log ends before the server "
         "was ready"),
    (WEIGHTS_LAST, "The log ends before the KV pool was sized"),
])
def test_cut_before_the_pool(con, tmp_path: Path, n: int, title: str) -> None:  # noqa: ANN001
    d = diagnose(con, write(tmp_path, cut(n)))
    assert d.verdicts() == ["startup_log_incomplete"] and d.findings[0].title == title
    unknown = next(e for e in d.findings[0].evidence if e.name == "not_in_this_log").values
    assert "started" in unknown and "vllm:cache_config_info" in unknown["kv_pool"]


def test_cpu_pool_too_small_names_the_cpu_fix(con, tmp_path: Path) -> None:  # noqa: ANN001
    text = ("(Worker pid=166) INFO 08-28 07:39:28 [cpu_worker.py:255] Explicitly set (1.0/7.75) "
            "GiB for KV cache on node 0.\n"
            "(EngineCore pid=110) ERROR 08-28 07:39:28 [core.py:1346] ValueError: To serve at least "
            "one request with the model's max seq len (40960), (4.38 GiB KV cache is needed, which "
            "is larger than the available KV cache memory (1.0 GiB). Based on the available "
            "memory, the estimated maximum model length is 9344.\n")
    d = diagnose(con, write(tmp_path, text))
    assert d.verdicts() == ["startup_kv_cache_too_small"]
    actions = d.findings[0].next_actions
    assert actions == ["Raise VLLM_CPU_KVCACHE_SPACE to at least 4.38 GiB or lower "
                       "--max-model-len to 9,344; a CPU server's pool is that space, not a share "
                       "of a GPU."]
