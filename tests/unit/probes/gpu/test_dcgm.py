"""dcgm-exporter exposition text -> gpu_samples rows: real pasted outputs, renamed fields,
DCGM's blank sentinels, several GPUs and replicas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.gpu import (
    ExpositionError,
    insert_gpu_samples,
    rows_from_points,
    samples_from_exposition,
)
from probes.gpu.dcgm import blank_reason
from probes.gpu.exposition import parse_exposition
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "gpu"
MIB = 1 << 20


def test_real_dcgm_exporter_2_0_13_scrape() -> None:
    rows = samples_from_exposition((FIX / "dcgm_exporter_2.0.13.prom").read_text(), 5_000_000,
                                   instance="10.0.0.7:9400")
    assert len(rows) == 1
    r = rows[0]
    assert r["source"] == "dcgm" and r["instance"] == "10.0.0.7:9400" and r["t_ns"] == 5_000_000
    assert r["gpu"] == 0 and r["uuid"] == "GPU-8c16e996-bd76-aa91-17e7-b48bcd0208ba"
    assert r["sm_clock_mhz"] == 885 and r["mem_clock_mhz"] == 2999
    assert r["temperature_c"] == 41 and r["power_w"] == pytest.approx(23.528)
    assert r["mem_used_bytes"] == 1057 * MIB and r["mem_total_bytes"] == (1057 + 7064) * MIB
    assert r["xid"] == 0 and r["ecc_corrected"] == 0 and r["ecc_uncorrected"] == 0
    assert r["pcie_replays"] == 0 and r["util_gpu_pct"] == 0
    # not exported by that version's default counters: NULL, not 0
    assert r["sm_clock_max_mhz"] is None and r["clock_event_reasons"] is None
    assert r["clock_event_names"] is None and r["pcie_gen"] is None and r["unavailable"] is None


def test_k8s_blog_sample_with_not_supported_sentinel() -> None:
    samples = parse_exposition((FIX / "k8s_blog_dcgm_exporter.prom").read_text())
    assert [s.name for s in samples] == ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
                                         "DCGM_FI_DEV_MEMORY_TEMP"]
    assert samples[0].labels["pod"] == "baz"
    assert blank_reason(samples[2].raw) == "DCGM_NOT_SUPPORTED"
    assert blank_reason(samples[0].raw) is None
    rows = samples_from_exposition((FIX / "k8s_blog_dcgm_exporter.prom").read_text(), 0, instance="n1")
    assert rows[0]["sm_clock_mhz"] == 139 and rows[0]["mem_clock_mhz"] == 405


@pytest.mark.parametrize("raw,reason", [
    ("9223372036854775792", "DCGM_BLANK"), ("9223372036854775793", "DCGM_NOT_FOUND"),
    ("9223372036854775795", "DCGM_NOT_PERMISSIONED"), ("2147483634", "DCGM_NOT_SUPPORTED"),
    ("140737488355330", "DCGM_NOT_SUPPORTED"), ("140737488355329.000000", "DCGM_NOT_FOUND"),
    ("NaN", "NaN"), ("1410", None), ("2147483631", None), ("0", None)])
def test_blank_sentinels(raw: str, reason: str | None) -> None:
    assert blank_reason(raw) == reason


def _text(name_reasons: str = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", mask: int = 0x24,
          power: str = "412.5", gpus: int = 2) -> str:
    lines = []
    for g in range(gpus):
        lab = (f'gpu="{g}",UUID="GPU-{g:04d}",pci_bus_id="00000000:{g + 10:02X}:00.0",'
               f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-{g}"')
        lines += [
            f"DCGM_FI_DEV_SM_CLOCK{{{lab}}} {1980 - 600 * g}",
            f"DCGM_FI_DEV_MAX_SM_CLOCK{{{lab}}} 1980",
            f"DCGM_FI_DEV_MEM_CLOCK{{{lab}}} 2619",
            f"DCGM_FI_DEV_MAX_MEM_CLOCK{{{lab}}} 2619",
            f"{name_reasons}{{{lab}}} {mask if g else 0}",
            f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} {power}",
            f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{lab}}} 700",
            f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} {60 + 25 * g}",
            f"DCGM_FI_DEV_GPU_UTIL{{{lab}}} 97",
            f"DCGM_FI_DEV_MEM_COPY_UTIL{{{lab}}} 41",
            f"DCGM_FI_PROF_DRAM_ACTIVE{{{lab}}} 0.625",
            f"DCGM_FI_DEV_FB_USED{{{lab}}} 70000",
            f"DCGM_FI_DEV_FB_FREE{{{lab}}} 10559",
            f"DCGM_FI_DEV_FB_RESERVED{{{lab}}} 520",
            f"DCGM_FI_DEV_PCIE_LINK_GEN{{{lab}}} {5 - 2 * g}",
            f"DCGM_FI_DEV_PCIE_MAX_LINK_GEN{{{lab}}} 5",
            f"DCGM_FI_DEV_PCIE_LINK_WIDTH{{{lab}}} {16 >> g}",
            f"DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH{{{lab}}} 16",
            f"DCGM_FI_DEV_XID_ERRORS{{{lab}}} {79 * g}",
            f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{lab}}} {3 * g}",
            f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{lab}}} {g}",
            f"DCGM_FI_DEV_UNKNOWN_FIELD{{{lab}}} 5",
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("reasons_name", ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                                          "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"])
def test_current_and_renamed_reason_field(reasons_name: str) -> None:
    rows = samples_from_exposition(_text(reasons_name, mask=0x24), 7, instance="r1", source="engine")
    assert [r["gpu"] for r in rows] == [0, 1]
    healthy, slow = rows
    assert healthy["clock_event_reasons"] == 0 and healthy["clock_event_names"] == ""
    assert slow["clock_event_reasons"] == 0x24
    assert slow["clock_event_names"] == "sw_power_cap,sw_thermal_slowdown"
    assert slow["sm_clock_mhz"] == 1380 and slow["sm_clock_max_mhz"] == 1980
    assert slow["pcie_gen"] == 3 and slow["pcie_gen_max"] == 5
    assert slow["pcie_width"] == 8 and slow["pcie_width_max"] == 16
    assert slow["xid"] == 79 and slow["ecc_corrected"] == 3 and slow["ecc_uncorrected"] == 1
    assert slow["power_limit_w"] == 700 and slow["dram_active"] == 0.625
    assert slow["mem_total_bytes"] == (70000 + 10559 + 520) * MIB
    assert slow["hostname"] == "node-1" and slow["model_name"] == "NVIDIA H100 80GB HBM3"
    assert slow["source"] == "engine"


def test_both_reason_names_prefer_the_current_one() -> None:
    text = _text("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", mask=0x40, gpus=2)
    text += 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",UUID="GPU-0001",Hostname="node-1"} 4\n'
    slow = samples_from_exposition(text, 0, instance="r")[1]
    assert slow["clock_event_names"] == "hw_thermal_slowdown"


def test_sentinel_on_a_mapped_field_is_null_with_reason() -> None:
    text = _text(power="140737488355330", gpus=1)
    (row,) = samples_from_exposition(text, 0, instance="r")
    assert row["power_w"] is None
    assert json.loads(row["unavailable"]) == {"power_w": "DCGM_NOT_SUPPORTED"}


def test_points_from_a_range_query_group_by_instance_gpu_and_time() -> None:
    pts = []
    for inst, clock in (("a:9400", 1980.0), ("b:9400", 1200.0)):
        for t in (0, 1_000_000_000, 2_000_000_000):
            lab = {"gpu": "0", "UUID": f"GPU-{inst}", "instance": inst, "Hostname": "h"}
            pts.append((t, "DCGM_FI_DEV_SM_CLOCK", lab, str(clock)))
            pts.append((t, "DCGM_FI_DEV_GPU_TEMP", lab, "70"))
    rows = rows_from_points(pts)
    assert [(r["instance"], r["t_ns"]) for r in rows] == [
        ("a:9400", 0), ("a:9400", 1_000_000_000), ("a:9400", 2_000_000_000),
        ("b:9400", 0), ("b:9400", 1_000_000_000), ("b:9400", 2_000_000_000)]
    assert {r["sm_clock_mhz"] for r in rows if r["instance"] == "b:9400"} == {1200.0}
    # an explicit instance wins over the label
    assert {r["instance"] for r in rows_from_points(pts, instance="fleet-1")} == {"fleet-1"}


def test_old_lowercase_names() -> None:
    text = ('dcgm_sm_clock{gpu="0",uuid="x"} 1500\ndcgm_gpu_temp{gpu="0"} 55\n'
            'dcgm_fb_used{gpu="0"} 10\ndcgm_fb_free{gpu="0"} 30\n')
    (row,) = samples_from_exposition(text, 0, instance="old")
    assert row["sm_clock_mhz"] == 1500 and row["temperature_c"] == 55
    assert row["mem_total_bytes"] == 40 * MIB


@pytest.mark.parametrize("text", ['DCGM_FI_DEV_GPU_TEMP{gpu="0" 5', "DCGM_FI_DEV_GPU_TEMP{gpu=0} 5",
                                  'DCGM_FI_DEV_GPU_TEMP{gpu="0"}', "{} 5",
                                  'DCGM_FI_DEV_GPU_TEMP{gpu="0"} five'])
def test_bad_exposition_raises(text: str) -> None:
    with pytest.raises(ExpositionError):
        samples_from_exposition(text, 0, instance="x")


def test_escaped_label_values() -> None:
    (s,) = parse_exposition('m{a="x\\"y,}z",b="c\\\\d\\n"} +Inf 1700000000000\n')
    assert s.labels == {"a": 'x"y,}z', "b": "c\\d\n"}
    assert s.value == float("inf")


def test_rows_round_trip_through_the_store(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    rows = samples_from_exposition(_text(mask=0x8), 123, instance="r1")
    assert insert_gpu_samples(con, "run-1", rows) == 2
    got = con.execute("SELECT gpu, clock_event_reasons, clock_event_names, mem_used_bytes, t_ns "
                      "FROM gpu_samples WHERE run_id = 'run-1' ORDER BY gpu").fetchall()
    assert got == [(0, 0, "", 70000 * MIB, 123), (1, 8, "hw_slowdown", 70000 * MIB, 123)]
    with pytest.raises(ValueError, match="no such column"):
        insert_gpu_samples(con, "run-1", [{"source": "nvml", "t_ns": 0, "sm_clock": 1}])
    with pytest.raises(ValueError, match="source"):
        insert_gpu_samples(con, "run-1", [{"source": "smi", "t_ns": 0}])
