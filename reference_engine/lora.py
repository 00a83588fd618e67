"""LoRA adapters, as vLLM serves them: `--enable-lora`, `--max-loras`, `--max-lora-rank`,
`--lora-modules NAME=PATH ...`.

A request names an adapter by its `model` field (the base model's name, or an adapter's);
an unknown name is a 404, as vLLM answers it. `/v1/models` lists the adapters after the base
model, each with its `parent`.

Three parts, one job each:

- `LoraModules` (owns: the name -> adapter registry, fixed at start): reads each PATH's
  `adapter_config.json` (peft's file) for the adapter's rank `r`; a rank above
  `max_lora_rank` is refused at start, as vLLM refuses it when it loads the adapter.
- the slot rule (`admits`, `batch_adapters`), which the scheduler applies: the running batch
  holds at most `max_loras` distinct adapters (base-model requests take no slot). A waiting
  request whose adapter is neither in the batch nor has a free slot is skipped, and the
  scheduler tries the next one: vLLM v1's scheduler does the same ("Scheduling would exceed
  max_loras, skip."), so with `max_loras=1` the adapters take turns: one adapter's requests
  run while every other adapter's wait for the batch to empty of it.
- `LoraCost` (the sim executor's price): each distinct adapter in a step computes its shrink
  (x A: hidden -> rank) and expand (x B: rank -> out) over every linear projection of every
  layer, for that adapter's tokens only: 2 x tokens x rank x (in + out) FLOPs, and its A and B
  weights read once (rank x (in + out) elements), whichever takes longer on the roofline,
  plus a fixed per-adapter, per-layer cost (`sim_lora_launch_us`: each adapter's segment of
  the punica-style kernels is its own work, launched or tiled apart). So a step's LoRA time
  grows with the distinct adapters in it, not only with its tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infbench.specs.gpus import GpuSpec
from infbench.specs.models import ModelSpec
from reference_engine.block_pool import InvariantError
from reference_engine.executor import StepBatch
from reference_engine.request import Sequence

LORA_WEIGHT_BYTES = 2  # adapters are loaded in the model's 16-bit dtype


class LoraConfigError(ValueError):
    """An adapter that cannot be served; the message names the flag and the adapter."""


@dataclass(frozen=True)
class LoraAdapter:
    name: str
    path: str
    rank: int
    lora_id: int  # 1, 2, ... in the order given (vLLM's lora_int_id; 0 is the base model)


def _read_rank(name: str, path: Path) -> int:
    config = path / "adapter_config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except OSError:
        raise LoraConfigError(f"lora_modules: {name}: {config} cannot be read (an adapter "
                              "directory holds peft's adapter_config.json)") from None
    except ValueError as exc:
        raise LoraConfigError(f"lora_modules: {name}: {config} is not JSON ({exc})") from None
    rank = doc.get("r") if isinstance(doc, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise LoraConfigError(f"lora_modules: {name}: {config} has no positive integer rank 'r'")
    return rank


class LoraModules:
    """The adapters the engine serves, by name. Owns: the registry, built once at start and
    read-only after (the server's threads and the engine thread only look names up)."""

    def __init__(self, adapters: Iterable[LoraAdapter], max_loras: int, max_lora_rank: int) -> None:
        self.adapters = {a.name: a for a in adapters}
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank

    @classmethod
    def parse(cls, specs: list[str], max_loras: int, max_lora_rank: int,
              base_name: str) -> LoraModules:
        """`--lora-modules NAME=PATH ...`: each PATH's rank read and checked."""
        out: list[LoraAdapter] = []
        for spec in specs:
            name, eq, path = spec.partition("=")
            if not eq or not name or not path:
                raise LoraConfigError(f"lora_modules: {spec!r} is not NAME=PATH")
            if name == base_name or any(a.name == name for a in out):
                raise LoraConfigError(f"lora_modules: the name {name!r} is already taken")
            rank = _read_rank(name, Path(path))
            if rank > max_lora_rank:
                # vLLM's words when it loads such an adapter.
                raise LoraConfigError(f"lora_modules: {name}: LoRA rank {rank} is greater than "
                                      f"max_lora_rank {max_lora_rank}")
            out.append(LoraAdapter(name, path, rank, len(out) + 1))
        return cls(out, max_loras, max_lora_rank)

    def rank(self, name: str) -> int:
        return self.adapters[name].rank

    def __contains__(self, name: object) -> bool:
        return name in self.adapters


# ---- the slot rule (the scheduler's) ----------------------------------------------------------

def batch_adapters(running: Iterable[Sequence]) -> set[str]:
    """Distinct adapters among the running sequences (the base model takes no slot)."""
    return {s.params.lora for s in running if s.params.lora is not None}


def admits(lora: str | None, in_batch: set[str], max_loras: int) -> bool:
    """Whether a sequence asking for `lora` may join a batch holding `in_batch`."""
    return lora is None or lora in in_batch or len(in_batch) < max_loras


def waiting_for_slot(waiting: Iterable[Sequence], in_batch: set[str], max_loras: int) -> int:
    """Waiting sequences whose adapter could not join the batch as it is."""
    return sum(1 for s in waiting if not admits(s.params.lora, in_batch, max_loras))


def check_slots(running: Iterable[Sequence], max_loras: int) -> None:
    held = batch_adapters(running)
    if len(held) > max_loras:
        raise InvariantError(f"{len(held)} adapters in the running batch > max_loras {max_loras}: "
                             f"{sorted(held)}")


# ---- the price (the sim executor's) -----------------------------------------------------------

def _projection_dims(model: ModelSpec) -> int:
    """Sum over a layer's linear projections of (in + out): q, k, v, o, gate, up, down."""
    h, hd = model.hidden_size, model.head_dim
    q, kv, inter = model.num_attention_heads * hd, model.num_kv_heads * hd, model.intermediate_size
    return (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + inter) + (inter + h)


class LoraCost:
    """Seconds a step's adapters add on the simulated device (see the module docstring).
    Owns nothing that changes: the prices are fixed at start; the sim executor calls it."""

    def __init__(self, modules: LoraModules, model: ModelSpec, gpu: GpuSpec, tp: int,
                 bandwidth_fraction: float, flops_fraction: float, launch_us: float) -> None:
        self.modules = modules
        self.layers = model.num_layers
        self.dims = _projection_dims(model)
        self.tp = tp
        self.bandwidth = gpu.memory_bandwidth * bandwidth_fraction
        self.flops = gpu.peak_flops("bf16") * flops_fraction
        self.launch_s = launch_us * 1e-6

    def adapter_seconds(self, rank: int, tokens: int) -> float:
        elements = self.layers * rank * self.dims / self.tp  # A and B of every projection
        compute = 2.0 * tokens * elements / self.flops
        memory = elements * LORA_WEIGHT_BYTES / self.bandwidth
        return max(compute, memory) + self.layers * self.launch_s

    def tokens_by_adapter(self, batch: StepBatch) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in batch.seqs:
            lora = w.params.lora
            if lora is not None:
                out[lora] = out.get(lora, 0) + len(w.token_ids)
        return out

    def step_seconds(self, batch: StepBatch) -> tuple[float, int]:
        """(seconds, distinct adapters) of the step's LoRA work."""
        tokens = self.tokens_by_adapter(batch)
        return (sum(self.adapter_seconds(self.modules.rank(a), n) for a, n in tokens.items()),
                len(tokens))


def step_fields(scheduled: Iterable[Sequence], running: Iterable[Sequence],
                waiting: Iterable[Sequence], lora_s: float, max_loras: int) -> dict[str, float | int]:
    """The step log's LoRA fields (infbench.store.tenants_schema names them)."""
    return {"lora_adapters": len(batch_adapters(scheduled)),
            "lora_waiting": waiting_for_slot(waiting, batch_adapters(running), max_loras),
            "lora_ms": lora_s * 1e3, "max_loras": max_loras}


def metric_lines(running: Iterable[Sequence], waiting: Iterable[Sequence], max_loras: int,
                 now: float) -> str:
    """vLLM's `vllm:lora_requests_info`: a gauge set to the time of the last update, whose
    labels carry the setting and the adapters of the running and of the waiting requests
    (comma-joined; the label order vLLM 0.32's /metrics prints). One difference: vLLM 0.32
    lists a request as waiting only once its first output reached the API server, so a
    request held back by max_loras is missing there; here every waiting request counts."""
    run = ",".join(sorted(batch_adapters(running)))
    wait = ",".join(sorted(batch_adapters(waiting)))
    return ("# HELP vllm:lora_requests_info Running stats on lora requests.\n"
            "# TYPE vllm:lora_requests_info gauge\n"
            f'vllm:lora_requests_info{{max_lora="{max_loras}",running_lora_adapters="{run}",'
            f'waiting_lora_adapters="{wait}"}} {now}\n')
