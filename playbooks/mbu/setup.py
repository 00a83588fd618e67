"""What the MBU arithmetic needs to know about the engine, and the bytes a decode step moves.

The setup (model, GPU, tensor parallelism, weight and KV formats, CUDA-graph capture sizes)
comes from the engine configuration the run recorded (`runs.config.engine_config`, or the
bundled engine's command line), overridden by what the user passes. The bytes come from
`infbench.specs`, the same arithmetic `infbench plan` prints:

    bytes per decode step (per GPU) = weights read that step
                                    + KV read: every sequence reads its whole context once

Weights read: every non-expert linear, the head and the norms, each once per step whatever
the batch; for MoE models also the routed experts the step's tokens touch
(E x (1 - (1 - k/E)^B) per layer in expectation for B tokens). KV: per layer and token,
`kv_layout(...).bytes_per_token_per_layer_per_gpu`, summed over the layers that keep the
token (sliding-window layers keep at most their window).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infbench.specs import SpecError, get_format, get_gpu, get_model
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION
from infbench.specs.roofline import cost_model
from infbench.specs.weights import weight_bytes

# Engine settings read from the run (vLLM's names), with the engine-config key each comes from.
_KEYS = ("model", "gpu", "tensor_parallel_size", "dtype", "kv_cache_dtype", "quantization",
         "max_num_seqs", "cudagraph_capture_sizes", "cudagraph_max_capture_size",
         "cudagraph_mode", "enforce_eager")
_FLAGS = {"--model": "model", "--gpu": "gpu", "--tensor-parallel-size": "tensor_parallel_size",
          "-tp": "tensor_parallel_size", "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype",
          "--quantization": "quantization", "--max-num-seqs": "max_num_seqs",
          "--enforce-eager": "enforce_eager"}
_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


@dataclass
class MbuSetup:
    model: str
    gpu: str
    tp: int = 1
    weight_format: str = "bf16"
    kv_format: str = "bf16"
    max_num_seqs: int | None = None
    capture_sizes: tuple[int, ...] = ()
    source: dict[str, str] = field(default_factory=dict)  # setting -> where it came from


def _args(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        flag, eq, value = str(args[i]).partition("=")
        if flag in _FLAGS:
            if flag == "--enforce-eager" and not eq:
                out["enforce_eager"] = True
            else:
                if not eq and i + 1 < len(args):
                    value, i = str(args[i + 1]), i + 1
                out[_FLAGS[flag]] = value
        i += 1
    return out


def resolve_setup(config: dict[str, Any], run_model: str | None,
                  overrides: dict[str, Any]) -> MbuSetup:
    """Engine setup of a run: user overrides, then the engine's own config, then the bundled
    engine's command line, then the served model name. Raises ValueError naming what is
    missing or unknown."""
    found: dict[str, tuple[Any, str]] = {}
    for key, item in (config.get("engine_config") or {}).items():
        value = item.get("value") if isinstance(item, dict) else item
        if key in _KEYS and value is not None:
            found[key] = (value, "engine config")
    for key, value in _args(list((config.get("target") or {}).get("engine_args") or [])).items():
        found.setdefault(key, (value, "engine command line"))
    if run_model:
        found.setdefault("model", (run_model, "served model name"))
    for key, value in overrides.items():
        if value is not None:
            found[key] = (value, "command-line option")
    if "gpu" not in found:
        raise ValueError("the run does not say which GPU served it: pass --gpu (e.g. H100-SXM)")
    if "model" not in found:
        raise ValueError("the run does not say which model it served: pass --model")
    get = {k: v for k, (v, _) in found.items()}
    dtype = _DTYPES.get(str(get.get("dtype", "bf16")), str(get.get("dtype", "bf16")))
    quant = get.get("quantization")
    kv = str(get.get("kv_cache_dtype", "auto"))
    try:
        tp = int(get.get("tensor_parallel_size", 1))
        max_seqs = int(get["max_num_seqs"]) if get.get("max_num_seqs") is not None else None
    except (TypeError, ValueError):
        raise ValueError("tensor_parallel_size/max_num_seqs: not an integer in the run's config") from None
    setup = MbuSetup(model=str(get["model"]), gpu=str(get["gpu"]), tp=tp,
                     weight_format=str(quant) if quant else dtype,
                     kv_format=dtype if kv == "auto" else kv, max_num_seqs=max_seqs,
                     capture_sizes=_capture_sizes(get),
                     source={k: s for k, (_, s) in found.items()})
    return setup


def _capture_sizes(get: dict[str, Any]) -> tuple[int, ...]:
    if get.get("enforce_eager") in (True, "true", "True") or get.get("cudagraph_mode") == "NONE":
        return ()
    sizes = get.get("cudagraph_capture_sizes")
    if not isinstance(sizes, list):
        return ()
    cap = get.get("cudagraph_max_capture_size")
    out = sorted({int(s) for s in sizes if isinstance(s, int | float) and s > 0})
    return tuple(s for s in out if cap is None or s <= int(cap))


@dataclass(frozen=True)
class ByteModel:
    """Per-GPU bytes of a decode step, vectorised over steps."""

    peak_bandwidth: float          # datasheet bytes/s of one GPU
    achievable_fraction: float     # what a tuned decode reaches (specs' documented default)
    always_read: float             # weights read every step
    expert_bytes: float            # one routed expert of one MoE layer
    moe_layers: int
    num_experts: int
    experts_per_token: int
    kv_bytes_per_layer_token: float
    layer_groups: tuple[tuple[int | None, int], ...]   # (window or None, layers)
    weights_total: float           # all weights on one GPU (what a naive dashboard uses)
    bytes_per_param: float
    gpu_name: str
    model_name: str

    def weights(self, batch: np.ndarray) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        if self.num_experts == 0:
            return np.full_like(b, self.always_read)
        k, e = self.experts_per_token, self.num_experts
        touched = e * (1.0 - (1.0 - k / e) ** b)
        return self.always_read + self.moe_layers * touched * self.expert_bytes

    def kv_layer_tokens_sql(self, ctx: str) -> str:
        """SQL: sum over layers of the tokens a sequence with context `ctx` reads."""
        terms = [f"{n} * {ctx}" if w is None else f"{n} * least({ctx}, {w})"
                 for w, n in self.layer_groups]
        return " + ".join(terms) or "0"

    @property
    def kv_bytes_per_token(self) -> float:
        """All layers, one GPU, for a token every layer keeps."""
        return self.kv_bytes_per_layer_token * sum(n for _, n in self.layer_groups)


def byte_model(setup: MbuSetup) -> ByteModel:
    try:
        model, gpu = get_model(setup.model), get_gpu(setup.gpu)
        cm = cost_model(model, gpu, setup.tp, setup.weight_format, setup.kv_format)
    except SpecError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    w = weight_bytes(model, setup.weight_format, setup.tp)
    return ByteModel(
        peak_bandwidth=gpu.memory_bandwidth, achievable_fraction=DEFAULT_BANDWIDTH_FRACTION,
        always_read=cm.always_read_bytes, expert_bytes=cm.expert_bytes, moe_layers=cm.moe_layers,
        num_experts=cm.num_experts, experts_per_token=cm.experts_per_token,
        kv_bytes_per_layer_token=cm.kv_bytes_per_layer_token, layer_groups=cm.kv.layer_groups,
        weights_total=w.per_gpu_bytes, bytes_per_param=_bytes_per_param(setup.weight_format),
        gpu_name=gpu.name, model_name=model.name)


def _bytes_per_param(fmt: str) -> float:
    return float(get_format(fmt).bytes_per_element)
