"""Start-up logs users pasted (vLLM 0.6.4 to 0.27, V0 and V1; SGLang), and the reference
engine's own: phases, figures, ranks, and how each ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.startup_log import StartupLogError, parse_startup_log, representative

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "startup_logs"
GIB = 1 << 30


def parse(name: str):  # noqa: ANN201
    return parse_startup_log((FIXTURES / name).read_text(encoding="utf-8"), name)


def test_every_fixture_has_a_source() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for f in FIXTURES.glob("*.log"):
        assert f.name.startswith("reference_") or f"`{f.name}`" in sources, f.name


@pytest.mark.parametrize(("name", "engine", "fmt", "outcome", "kind", "phase"), [
    ("vllm_0.6.4_v0_kv_too_small.log", "vllm", "vllm_v0", "failed", "kv_cache_too_small", "kv_cache"),
    ("vllm_0.6.4_v0_started.log", "vllm", "vllm_v0", "started", None, None),
    ("vllm_0.6.5_v0_results_table.log", "vllm", "vllm_v0", "started", None, None),
    ("vllm_0.6.5_v0_results_table_truncated.log", "vllm", "vllm_v0", "incomplete", None, None),
    ("vllm_0.6.5_v0_started.log", "vllm", "vllm_v0", "started", None, None),
    ("vllm_0.8.4_v0_multirank.log", "vllm", "vllm_v0", "started", None, None),
    ("vllm_0.8.2_v0_ray_profile.log", "vllm", "vllm_v0", "started", None, None),
    ("vllm_0.7.1_v1_started.log", "vllm", "vllm_v1", "started", None, None),
    ("vllm_0.8.5_v1_started.log", "vllm", "vllm_v1", "started", None, None),
    ("vllm_0.11_v1_tp2_started.log", "vllm", "vllm_v1", "started", None, None),
    ("vllm_0.27_v1_tp2_graph_estimate.log", "vllm", "vllm_v1", "started", None, None),
    ("vllm_0.8.3_v1_kv_cache_error.log", "vllm", "vllm_v1", "failed", "kv_cache_too_small", "kv_cache"),
    ("vllm_0.15_v1_kv_cache_error.log", "vllm", "vllm_v1", "failed", "kv_cache_too_small", "kv_cache"),
    ("vllm_0.9_v1_cuda_graph_oom.log", "vllm", "vllm_v1", "failed", "cuda_graph_oom", "cuda_graphs"),
    ("sglang_tp8_started.log", "sglang", "sglang", "started", None, None),
    ("sglang_single_started.log", "sglang", "sglang", "started", None, None),
    ("sglang_dp8_profiled_negative.log", "sglang", "sglang", "failed", "not_enough_memory", "kv_cache"),
    ("sglang_not_enough_memory.log", "sglang", "sglang", "failed", "not_enough_memory", "kv_cache"),
    ("reference_8b_h100_started.log", "reference", "vllm_v1", "started", None, None),
    ("reference_qwen3b_a100_eager_started.log", "reference", "vllm_v1", "started", None, None),
    ("reference_70b_2xh100_128k_failed.log", "reference", "vllm_v1", "failed", "kv_cache_too_small",
     "kv_cache"),
])
def test_outcome_of_each_log(name: str, engine: str, fmt: str, outcome: str, kind: str | None,
                             phase: str | None) -> None:
    log = parse(name)
    assert (log.engine, log.log_format, log.outcome, log.failure_kind, log.failure_phase) == (
        engine, fmt, outcome, kind, phase)


def test_v0_terms_line_and_budget() -> None:
    f = representative(parse("vllm_0.6.5_v0_started.log"))
    assert f["total_gpu_bytes"] == pytest.approx(15.77 * GIB)
    assert f["gpu_memory_utilization"] == 0.90
    assert f["budget_bytes"] == pytest.approx(14.20 * GIB)
    assert f["weights_bytes"] == pytest.approx(7.51 * GIB)
    assert f["activation_peak_bytes"] == pytest.approx(2.53 * GIB)
    assert f["available_kv_bytes"] == pytest.approx(3.76 * GIB)
    assert (f["num_gpu_blocks"], f["max_concurrency_tokens"], f["max_concurrency"]) == (3852, 40000, 1.54)


def test_v0_results_table_and_the_cut_copy() -> None:
    whole = representative(parse("vllm_0.6.5_v0_results_table.log"))
    assert whole["available_kv_bytes"] == pytest.approx(53.29 * GIB)
    assert whole["non_torch_bytes"] == pytest.approx(1.79 * GIB)
    cut = parse("vllm_0.6.5_v0_results_table_truncated.log")
    assert cut.outcome == "incomplete" and "available_kv_bytes" not in representative(cut)
    assert any("ends in the profile phase" in n for n in cut.notes)


def test_v1_sizes_and_tokens() -> None:
    f = representative(parse("vllm_0.8.5_v1_started.log"))
    assert f["weights_bytes"] == pytest.approx(14.9889 * GIB)
    assert f["load_seconds"] == pytest.approx(3.652170)
    assert (f["kv_tokens"], f["max_concurrency_tokens"], f["max_concurrency"]) == (158656, 32768, 4.84)
    early = representative(parse("vllm_0.7.1_v1_started.log"))
    assert early["weights_bytes"] == pytest.approx(67.7229 * GIB) and early["num_gpu_blocks"] == 1381


def test_kv_cache_error_with_and_without_the_estimate() -> None:
    new = representative(parse("vllm_0.15_v1_kv_cache_error.log"))
    assert (new["max_model_len"], new["estimated_max_model_len"]) == (262144, 34736)
    assert new["needed_kv_bytes"] == pytest.approx(24.0 * GIB)
    assert new["available_kv_bytes"] == pytest.approx(3.18 * GIB)
    old = representative(parse("vllm_0.8.3_v1_kv_cache_error.log"))
    assert old["max_model_len"] == 1048576 and "estimated_max_model_len" not in old
    v0 = representative(parse("vllm_0.6.4_v0_kv_too_small.log"))
    assert (v0["max_model_len"], v0["kv_tokens"]) == (29000, 23648)


def test_interleaved_ranks_are_kept_apart() -> None:
    log = parse("vllm_0.8.4_v0_multirank.log")
    assert {"pid=507", "pid=521", "pid=577", "pid=493"} <= set(log.ranks)
    per_rank = {e.rank for e in log.events if e.key == "available_kv_bytes"}
    assert per_rank == {"pid=507", "pid=521", "pid=577"}  # pid=493's lines are cut short
    sg = parse("sglang_tp8_started.log")
    assert {"TP0", "TP1", "TP3", "TP5", "TP6", "TP7"} <= set(sg.ranks)
    assert representative(sg)["kv_tokens"] == 2795207
    assert representative(sg)["available_kv_bytes"] == pytest.approx(2 * 53.31 * GIB)
    v1 = parse("vllm_0.11_v1_tp2_started.log")
    assert {e.rank for e in v1.events if e.key == "available_kv_bytes"} == {"TP0"}
    assert {e.rank for e in v1.events if e.key == "kv_tokens"} == {"engine"}


def test_ranks_that_disagree_are_noted_and_the_worst_speaks() -> None:
    text = ("(VllmWorker rank=0 pid=11) INFO 06-05 06:18:13 [gpu_worker.py:349] Available KV cache "
            "memory: 9.50 GiB\n"
            "(VllmWorker rank=1 pid=12) INFO 06-05 06:18:13 [gpu_worker.py:349] Available KV cache "
            "memory: 4.25 GiB\n")
    log = parse_startup_log(text)
    assert log.ranks == ["rank=0", "rank=1"]
    assert representative(log)["available_kv_bytes"] == pytest.approx(4.25 * GIB)
    assert any("ranks disagree on available_kv_bytes" in n for n in log.notes)


def test_oom_placed_by_its_traceback_and_by_the_phase_before_it() -> None:
    graph = parse("vllm_0.9_v1_cuda_graph_oom.log")
    assert graph.failure_rank == "rank=3" and graph.ranks == ["rank=3"]
    weights = ("INFO 04-24 16:32:59 [loader.py:458] Loading weights took 2.95 seconds\n"
               "ERROR 04-24 16:33:00 [core.py:390]   File \"/x/vllm/model_executor/model_loader/"
               "loader.py\", line 1, in load_model\n"
               "ERROR 04-24 16:33:00 [core.py:390] torch.OutOfMemoryError: CUDA out of memory. "
               "Tried to allocate 1.96 GiB.\n")
    log = parse_startup_log(weights)
    assert (log.failure_kind, log.failure_phase) == ("oom", "weights")
    after_kv = ("INFO 11-06 10:51:48 [gpu_worker.py:349] Available KV cache memory: 2.30 GiB\n"
                "ERROR 11-06 10:51:49 [core.py:708] torch.OutOfMemoryError: CUDA out of memory.\n")
    log = parse_startup_log(after_kv)
    assert (log.failure_kind, log.failure_phase) == ("oom", "kv_cache")


def test_sglang_graph_capture_and_weights() -> None:
    single = representative(parse("sglang_single_started.log"))
    assert single["graph_bytes"] == pytest.approx(1.44 * GIB)
    assert single["graph_batch_sizes"] == 52 and single["kv_tokens"] == 2243474
    neg = parse("sglang_dp8_profiled_negative.log")
    assert representative(neg)["weights_bytes"] == pytest.approx(166.59 * GIB)
    assert len(neg.ranks) == 8 and "DP0 TP0" in neg.ranks


def test_reference_engine_log_reads_its_settings() -> None:
    log = parse("reference_70b_2xh100_128k_failed.log")
    assert log.version == "reference-builtin"
    assert {k: log.settings[k] for k in ("model", "gpu", "tensor_parallel_size", "max_model_len")} == {
        "model": "llama-3.1-70b", "gpu": "h100", "tensor_parallel_size": "2", "max_model_len": "131072"}
    first_seen = list(dict.fromkeys(e.phase for e in log.events))
    assert first_seen == ["weights", "profile", "cuda_graphs", "kv_cache"]


@pytest.mark.parametrize(("text", "message"), [
    ("hello\nworld\n", "no start-up memory lines of vLLM or SGLang found (2 lines read)"),
    ("", "no start-up memory lines"),
])
def test_not_a_startup_log(text: str, message: str) -> None:
    with pytest.raises(StartupLogError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_startup_log(text, "x.log")


def test_a_paste_cut_inside_the_traceback_fails_clearly() -> None:
    with pytest.raises(StartupLogError, match="stops inside an error before any start-up memory line"):
        parse("sglang_scheduler_exception_truncated.log")


def test_ansi_colours_and_container_stamps_are_stripped() -> None:
    text = ("[2025-08-12T08:42:39Z] (EngineCore_0 pid=13564) \x1b[32mINFO\x1b[0m 08-12 01:42:39 "
            "[gpu_model_runner.py:1985] Model loading took 2.8871 GiB and 5.965132 seconds\n")
    log = parse_startup_log(text)
    assert log.ranks == ["engine"] and representative(log)["weights_bytes"] == pytest.approx(2.8871 * GIB)
