"""The hardware walk over gpu_samples in a real store: the replica's telemetry against its
peers', stopping at the first abnormal check in the runbook's order; a condition every
replica shares is nobody's cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from infbench.store.gpu_samples import insert_gpu_samples
from playbooks.replicas.hardware import ORDER, hardware_walk
from tests.support.stores import new_store

RUN = "r1"
HEALTHY = {"sm_clock_mhz": 1980.0, "sm_clock_max_mhz": 1980.0, "mem_clock_mhz": 2619.0,
           "mem_clock_max_mhz": 2619.0, "clock_event_reasons": 0, "clock_event_names": "",
           "power_w": 520.0, "power_limit_w": 700.0, "temperature_c": 58.0, "pcie_gen": 5,
           "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16, "xid": 0,
           "ecc_corrected": 0, "ecc_uncorrected": 0, "pcie_replays": 0}


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def _write(con: duckdb.DuckDBPyConnection, replicas: dict[str, dict[str, Any]], samples: int = 12) -> None:
    rows = []
    for inst, over in replicas.items():
        for i in range(samples):
            row = {**HEALTHY, **over, "source": "engine", "instance": inst, "gpu": 0, "t_ns": i * 10**9}
            for k, v in over.items():
                if callable(v):
                    row[k] = v(i)
            rows.append(row)
    insert_gpu_samples(con, RUN, rows)


def test_thermal_throttle_stops_at_clocks_and_names_the_reason(con) -> None:
    _write(con, {"a": {}, "b": {}, "c": {"sm_clock_mhz": 1410.0, "clock_event_reasons": 0x20,
                                          "clock_event_names": "sw_thermal_slowdown",
                                          "temperature_c": 89.0}})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert [c.name for c in walk.checks] == list(ORDER)
    assert walk.cause is not None and walk.cause.verdict == "gpu_thermal_throttle"
    assert "1,410 of 1,980 MHz" in walk.cause.title
    assert [c.abnormal for c in walk.checks] == [True, True, False, False]  # hot too, listed after
    assert all(c.evidence.sql for c in walk.checks)


def test_power_brake_without_a_clock_drop_in_the_median_is_still_named(con) -> None:
    # The reason is set in a third of the samples; the median clock stays near max.
    _write(con, {"a": {}, "b": {}, "c": {"clock_event_names": lambda i: "sw_power_cap" if i % 3 == 0 else "",
                                          "power_w": 699.0}})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert walk.cause.verdict == "gpu_power_throttle"


def test_pcie_trained_low_is_found_after_healthy_clocks_and_power(con) -> None:
    _write(con, {"a": {}, "b": {}, "c": {"pcie_gen": 3, "pcie_width": 8}})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert [c.abnormal for c in walk.checks] == [False, False, True, False]
    assert walk.cause.verdict == "pcie_link_degraded" and "Gen3 x8" in walk.cause.title


@pytest.mark.parametrize(("over", "verdict"), [
    ({"xid": lambda i: 79 if i >= 5 else 0}, "gpu_xid_error"),
    ({"ecc_uncorrected": lambda i: i // 4}, "gpu_ecc_errors"),
    ({"ecc_corrected": lambda i: 50 * i}, "gpu_ecc_errors")])
def test_errors_are_the_last_check(con, over: dict[str, Any], verdict: str) -> None:
    _write(con, {"a": {}, "b": {}, "c": over})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert walk.cause.name == "errors" and walk.cause.verdict == verdict


def test_a_lowered_power_limit_against_peers_is_a_cap(con) -> None:
    _write(con, {"a": {}, "b": {}, "c": {"power_limit_w": 500.0, "power_w": 495.0}})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert walk.cause.verdict == "gpu_power_capped" and "500 W" in walk.cause.detail


def test_a_fleet_wide_condition_is_nobodys_cause(con) -> None:
    same = {"sm_clock_mhz": 1410.0, "clock_event_names": "sw_power_cap", "power_w": 700.0,
            "pcie_gen": 4}
    _write(con, {"a": same, "b": same, "c": same})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert walk.has_telemetry and walk.cause is None


def test_idle_samples_do_not_count_as_a_clock_drop(con) -> None:
    idle = {"sm_clock_mhz": lambda i: 345.0 if i < 8 else 1980.0,
            "clock_event_names": lambda i: "gpu_idle" if i < 8 else ""}
    _write(con, {"a": {}, "b": {}, "c": idle})
    assert hardware_walk(con, RUN, "c", ["a", "b"]).cause is None


def test_no_samples_for_the_replica(con) -> None:
    _write(con, {"a": {}, "b": {}})
    walk = hardware_walk(con, RUN, "c", ["a", "b"])
    assert not walk.has_telemetry and walk.cause is None and walk.peers_with_telemetry == 2


def test_telemetry_named_by_host_port_is_mapped_to_its_replica(con) -> None:
    """A Prometheus pull names a series by its scrape target (host:port), not the replica."""
    _write(con, {"a": {}, "10.0.0.2:9400": {}, "10.0.0.3:9400": {"pcie_gen": 3, "pcie_width": 8}})
    aliases = {"10.0.0.2:9400": "b", "10.0.0.3:9400": "c"}
    walk = hardware_walk(con, RUN, "c", ["a", "b"], aliases)
    assert walk.has_telemetry and walk.peers_with_telemetry == 2
    assert walk.cause.verdict == "pcie_link_degraded"
    assert not hardware_walk(con, RUN, "c", ["a", "b"]).has_telemetry  # without the map: unknown
    # the evidence's SQL, as shown, reruns on its own and names the replicas
    rows = con.execute(walk.checks[0].evidence.sql.split(";\n")[0]).fetchall()
    assert [r[0] for r in rows] == ["a", "b", "c"]
