"""GPU catalog and number formats."""

from __future__ import annotations

import pytest

from infbench.specs import GPUS, SpecError, get_format, get_gpu
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION


@pytest.mark.parametrize("alias", ["h100", "H100 SXM", "h100-sxm5", "H100_SXM", "H100-SXM"])
def test_gpu_aliases_are_case_and_separator_insensitive(alias: str) -> None:
    assert get_gpu(alias).name == "H100-SXM"


def test_h100_sxm_datasheet_figures_are_dense() -> None:
    # NVIDIA H100 datasheet: 3.35 TB/s; BF16 1,979 TFLOPS and FP8 3,958 TFLOPS *with
    # sparsity*, i.e. 989.4 / 1,978.9 dense.
    g = get_gpu("h100")
    assert g.memory_bandwidth == 3.35e12
    assert g.bf16_flops == pytest.approx(1979e12 / 2, rel=1e-3)
    assert g.fp8_flops == pytest.approx(3958e12 / 2, rel=1e-3)
    assert g.sm_count == 132 and "whitepaper" in g.source_of("sm_count")


def test_catalog_is_complete_and_every_figure_has_a_source() -> None:
    names = {g.name for g in GPUS}
    assert {
        "H100-SXM",
        "H100-PCIe",
        "H200-SXM",
        "A100-80GB-SXM",
        "A100-40GB",
        "L40S",
        "L4",
        "B200",
        "MI300X",
    } <= names
    for g in GPUS:
        assert g.source and g.memory_bytes > 0 and g.memory_bandwidth > 0 and g.bf16_flops > 0
        assert g.fp8_flops is None or g.fp8_flops > g.bf16_flops
        assert g.pcie_gen in (4, 5, 6) and g.sm_count > 0


def test_a100_has_no_fp8_and_falls_back_to_bf16_peak() -> None:
    a100 = get_gpu("a100")
    assert a100.fp8_flops is None and a100.peak_flops("fp8") == a100.bf16_flops


def test_fractions_are_separate_from_datasheet_numbers() -> None:
    assert 0 < DEFAULT_BANDWIDTH_FRACTION < 1 and 0 < DEFAULT_FLOPS_FRACTION < 1
    assert get_gpu("h200").memory_bandwidth == 4.8e12  # not pre-multiplied


def test_unknown_gpu() -> None:
    with pytest.raises(SpecError, match="unknown gpu 'v100'"):
        get_gpu("v100")


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("bf16", 16),
        ("fp16", 16),
        ("fp8", 8),
        ("int8", 8),
        ("int4", 4 + 20 / 128),  # fp16 scale + 4-bit zero per 128 (GPTQ/AWQ)
        ("int4-g64", 4 + 20 / 64),
        ("awq", 4 + 20 / 128),
        ("mxfp4", 4.25),  # OCP MX spec: E8M0 scale per 32 elements
        ("nvfp4", 4.5),  # NVIDIA: E4M3 scale per 16 elements
    ],
)
def test_format_bits_include_scales(name: str, bits: float) -> None:
    assert get_format(name).bits_per_element == pytest.approx(bits)


def test_int4_group_size_parameter() -> None:
    assert get_format("int4", group_size=32).bytes_per_element == pytest.approx((4 + 20 / 32) / 8)
    with pytest.raises(SpecError, match="group_size"):
        get_format("int4", group_size=0)
    with pytest.raises(SpecError, match="unknown format"):
        get_format("int3")
