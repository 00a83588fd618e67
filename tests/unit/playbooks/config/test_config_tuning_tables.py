"""The config playbook on a captured log's kernel tuning tables: the device that ran an
untuned default where some device has the table is a warning; a shape no device has is
information; tables found are nothing to report."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from infbench.config.capture import capture_text
from infbench.config.store import save_config
from infbench.store import create_run
from playbooks.config import diagnose_config
from tests.support.stores import new_store

ROOT = Path(__file__).resolve().parents[3] / "fixtures"
TUNING = ROOT / "tuning_logs"


def linked(tmp_path: Path, base: str, tuning: str) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp_path / "c.duckdb")
    create_run(con, run_id="r", config={"workload": {"workload": "synthetic"},
                                        "arrivals": {"kind": "closed", "concurrency": 4}},
               target_url="http://127.0.0.1:1", model="m", endpoint="completions", t0_monotonic_ns=0)
    text = (ROOT / "config_logs" / base).read_text() + (TUNING / tuning).read_text()
    save_config(con, capture_text(text, base), run_id="r")
    return con


@pytest.mark.parametrize(("base", "tuning", "expected"), [
    ("vllm_0.11.1rc6_v1.log", "vllm_0.11_mi325x_two_line_moe_default.log",
     [("tuning_table_missing", "warning", "AMD_Instinct_MI325X")]),
    ("vllm_0.10.2_v1.log", "vllm_0.8.3_h200_scout_moe_default.log",
     [("tuning_table_missing", "warning", "NVIDIA_H200")]),
    ("vllm_0.10.2_v1.log", "vllm_0.8.4_rtx3090_multirank_moe_default.log",
     [("tuning_table_missing", "info", "NVIDIA_GeForce_RTX_3090")]),
    ("sglang_2026-02.log", "sglang_h200_triton_fallback.log",
     [("tuning_table_missing", "info", "NVIDIA_H200"),
      ("tuning_table_other_triton", "info", "NVIDIA_H200")]),
    ("vllm_0.10.2_v1.log", "vllm_0.4.1_h100_moe_found.log", []),
])
def test_captured_tables_are_judged(tmp_path: Path, base: str, tuning: str, expected: list) -> None:
    con = linked(tmp_path, base, tuning)
    d = diagnose_config(con, "r")
    got = sorted((f.verdict, f.severity, f.evidence[0].values["device_name"]) for f in d.findings
                 if f.verdict.startswith("tuning_table"))
    assert got == sorted(expected)
    for f in d.findings:
        assert con.execute(f.evidence[0].sql).fetchall()  # the configuration's SQL reruns


def test_the_h200_finding_names_the_devices_that_have_the_table(tmp_path: Path) -> None:
    con = linked(tmp_path, "vllm_0.10.2_v1.log", "vllm_0.8.3_h200_scout_moe_default.log")
    [f] = [f for f in diagnose_config(con, "r").findings if f.verdict == "tuning_table_missing"]
    assert "ships the same table for AMD_Instinct_MI300X, NVIDIA_B200, NVIDIA_H100" in f.summary
    assert "first at" not in f.summary  # a capture keeps names, not line numbers
    assert f.evidence[0].values["engine"] == "vllm"
