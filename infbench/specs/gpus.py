"""GPU catalog: datasheet figures, each with the document it came from.

The figures are exactly what the vendor publishes (dense tensor-core peaks, not the
"with sparsity" figures). What a real kernel reaches is a separate, documented default
(`DEFAULT_BANDWIDTH_FRACTION`, `DEFAULT_FLOPS_FRACTION`) applied by the calculators, so a
reader can always tell a datasheet number from an assumption.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from infbench.specs.errors import SpecError
from infbench.specs.names import ALIAS, EXACT, Resolved

GIB = 1 << 30

DEFAULT_BANDWIDTH_FRACTION = 0.8
"""Share of datasheet HBM bandwidth a decode step achieves.

Streaming-copy benchmarks on H100/A100 reach ~90% of the datasheet figure; decode in a
tuned engine (vLLM, TensorRT-LLM) adds small kernels, launch gaps and imperfect overlap,
and published memory-bandwidth-utilisation (MBU) measurements for batched decode sit around
70-85%. 0.8 is the middle of that range."""

DEFAULT_FLOPS_FRACTION = 0.6
"""Share of the dense tensor-core peak a prefill step achieves.

Large BF16 GEMMs reach ~70-80% of peak on H100 (clock throttling under sustained tensor
load is part of the gap); a whole forward pass adds attention, norms and all-reduces at
lower efficiency, and reported prefill MFU is typically 40-65%. 0.6 sits in that range."""

DEFAULT_KERNEL_FLOOR_S = 2e-6
"""Device time a decode kernel costs beyond the bytes it streams, even replayed from a CUDA
graph: the dependent-launch gap between consecutive kernels plus the ramp-up and partial
last wave in which a memory-bound kernel does not stream at full bandwidth. NVIDIA's CUDA
Graphs post (https://developer.nvidia.com/blog/cuda-graphs/) measures 3.4 us per graph-
replayed kernel whose own work takes 2.9 us, i.e. ~0.5 us of launch gap alone; the tail of a
GEMV over a layer's weights adds a few more. 2 us is what the reference engine charges per
kernel (12 per layer, see reference_engine/sim_executor.py); docs/sim_calibration.md shows
what that buys against published measurements and where it is still short."""

KERNELS_PER_LAYER = 12
"""Kernels one decoder layer launches in a decode step (norms, QKV, rope, attention, output
projection, residual adds, MLP): what the per-kernel floor and eager launches are counted on.
A layer at TP > 1 adds its two all-reduces."""


EXPOSED_OVERLAP = 0.5
"""Share of the shorter of a step's weight stream and its math that the longer does not hide.

The roofline takes a step to last max(bytes over bandwidth, FLOPs over peak). Measured decode
steps at short contexts grow with the batch faster than that: Qwen2.5-7B under vLLM, TPOT at
concurrency 64 against 1, x1.23 on an A100-40GB and x1.30 on an L4 (128-token outputs after
~45-token prompts, so the KV the roofline adds per sequence is ~3% of the weights), where
max(bytes, FLOPs) grows 2-3%. GEMMs pipeline their tiles' loads and math imperfectly (a tile
waits for its operands, then computes while the next loads). Half the shorter side exposed,
fitted once for every GPU and model in reference_engine/calibration/published_sweeps.toml,
puts both sweeps within 11% and moves the 70B rows closer (docs/sim_calibration.md)."""


def exposed_overlap_s(memory_s: float, compute_s: float) -> float:
    """What a step pays beyond max(memory, compute): the exposed share of the shorter."""
    return EXPOSED_OVERLAP * min(memory_s, compute_s)


def decode_kernel_floor_s(num_layers: int, tp: int = 1, clock_ratio: float = 1.0) -> float:
    """The per-step device time the roofline's bytes and FLOPs do not see: every kernel's
    floor (`DEFAULT_KERNEL_FLOOR_S`), stretched when the SM clock runs below its maximum."""
    kernels = KERNELS_PER_LAYER + (2 if tp > 1 else 0)
    return num_layers * kernels * DEFAULT_KERNEL_FLOOR_S / clock_ratio


DEFAULT_INTERCONNECT_FRACTION = 0.75
"""Share of the per-direction link bandwidth an all-reduce reaches (nccl-tests bus
bandwidth on NVLink systems is typically 70-80% of the link figure)."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    vendor: str
    memory_bytes: int  # capacity as published; HBM "80 GB" is 80 GiB of physical memory
    memory_bandwidth: float  # bytes/s (decimal TB/s as published)
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None  # dense FLOP/s; None where the chip has no FP8 tensor cores
    interconnect: str  # e.g. "NVLink 4"; "PCIe Gen4 x16" where there is no GPU-GPU link
    interconnect_bandwidth: float  # bytes/s, total bidirectional as published
    pcie_gen: int
    sm_count: int  # streaming multiprocessors (compute units on AMD)
    source: str  # the datasheet every figure comes from unless `field_sources` says otherwise
    field_sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    aliases: tuple[str, ...] = field(default=(), compare=False)
    # Figures the roofline does not use but a comparison of two devices lists: None where the
    # vendor's documents give none (never an estimate).
    l2_bytes: int | None = None  # on-chip L2 as the architecture whitepaper tables it
    power_w: float | None = None  # the datasheet's maximum TDP / board power

    @property
    def interconnect_bandwidth_per_direction(self) -> float:
        return self.interconnect_bandwidth / 2

    def peak_flops(self, compute: str) -> float:
        """Dense peak for a format's compute type; FP8 falls back to BF16 where absent."""
        if compute == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.bf16_flops

    def source_of(self, field_name: str) -> str:
        return dict(self.field_sources).get(field_name, self.source)


_H100_DATASHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet, "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
_HOPPER_WHITEPAPER = (
    "NVIDIA H100 Tensor Core GPU Architecture whitepaper, "
    "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
)
_A100_DATASHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/"
    "Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_AMPERE_WHITEPAPER = (
    "NVIDIA A100 Tensor Core GPU Architecture whitepaper, https://images.nvidia.com/aem-dam/"
    "en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf"
)
_ADA_WHITEPAPER = (
    "NVIDIA Ada GPU Architecture whitepaper, https://images.nvidia.com/aem-dam/Solutions/"
    "geforce/ada/nvidia-ada-gpu-architecture.pdf"
)

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        name="H100-SXM",
        vendor="NVIDIA",
        memory_bytes=80 * GIB,
        memory_bandwidth=3.35e12,
        bf16_flops=989.4e12,
        fp8_flops=1978.9e12,
        interconnect="NVLink 4",
        interconnect_bandwidth=900e9,
        pcie_gen=5,
        sm_count=132,
        source=_H100_DATASHEET + " (H100 SXM column)",
        field_sources=(
            ("sm_count", _HOPPER_WHITEPAPER + " (H100 SXM5: 132 SMs)"),
            ("l2_bytes", _HOPPER_WHITEPAPER + " (L2 cache size 51200 KB, H100 SXM5)"),
            ("power_w", _H100_DATASHEET + " (H100 SXM: max TDP up to 700 W, configurable)"),
        ),
        aliases=("h100", "h100-sxm5", "h100-80gb", "h100-sxm-80gb", "h100-80gb-hbm3"),
        l2_bytes=51200 * 1024,
        power_w=700.0,
    ),
    GpuSpec(
        name="H100-PCIe",
        vendor="NVIDIA",
        memory_bytes=80 * GIB,
        memory_bandwidth=2.0e12,
        bf16_flops=756e12,
        fp8_flops=1513e12,
        interconnect="NVLink bridge",
        interconnect_bandwidth=600e9,
        pcie_gen=5,
        sm_count=114,
        source=_H100_DATASHEET + " (H100 PCIe column)",
        field_sources=(
            ("sm_count", _HOPPER_WHITEPAPER + " (H100 PCIe: 114 SMs)"),
            ("l2_bytes", _HOPPER_WHITEPAPER + " (L2 cache size 51200 KB, H100 PCIe)"),
            ("power_w", _H100_DATASHEET
             + " (H100 PCIe: max TDP 300-350 W, configurable; the upper figure)"),
        ),
        aliases=("h100-pcie-80gb",),
        l2_bytes=51200 * 1024,
        power_w=350.0,
    ),
    GpuSpec(
        name="H200-SXM",
        vendor="NVIDIA",
        memory_bytes=141 * GIB,
        memory_bandwidth=4.8e12,
        bf16_flops=989.4e12,
        fp8_flops=1978.9e12,
        interconnect="NVLink 4",
        interconnect_bandwidth=900e9,
        pcie_gen=5,
        sm_count=132,
        source="NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/"
        " (H200 SXM column)",
        field_sources=(
            ("sm_count", _HOPPER_WHITEPAPER + " (same GH100 SXM5 die: 132 SMs)"),
            ("l2_bytes", _HOPPER_WHITEPAPER + " (same GH100 SXM5 die: L2 cache size 51200 KB)"),
        ),
        aliases=("h200", "h200-141gb"),
        l2_bytes=51200 * 1024,
        power_w=700.0,
    ),
    GpuSpec(
        name="A100-80GB-SXM",
        vendor="NVIDIA",
        memory_bytes=80 * GIB,
        memory_bandwidth=2.039e12,
        bf16_flops=312e12,
        fp8_flops=None,
        interconnect="NVLink 3",
        interconnect_bandwidth=600e9,
        pcie_gen=4,
        sm_count=108,
        source=_A100_DATASHEET + " (A100 80GB SXM column)",
        field_sources=(
            ("sm_count", _AMPERE_WHITEPAPER + " (A100: 108 SMs)"),
            ("l2_bytes", _AMPERE_WHITEPAPER + " (A100: 40 MB L2, 40960 KB)"),
        ),
        aliases=("a100", "a100-80gb", "a100-sxm4-80gb", "a100-80g"),
        l2_bytes=40960 * 1024,
        power_w=400.0,
    ),
    GpuSpec(
        name="A100-40GB",
        vendor="NVIDIA",
        memory_bytes=40 * GIB,
        memory_bandwidth=1.555e12,
        bf16_flops=312e12,
        fp8_flops=None,
        interconnect="NVLink 3",
        interconnect_bandwidth=600e9,
        pcie_gen=4,
        sm_count=108,
        source=_A100_DATASHEET + " (A100 40GB column)",
        field_sources=(
            ("sm_count", _AMPERE_WHITEPAPER + " (A100: 108 SMs)"),
            ("l2_bytes", _AMPERE_WHITEPAPER + " (A100: 40 MB L2, 40960 KB)"),
        ),
        aliases=("a100-40gb-sxm", "a100-sxm4-40gb", "a100-40g"),
        l2_bytes=40960 * 1024,
        power_w=400.0,
    ),
    GpuSpec(
        name="L40S",
        vendor="NVIDIA",
        memory_bytes=48 * GIB,
        memory_bandwidth=864e9,
        bf16_flops=362.05e12,
        fp8_flops=733e12,
        interconnect="PCIe Gen4 x16",
        interconnect_bandwidth=64e9,
        pcie_gen=4,
        sm_count=142,
        source="NVIDIA L40S GPU datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
        field_sources=(("sm_count", _ADA_WHITEPAPER + " (L40S: 142 SMs)"),),
        aliases=("l40s-48gb",),
        power_w=350.0,
    ),
    GpuSpec(
        name="L4",
        vendor="NVIDIA",
        memory_bytes=24 * GIB,
        memory_bandwidth=300e9,
        bf16_flops=121e12,
        fp8_flops=242.5e12,
        interconnect="PCIe Gen4 x16",
        interconnect_bandwidth=64e9,
        pcie_gen=4,
        sm_count=58,
        source="NVIDIA L4 Tensor Core GPU datasheet, "
        "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet",
        field_sources=(("sm_count", _ADA_WHITEPAPER + " (AD104 as configured for L4: 58 SMs)"),),
        aliases=("l4-24gb",),
        power_w=72.0,
    ),
    GpuSpec(
        name="B200",
        vendor="NVIDIA",
        memory_bytes=180 * GIB,
        memory_bandwidth=8e12,
        bf16_flops=2.25e15,
        fp8_flops=4.5e15,
        interconnect="NVLink 5",
        interconnect_bandwidth=1.8e12,
        pcie_gen=5,
        sm_count=148,
        source="NVIDIA HGX B200 platform specifications (per GPU = 8-GPU figure / 8), "
        "https://www.nvidia.com/en-us/data-center/hgx/",
        field_sources=(
            (
                "sm_count",
                "CUDA device properties of B200 (multiProcessorCount = 148), as listed in "
                "NVIDIA Blackwell tuning guide, https://docs.nvidia.com/cuda/blackwell-tuning-guide/",
            ),
        ),
        aliases=("b200-sxm", "b200-180gb", "hgx-b200"),
    ),
    GpuSpec(
        name="MI300X",
        vendor="AMD",
        memory_bytes=192 * GIB,
        memory_bandwidth=5.3e12,
        bf16_flops=1307.4e12,
        fp8_flops=2614.9e12,
        interconnect="Infinity Fabric (7 links x 128 GB/s)",
        interconnect_bandwidth=896e9,
        pcie_gen=5,
        sm_count=304,
        source="AMD Instinct MI300X data sheet, https://www.amd.com/content/dam/amd/en/documents/"
        "instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
        aliases=("amd-mi300x", "instinct-mi300x", "mi300x-192gb"),
        power_w=750.0,
    ),
)


# Aliases that leave a choice to the catalog (SXM or PCIe, 40 or 80 GB), and which it made.
ALIAS_NOTES: dict[str, str] = {
    "h100": "the SXM part; the PCIe card is H100-PCIe",
    "h100-80gb": "the SXM part; the PCIe card is H100-PCIe",
    "h200": "the SXM part",
    "a100": "the 80 GB SXM part; the 40 GB one is A100-40GB",
    "a100-80gb": "the SXM part (the PCIe card has less bandwidth)",
    "a100-80g": "the SXM part (the PCIe card has less bandwidth)",
}


def _key(name: str) -> str:
    # "H100 SXM", "h100_sxm" and "H100-SXM" are the same GPU.
    return re.sub(r"[\s_]+", "-", name.strip().lower())


_BY_KEY: dict[str, tuple[GpuSpec, str, str | None]] = {}
for _gpu in GPUS:
    for _name in (_gpu.name, *_gpu.aliases):
        _how = EXACT if _name == _gpu.name else ALIAS
        _entry = (_gpu, _how, ALIAS_NOTES.get(_name))
        _BY_KEY[_key(_name)] = _entry
        _BY_KEY[_key(_name).replace("-", "")] = _entry


def resolve_gpu(name: str) -> tuple[GpuSpec, Resolved]:
    """A GPU by name or alias, case-insensitive, with what the name resolved to and why."""
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"gpu must be a non-empty name, got {name!r}")
    key = _key(name)
    hit = _BY_KEY.get(key) or _BY_KEY.get(key.replace("-", ""))
    if hit is None:
        known = ", ".join(g.name for g in GPUS)
        raise SpecError(f"unknown gpu {name!r}; known: {known}")
    gpu, how, note = hit
    return gpu, Resolved("gpu", name, gpu.name, how, note)


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """A GPU by name or alias, case-insensitive ("h100", "H100 SXM", "h100-sxm5")."""
    if isinstance(name, GpuSpec):
        return name
    return resolve_gpu(name)[0]
