"""Kernel tuning-table lines and names read apart, and the shipped-table lists they are judged
against."""

from __future__ import annotations

import pytest

from infbench.specs.gpus import get_gpu
from infbench.specs.tuning import (
    CATALOG_GPU_OF_DEVICE,
    needs_continuation,
    parse_table_file,
    read_tuning_lines,
    shipped,
)


@pytest.mark.parametrize(("name", "kernel", "shape", "device", "dtype", "block", "variant"), [
    ("E=8,N=14336,device_name=NVIDIA_H200.json", "fused_moe", "E=8,N=14336", "NVIDIA_H200",
     None, None, None),
    ("E=16,N=1536,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json",
     "fused_moe", "E=16,N=1536", "NVIDIA_H100_80GB_HBM3", "fp8_w8a8", "128,128", None),
    # SGLang prints the block shape with a space and suffixes the down projection's table
    ("E=256,N=768,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128]_down.json",
     "fused_moe", "E=256,N=768", "NVIDIA_H200_NVL", "fp8_w8a8", "128,128", "down"),
    ("E=128,N=192,device_name=NVIDIA_H200_down.json", "fused_moe", "E=128,N=192", "NVIDIA_H200",
     None, None, "down"),
    ("N=2112,K=7168,device_name=NVIDIA_H20,dtype=fp8_w8a8,block_shape=[128, 128].json",
     "block_fp8_gemm", "N=2112,K=7168", "NVIDIA_H20", "fp8_w8a8", "128,128", None),
    ("E=10,N=512,device_name=Intel(R)_Arc(TM)_Pro_B60_Graphics.json", "fused_moe", "E=10,N=512",
     "Intel(R)_Arc(TM)_Pro_B60_Graphics", None, None, None),
])
def test_table_names_read_apart(name: str, kernel: str, shape: str, device: str,
                                dtype: str | None, block: str | None, variant: str | None) -> None:
    t = parse_table_file(name)
    assert t is not None
    assert (t.kernel, t.shape, t.device_name, t.dtype, t.block_shape, t.variant) == (
        kernel, shape, device, dtype, block, variant)


@pytest.mark.parametrize("name", [
    "E=384,N=128,device_name=,dtype=int4_w4a16.json",     # shipped by SGLang with no device
    "headdim=128,dstate=256,device_name=NVIDIA_H100.json",  # a Mamba table: no E/N or N/K
    "E=8,N=14336,device_name=NVIDIA_H200",                  # no .json
    "config.json",
])
def test_names_that_are_no_kernel_table(name: str) -> None:
    assert parse_table_file(name) is None


def test_the_same_shape_on_two_devices_has_one_key() -> None:
    a = parse_table_file("E=16,N=1024,device_name=NVIDIA_H200.json")
    b = parse_table_file("E=16,N=1024,device_name=NVIDIA_H100.json")
    c = parse_table_file("E=16,N=1024,device_name=NVIDIA_H100,dtype=fp8_w8a8.json")
    assert a and b and c and a.key == b.key != c.key


def test_a_path_list_of_two_folders_names_one_table() -> None:
    # vLLM 0.32 joins the folders it tried with ", " ($VLLM_TUNED_CONFIG_FOLDER first)
    text = ("Using default MoE config. Performance might be sub-optimal! Config file not found "
            "at /tuned/E=8,N=7168,device_name=NVIDIA_H200.json, /usr/lib/python3.12/site-packages"
            "/vllm/model_executor/layers/fused_moe/configs/E=8,N=7168,device_name=NVIDIA_H200.json")
    [t] = read_tuning_lines(text)
    assert (t.outcome, t.engine, t.path) == (
        "missing", "vllm", "/tuned/E=8,N=7168,device_name=NVIDIA_H200.json")


def test_sglang_reusing_the_up_projection_is_a_fallback_not_a_miss() -> None:
    # sglang 0.5.23, fused_moe_triton_config.py get_moe_configs
    text = ("Down MoE config file not found at /x/sglang/srt/layers/moe/moe_runner/triton_utils/"
            "configs/triton_3_5_1/E=64,N=640,device_name=NVIDIA_B200_down.json; reusing the tuned "
            "up-projection config without TMA. Performance might be sub-optimal.")
    [t] = read_tuning_lines(text)
    assert t.outcome == "fallback" and t.table.variant == "down" and t.triton_dir == "triton_3_5_1"
    assert t.fallback_to is not None and "up projection" in t.fallback_to


def test_a_line_that_only_mentions_a_table_is_no_sighting() -> None:
    # a traceback or a listing names the file without saying it was looked up
    assert read_tuning_lines("cp E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json /tuned/") == []
    assert read_tuning_lines("Config file not found at /etc/engine.yaml") == []


def test_a_name_cut_at_the_end_of_a_line_asks_for_the_next() -> None:
    cut = "Config file not found at /c/E=384,N=14336,device_name=NVIDIA_"
    assert needs_continuation(cut)
    assert not needs_continuation(cut + "RTX.json")
    assert not needs_continuation("device_name=NVIDIA_")  # no lookup phrase


@pytest.mark.parametrize(("engine", "version", "count"), [("vllm", "0.32.0", 581),
                                                         ("sglang", "0.5.23", 568)])
def test_shipped_lists_say_their_release_and_source(engine: str, version: str,
                                                     count: int) -> None:
    r = shipped(engine)
    assert r is not None and r.engine == engine and r.version == version
    assert "pypi.org" in r.source and len(r.tables) == count


def test_shipped_devices_for_a_shape_match_the_release() -> None:
    vllm = shipped("vllm")
    assert vllm is not None
    scout = parse_table_file("E=16,N=1024,device_name=NVIDIA_H200.json")
    assert scout is not None
    assert vllm.devices_for(scout) == ["AMD_Instinct_MI300X", "NVIDIA_B200", "NVIDIA_H100",
                                       "NVIDIA_H200"]
    untuned = parse_table_file("E=32,N=6144,device_name=NVIDIA_H100_80GB_HBM3.json")
    assert untuned is not None and vllm.devices_for(untuned) == []
    assert shipped("tensorrt_llm") is None


def test_device_names_map_to_catalog_gpus() -> None:
    for device, gpu in CATALOG_GPU_OF_DEVICE.items():
        assert get_gpu(gpu).name == gpu, device
    t = parse_table_file("E=16,N=1024,device_name=NVIDIA_H200.json")
    assert t is not None and t.catalog_gpu == "H200-SXM"
    nvl = parse_table_file("E=16,N=1024,device_name=NVIDIA_H200_NVL.json")
    assert nvl is not None and nvl.catalog_gpu is None  # not the SXM part: not guessed
