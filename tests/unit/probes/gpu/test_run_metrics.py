"""GPU series a run scraped (metric_samples, tagged with the replica in a fleet run) into
gpu_samples: one row per GPU per scrape, the replica (or the one target's URL) as instance,
source `engine` for a target's own /metrics and `dcgm` for a dcgm-exporter endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import create_run
from infbench.store.writer import insert_batch, to_arrow
from probes.gpu.run_metrics import gpu_samples_from_run, parse_labels
from tests.support.stores import new_store

LABELS = 'gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'


def _metrics(con, run_id: str, rows: list[tuple]) -> None:
    cols = {k: [r[i] for r in rows] for i, k in enumerate(("t_ns", "source", "name", "labels", "value", "replica"))}
    insert_batch(con, run_id, "metric_samples", to_arrow("metric_samples", cols))


def test_fleet_series_become_rows_per_replica_and_source(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="f", config={}, target_url="http://a:8000", model="m", endpoint="completions",
               t0_monotonic_ns=0)
    rows = []
    for t, (clock_a, clock_c) in enumerate(((1980.0, 700.0), (1980.0, 710.0))):
        t_ns = t * 10**9
        rows += [(t_ns, "metrics", "DCGM_FI_DEV_SM_CLOCK", LABELS, clock_a, "a"),
                 (t_ns, "metrics", "DCGM_FI_DEV_MAX_SM_CLOCK", LABELS, 1980.0, "a"),
                 (t_ns, "metrics", "vllm:num_requests_running", 'model_name="m"', 3.0, "a"),
                 (t_ns, "dcgm", "DCGM_FI_DEV_SM_CLOCK", LABELS, clock_c, "c"),
                 (t_ns, "dcgm", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", LABELS, 32.0, "c"),
                 (t_ns, "dcgm", "DCGM_FI_DEV_PCIE_LINK_GEN", LABELS, 3.0, "c")]
    _metrics(con, "f", rows)
    assert gpu_samples_from_run(con, "f") == 4
    got = con.execute("SELECT instance, source, t_ns, sm_clock_mhz, sm_clock_max_mhz, clock_event_names, "
                      "pcie_gen, uuid FROM gpu_samples ORDER BY instance, t_ns").fetchall()
    assert got == [("a", "engine", 0, 1980.0, 1980.0, None, None, "GPU-1"),
                   ("a", "engine", 10**9, 1980.0, 1980.0, None, None, "GPU-1"),
                   ("c", "dcgm", 0, 700.0, None, "sw_thermal_slowdown", 3, "GPU-1"),
                   ("c", "dcgm", 10**9, 710.0, None, "sw_thermal_slowdown", 3, "GPU-1")]
    assert gpu_samples_from_run(con, "f") == 0  # once per run
    con.close()


def test_one_target_uses_its_url_and_a_run_without_gpu_series_adds_nothing(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    for rid in ("one", "none"):
        create_run(con, run_id=rid, config={}, target_url="http://t:8000", model="m",
                   endpoint="completions", t0_monotonic_ns=0)
    _metrics(con, "one", [(0, "metrics", "DCGM_FI_DEV_GPU_TEMP", LABELS, 61.0, None)])
    _metrics(con, "none", [(0, "metrics", "vllm:num_requests_running", 'model_name="m"', 1.0, None)])
    assert gpu_samples_from_run(con, "one") == 1 and gpu_samples_from_run(con, "none") == 0
    assert con.execute("SELECT instance, temperature_c FROM gpu_samples").fetchall() == [("http://t:8000", 61.0)]
    con.close()


def test_labels_as_stored_are_parsed_back() -> None:
    assert parse_labels(r'a="x",b="with \"quote\"",c="back\\slash"') == {
        "a": "x", "b": 'with "quote"', "c": "back\\slash"}
    assert parse_labels("") == {}


@pytest.mark.parametrize("value", ["x\\ny", 'q"t', "l1\nl2", "\\", "a\\\\n", "GPU-0\\n\"1\""])
def test_stored_labels_unescape_as_the_exposition_parser_does(value: str) -> None:
    # An escaped backslash followed by `n` is a backslash and an n: undone in one pass, the
    # way probes/gpu/exposition.py reads the same text (a chain of replaces made it a newline).
    from probes.gpu.exposition import parse_exposition

    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    text = f'gpu="{escaped}",k="v"'
    assert parse_labels(text) == {"gpu": value, "k": "v"}
    assert parse_exposition("m{" + text + "} 1")[0].labels == parse_labels(text)
