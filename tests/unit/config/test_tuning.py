"""A server log's kernel tuning-table lines as settings of its capture: real engine logs
(tests/fixtures/config_logs) with real tuning lines (tests/fixtures/tuning_logs) put in."""

from __future__ import annotations

from pathlib import Path

from infbench.config.capture import capture_text
from infbench.config.tuning import tuning_settings

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
VLLM_ROCM = ROOT / "config_logs" / "vllm_0.11.1rc6_v1.log"
SGLANG = ROOT / "config_logs" / "sglang_2026-02.log"
TUNING = ROOT / "tuning_logs"


def _with(base: Path, tuning: str) -> str:
    return base.read_text() + (TUNING / tuning).read_text()


def test_a_vllm_capture_keeps_the_missing_table_resolved() -> None:
    text = _with(VLLM_ROCM, "vllm_0.11_mi325x_two_line_moe_default.log")
    cap = capture_text(text, "rocm.log")
    s = cap.settings["kernel_tables_missing"]
    assert s.value == ["E=128,N=1024,device_name=AMD_Instinct_MI325X,dtype=fp8_w8a8.json"]
    assert s.origin == "resolved" and s.line == len(VLLM_ROCM.read_text().splitlines()) + 2
    assert "kernel_tables_found" not in cap.settings


def test_sglang_fallback_and_missing_are_two_settings() -> None:
    cap = capture_text(_with(SGLANG, "sglang_h200_triton_fallback.log"), "sg.log")
    assert cap.settings["kernel_tables_other_triton"].value == [
        "E=128,N=192,device_name=NVIDIA_H200.json"]
    assert cap.settings["kernel_tables_missing"].value == [
        "E=128,N=192,device_name=NVIDIA_H200_down.json"]  # three lines, two names: once each


def test_found_and_wrapped_lines() -> None:
    found = (TUNING / "vllm_0.4.1_h100_moe_found.log").read_text().splitlines()
    wrapped = (TUNING / "sglang_wrapped_device_name.log").read_text().splitlines()
    got = {s.key: (s.value, s.line) for s in tuning_settings(found + wrapped)}
    assert got == {
        "kernel_tables_found": (["E=8,N=2048,device_name=NVIDIA_H100_80GB_HBM3.json"], 1),
        "kernel_tables_missing": ([
            "E=384,N=14336,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Max-Q_Workstation_Edition.json"],
            len(found) + 1)}


def test_a_log_without_tuning_lines_has_no_such_settings() -> None:
    cap = capture_text(VLLM_ROCM.read_text(), "rocm.log")
    assert not any(k.startswith("kernel_tables") for k in cap.settings)
