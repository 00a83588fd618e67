"""Weight and KV-cache number formats: bytes per element, scales included.

A block-scaled format stores `element_bits` per value plus one scale (and, for GPTQ/AWQ,
one packed zero point) per `group_size` values, so its true cost is
`element_bits + scale_bits / group_size`. Per-tensor and per-channel scales are a few
bytes per matrix and are not charged per element.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infbench.specs.errors import SpecError

DEFAULT_INT4_GROUP_SIZE = 128


@dataclass(frozen=True)
class FormatSpec:
    name: str
    element_bits: int
    group_size: int | None  # values sharing one block scale; None: no per-element overhead
    scale_bits: int  # bits stored per group (scale, plus zero point where the format has one)
    compute: str  # which tensor-core peak a matmul in this format runs at: "bf16" or "fp8"
    description: str

    @property
    def bits_per_element(self) -> float:
        if self.group_size is None:
            return float(self.element_bits)
        return self.element_bits + self.scale_bits / self.group_size

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8


def _int4(group_size: int) -> FormatSpec:
    if group_size <= 0:
        raise SpecError(f"group_size must be a positive integer, got {group_size}")
    return FormatSpec(
        name=f"int4-g{group_size}",
        element_bits=4,
        group_size=group_size,
        # GPTQ/AWQ: an fp16 scale and a 4-bit packed zero point per group.
        scale_bits=16 + 4,
        # Weight-only: activations stay 16-bit, so the matmul runs at the 16-bit peak.
        compute="bf16",
        description=f"int4 weights, fp16 scale + 4-bit zero per {group_size} values (GPTQ/AWQ)",
    )


_FIXED: dict[str, FormatSpec] = {
    "bf16": FormatSpec("bf16", 16, None, 0, "bf16", "bfloat16"),
    "fp16": FormatSpec("fp16", 16, None, 0, "bf16", "float16 (same tensor-core peak as bf16)"),
    "fp8": FormatSpec(
        "fp8", 8, None, 0, "fp8", "FP8 E4M3 with per-tensor scale (W8A8: runs at the FP8 peak)"
    ),
    "int8": FormatSpec(
        "int8",
        8,
        None,
        0,
        # Charged at the 16-bit peak: the catalog lists no INT8 figure, so this is the
        # conservative case (weight-only int8); W8A8 kernels can do better.
        "bf16",
        "int8 with per-channel scales",
    ),
    "mxfp4": FormatSpec(
        "mxfp4", 4, 32, 8, "bf16", "OCP MX FP4 (E2M1), one E8M0 scale per 32-element block"
    ),
    "nvfp4": FormatSpec(
        "nvfp4",
        4,
        16,
        8,
        "bf16",
        "NVIDIA FP4 (E2M1), one FP8 E4M3 scale per 16-element block + one FP32 per-tensor scale",
    ),
}

_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8-e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "w8a8": "int8",
    "mx-fp4": "mxfp4",
    "nv-fp4": "nvfp4",
}

_INT4_RE = re.compile(r"^(?:int4|gptq|awq|w4a16)(?:[-_]g(\d+))?$")

FORMAT_NAMES = (*_FIXED, "int4", "int4-g<N>", "gptq", "awq")


def get_format(name: str | FormatSpec, group_size: int | None = None) -> FormatSpec:
    """A format by name ("bf16", "fp8", "int4", "int4-g64", "awq", "mxfp4", "nvfp4"...)."""
    if isinstance(name, FormatSpec):
        return name
    if not isinstance(name, str):
        raise SpecError(f"format must be a name, got {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    match = _INT4_RE.match(key)
    if match:
        if match.group(1) and group_size is not None and int(match.group(1)) != group_size:
            raise SpecError(f"format {name!r} conflicts with group_size={group_size}")
        size = int(match.group(1)) if match.group(1) else group_size
        return _int4(size if size is not None else DEFAULT_INT4_GROUP_SIZE)
    if key in _FIXED:
        if group_size is not None:
            raise SpecError(f"format {name!r} has no group_size parameter")
        return _FIXED[key]
    raise SpecError(f"unknown format {name!r}; known: {', '.join(FORMAT_NAMES)}")


_SIXTEEN_BIT = ("bf16", "fp16")


def serving_formats(
    dtype: str | FormatSpec = "auto",
    kv_cache_dtype: str | FormatSpec = "auto",
    model_dtype: str | None = None,
) -> tuple[FormatSpec, FormatSpec]:
    """The weight and KV-cache formats for vLLM-style settings, `auto` resolved as vLLM does.

    `dtype` auto is the checkpoint's 16-bit type (`model_dtype`, its config's torch_dtype):
    fp16 for float16 checkpoints, else bf16 (vLLM serves float32 checkpoints in 16 bits; the
    bytes are the same either way). `dtype` also takes a quantized weight format (fp8, int4,
    ...) in place of vLLM's --quantization. `kv_cache_dtype` auto is the activation type: the
    16-bit weight format, or the checkpoint's 16-bit type under quantized weights; never fp8
    unless asked for.
    """
    model_16 = "fp16" if str(model_dtype or "").lower() in ("float16", "fp16", "half") else "bf16"
    auto = isinstance(dtype, str) and dtype.strip().lower() == "auto"
    weights = get_format(model_16 if auto else dtype)
    if isinstance(kv_cache_dtype, str) and kv_cache_dtype.strip().lower() == "auto":
        kv = weights if weights.name in _SIXTEEN_BIT else get_format(model_16)
    else:
        kv = get_format(kv_cache_dtype)
    return weights, kv
