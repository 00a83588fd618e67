"""A real vLLM 0.32.0 CPU server captured twice, from its start-up log and from its live
endpoint (tests/fixtures/real_vllm, served again on 127.0.0.1): nothing may rank, and what
only one side shows is listed by side. A server restarted with two flags changed must rank
exactly those two first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.config.capture import capture_source, capture_text
from infbench.config.diff import AT_DEFAULT, MISSING, DiffResult, diff_sides, side_from
from infbench.config.impact import Workload
from infbench.config.render import to_json, to_markdown, to_text
from tests.support.cli import infbench
from tests.unit.config.real_vllm_support import (
    LOG,
    live,
    log_text,
    metrics_with,
    models_with,
    restarted,
)


def diff(a, b) -> DiffResult:  # type: ignore[no-untyped-def]
    return diff_sides(side_from(a), side_from(b), Workload(), ({"label": "A"}, {"label": "B"}))


def real_pair():  # type: ignore[no-untyped-def]
    with live() as url:
        return capture_source(str(LOG)), capture_source(url)


def test_the_log_reports_the_kv_lines_the_live_endpoint_also_reports() -> None:
    log, api = real_pair()
    for key, value in (("kv_cache_tokens", 524288), ("kv_cache_max_concurrency", 128.0)):
        assert log.settings[key].value == api.settings[key].value == value
        assert log.settings[key].origin == "resolved"  # lines after the engine resolved them
    assert log.settings["tensor_parallel_size"].origin == "printed"
    assert "engine" not in api.settings  # the gauge's series label, not a setting
    # No catalog value is stored for what a side did not show.
    assert "block_size" not in log.settings and "cudagraph_mode" not in api.settings


@pytest.mark.parametrize("live_first", [False, True])
def test_the_same_server_log_vs_live_ranks_nothing(live_first: bool) -> None:
    log, api = real_pair()
    a, b = (api, log) if live_first else (log, api)
    r = diff(a, b)
    assert r.differences == [] and r.identity == [] and r.finality == []
    assert r.same == 7  # model, served name, max_model_len, prefix caching, KV dtype/tokens/concurrency
    log_side, live_side = ("b", "a") if live_first else ("a", "b")
    only_log = {g.key: g for g in r.only(log_side)}
    only_live = {g.key: g for g in r.only(live_side)}
    assert not set(only_log) & set(only_live) and len(only_log) > 90 and len(only_live) > 20
    assert {k: only_log[k].value for k in ("tensor_parallel_size", "cudagraph_mode", "enforce_eager",
                                           "compilation_mode", "dtype")} == \
        {"tensor_parallel_size": 1, "cudagraph_mode": "NONE", "enforce_eager": False,
         "compilation_mode": "DYNAMO_TRACE_ONCE", "dtype": "bfloat16"}
    assert {k: only_live[k].value for k in ("block_size", "gpu_memory_utilization", "num_gpu_blocks")} == \
        {"block_size": 128, "gpu_memory_utilization": 0.92, "num_gpu_blocks": 4096}
    # Values are each side's own; the catalog's default for the other side is context only.
    assert only_live["block_size"].context == "catalog default 16 for vllm 0.32.0 (not observed)"
    assert only_log["cudagraph_mode"].context == \
        "catalog default FULL_AND_PIECEWISE for vllm 0.32.0 (not observed)"
    assert all(g.origin in ("printed", "set", "derived") for g in only_log.values())
    assert all(g.origin == "resolved" for g in only_live.values())
    assert not any(k.startswith(("_", "user_specified_")) for k in [*only_log, *only_live])
    assert MISSING not in to_json(r) and AT_DEFAULT not in to_json(r)


def test_cli_capture_and_diff_of_the_same_server(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    r = infbench("config", "capture", str(LOG), "--db", db, "--label", "log")
    assert r.returncode == 0 and "resolved" in r.stdout, r.stderr
    with live() as url:
        assert infbench("config", "capture", url, "--db", db, "--label", "live").returncode == 0
    md = tmp_path / "d.md"
    r = infbench("config", "diff", "log", "live", "--db", db, "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[3].startswith("0 settings differ, 7 agree; shown by only one side: ")
    assert lines[4] == "nothing ranked: every setting both sides show agrees."
    assert not any(x.lstrip().startswith("1. ") for x in lines)
    i_a, i_b = r.stdout.index("  only A (log): "), r.stdout.index("  only B (live): ")
    assert i_a < r.stdout.index("    tensor_parallel_size 1 (printed)") < i_b
    assert i_b < r.stdout.index("    block_size 128 (resolved); other side: catalog default 16")
    text = md.read_text()
    assert "Nothing ranked" in text and "- only B: `gpu_memory_utilization` `0.92` (resolved)" in text
    doc = json.loads(infbench("config", "diff", "log", "live", "--db", db, "--json").stdout)
    assert doc["differences"] == [] and doc["only_a"] and doc["only_b"]
    assert {g["key"] for g in doc["only_b"]} >= {"block_size", "gpu_memory_utilization", "num_gpu_blocks"}


def test_config_show_keeps_a_print_and_its_resolution(tmp_path: Path) -> None:
    # vLLM 0.4.1 printed num_gpu_blocks_override=None, then logged "# GPU blocks: 2358".
    db = str(tmp_path / "s.duckdb")
    fix = Path(__file__).resolve().parents[2] / "fixtures" / "config_logs" / "vllm_0.4.1_v0.log"
    r = infbench("config", "capture", str(fix), "--db", db, "--label", "v0")
    assert "1 printed at start-up, then resolved to another value" in r.stdout, r.stdout
    r = infbench("config", "show", "v0", "--db", db)
    assert "num_gpu_blocks = 2358  (resolved; num_gpu_blocks, line " in r.stdout
    assert "printed null (printed, line 2), resolved later" in r.stdout
    r = infbench("config", "list", "--db", db)
    assert r.returncode == 0 and f"{len(capture_source(str(fix)).settings)} settings" in r.stdout


# Two starts of the real server, the second with two flags changed. Derived from the real
# log by `restarted`: the flags added to the `non-default args` dict as vLLM prints them, and
# where the engine config line prints a flag's value, that value changed too. Nothing a
# flag would change in later lines is chosen (KV sizes stay as logged).
RESTARTS = [
    ({"max_num_seqs": 64, "max_num_batched_tokens": 1024}, {}),
    ({"enable_prefix_caching": False, "enforce_eager": True},
     {"enable_prefix_caching=True": "enable_prefix_caching=False", "enforce_eager=False": "enforce_eager=True"}),
    ({"async_scheduling": True, "scheduling_policy": "priority"}, {}),
]


@pytest.mark.parametrize(("args", "engine"), RESTARTS)
def test_a_restart_with_two_flags_ranks_exactly_those_two(args, engine) -> None:  # type: ignore[no-untyped-def]
    base = capture_source(str(LOG))
    other = capture_text(restarted(log_text(), args, engine), "restarted.log")
    for a, b in ((base, other), (other, base)):
        r = diff(a, b)
        assert {d.key for d in r.differences} == set(args), to_text(r)
        assert r.finality == [] and r.identity == []
        for d in r.differences:
            on_other = d.b if b is other else d.a
            assert on_other == args[d.key] and "set explicitly on" in d.why_different
        if not engine:  # the engine line does not print these: the base ran its default
            assert all(AT_DEFAULT in (d.a, d.b) for d in r.differences)
            assert all("does not list it among its non-default args" in d.why_different for d in r.differences)
    assert "2 settings differ" in to_text(diff(base, other))
    assert to_markdown(diff(base, other)).count("\n| ") == 4


def test_log_vs_live_of_a_server_started_differently_still_ranks() -> None:
    # The live server restarted with --no-enable-prefix-caching --max-model-len 2048: its
    # gauge says so, /v1/models says 2048, and the KV pool's concurrency for 2048-token
    # requests doubles (524288 / 2048 = 256). Nothing flags these as the engine's choice.
    with live(metrics_with(enable_prefix_caching="False", kv_cache_max_concurrency="256.0"),
              models_with(2048)) as url:
        api = capture_source(url)
    log = capture_source(str(LOG))
    r = diff(log, api)
    keys = [d.key for d in r.differences]
    assert set(keys[:2]) == {"enable_prefix_caching", "max_model_len"}, to_text(r)
    assert keys[2:] == ["kv_cache_max_concurrency"] and r.finality == []
