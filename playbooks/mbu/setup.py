"""What the MBU arithmetic needs to know about the engine, and the bytes a decode step moves.

The setup (model, GPU, tensor parallelism, weight and KV formats) is the run's, as
`playbooks.engine_setup` resolves it for every playbook; MBU adds the CUDA-graph capture
sizes and requires a model and a GPU. The bytes come from
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
from playbooks.engine_setup import engine_setup

# The settings MBU reads (vLLM's names): where each came from goes in the diagnosis.
_READS = ("model", "gpu", "tensor_parallel_size", "dtype", "kv_cache_dtype", "quantization",
          "max_num_seqs", "cudagraph_capture_sizes", "cudagraph_max_capture_size",
          "cudagraph_mode", "enforce_eager")


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


def resolve_setup(config: dict[str, Any], run_model: str | None,
                  overrides: dict[str, Any]) -> MbuSetup:
    """The run's engine setup (`playbooks.engine_setup`, the resolver every playbook uses)
    with what MBU adds: a model and a GPU are required, and the CUDA-graph capture sizes the
    batch is padded to. Raises ValueError naming what is missing or not a number."""
    base = engine_setup(config, run_model, overrides)
    if base.gpu is None:
        raise ValueError("the run does not say which GPU served it: pass --gpu (e.g. H100-SXM)")
    if base.model is None:
        raise ValueError("the run does not say which model it served: pass --model")
    get = {k: v for k, (v, _) in base.found.items()}
    return MbuSetup(model=str(base.model), gpu=str(base.gpu), tp=base.tensor_parallel_size,
                    weight_format=base.weight_format, kv_format=base.kv_format,
                    max_num_seqs=base.max_num_seqs, capture_sizes=_capture_sizes(get),
                    source={k: s for k, (_, s) in base.found.items() if k in _READS})


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
