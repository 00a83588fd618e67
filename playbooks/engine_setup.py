"""The engine set-up a run recorded (model, GPU, tensor parallelism, weight and KV formats,
batch limits), resolved once for every playbook; `playbooks.mbu.setup` extends it with what
the MBU arithmetic alone reads (CUDA-graph capture sizes) and requires (a model and a GPU).

Precedence, highest first: what the user passes (a playbook's --model/--gpu/--tp), the
engine's own resolved configuration (`runs.config.engine_config`), the bundled engine's
command line (`runs.config.target.engine_args`, vLLM's flag spelling), the served model name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Engine flags (vLLM's spelling) that carry a setting, and the setting's name.
VALUE_FLAGS = {
    "--model": "model", "--gpu": "gpu", "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype",
    "--quantization": "quantization",
    "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
    "--max-num-seqs": "max_num_seqs", "--max-num-batched-tokens": "max_num_batched_tokens",
    "--step-overhead-ms": "step_overhead_ms",
}
# Flags that take no value: present means true.
SWITCH_FLAGS = {"--enforce-eager": "enforce_eager"}
INTEGER_SETTINGS = ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens")
# vLLM's --dtype names for the formats `infbench.specs` knows; "auto" is the checkpoint's
# own, which for the models served here is bf16.
_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

ENGINE_CONFIG = "engine config"
COMMAND_LINE = "engine command line"
SERVED_NAME = "served model name"
USER_OPTION = "command-line option"


@dataclass
class EngineSetup:
    model: str | None = None
    gpu: str | None = None
    dtype: str = "bf16"                  # as the engine spelled it (vLLM's --dtype)
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    source: dict[str, str] = field(default_factory=dict)  # each field set -> where it came from
    # Every setting found, with where it came from, the ones without a field included
    # (cudagraph_capture_sizes, enforce_eager, ...): what a playbook extending this reads.
    found: dict[str, tuple[Any, str]] = field(default_factory=dict)

    @property
    def weight_format(self) -> str:
        """The weights' format for `infbench.specs`: the quantization, else the dtype."""
        return str(self.quantization) if self.quantization else self._dtype

    @property
    def kv_format(self) -> str:
        return self._dtype if self.kv_cache_dtype == "auto" else str(self.kv_cache_dtype)

    @property
    def _dtype(self) -> str:
        return _DTYPES.get(str(self.dtype), str(self.dtype))


def engine_args(args: list[Any]) -> dict[str, Any]:
    """The settings an engine command line carries (`--flag value` or `--flag=value`)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        flag, eq, value = str(args[i]).partition("=")
        if flag in SWITCH_FLAGS:
            out[SWITCH_FLAGS[flag]] = value if eq else True  # never takes the next word
        elif flag in VALUE_FLAGS and (eq or i + 1 < len(args)):  # a flag last has no value
            if not eq:
                value, i = str(args[i + 1]), i + 1
            out[VALUE_FLAGS[flag]] = value
        i += 1
    return out


def engine_setup(config: dict[str, Any], run_model: str | None,
                 overrides: dict[str, Any] | None = None) -> EngineSetup:
    """The engine setup of a run (precedence in the module's docstring). Raises ValueError
    naming a setting that should be an integer and is not, and where it came from."""
    found: dict[str, tuple[Any, str]] = {}
    for key, item in (config.get("engine_config") or {}).items():
        value = item.get("value") if isinstance(item, dict) else item
        if value is not None:
            found[key] = (value, ENGINE_CONFIG)
    target = config.get("target") or {}
    for key, value in engine_args(list(target.get("engine_args") or [])).items():
        found.setdefault(key, (value, COMMAND_LINE))
    if run_model:
        found.setdefault("model", (run_model, SERVED_NAME))
    for key, value in (overrides or {}).items():
        if value is not None:
            found[key] = (value, USER_OPTION)
    setup = EngineSetup(found=found)
    for key, (value, src) in found.items():
        if key in ("source", "found") or not hasattr(setup, key):
            continue
        if key in INTEGER_SETTINGS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{key}: {value!r} from the {src} is not an integer") from None
        setattr(setup, key, value)
        setup.source[key] = src
    return setup
