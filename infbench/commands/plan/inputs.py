"""What `infbench plan` takes: options under vLLM's names, names resolved to catalog entries
(and said so), and bad input as one line on stderr with exit code 2.

Option names are `vllm serve`'s where the meaning is the same (--tensor-parallel-size/-tp,
--dtype, --kv-cache-dtype, --max-model-len, --gpu-memory-utilization, --block-size,
--max-num-seqs, --max-num-batched-tokens, --enforce-eager), as the reference engine's are;
the older short spellings (--tp, --weights, --kv-dtype, --chunk) still work.
--pipeline-parallel-size/-pp is taken as 1 and refused above it: no calculator models it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

from infbench.command_support import fail
from infbench.lazy_commands import usage_error_in_one_line
from infbench.specs import FormatSpec, GpuSpec, ModelSpec, SpecError
from infbench.specs.formats import serving_formats
from infbench.specs.gpus import resolve_gpu
from infbench.specs.memory import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS
from infbench.specs.models import resolve_model
from infbench.specs.names import ALIAS, EXACT, Resolved

MODEL = typer.Option(
    ..., "--model", "-m",
    help="Hugging Face id or alias (`infbench plan models` lists them), or a config.json path.",
)
GPU = typer.Option(..., "--gpu", "-g", help="GPU name, e.g. H100, H200, A100-80GB, L40S, MI300X.")
TP = typer.Option(
    1, "--tensor-parallel-size", "-tp", "--tp", help="Tensor-parallel degree, as in vLLM."
)
DTYPE = typer.Option(
    "auto", "--dtype", "--weights",
    help="Weight format: auto (the checkpoint's 16-bit type, as vLLM), bf16, fp16, fp8, int8, "
    "int4[-gN], mxfp4, nvfp4. Quantized formats stand in for vLLM's --quantization.",
)
KV_DTYPE = typer.Option(
    "auto", "--kv-cache-dtype", "--kv-dtype",
    help="KV-cache format: auto (the 16-bit activation type, as vLLM), bf16, fp16, fp8.",
)
BLOCK_SIZE = typer.Option(16, "--block-size", help="Tokens per KV block, as in vLLM.")
GPU_MEMORY_UTILIZATION = typer.Option(
    0.9, "--gpu-memory-utilization", help="Share of GPU memory the engine may use, as in vLLM."
)
MAX_NUM_SEQS = typer.Option(
    DEFAULT_MAX_NUM_SEQS, "--max-num-seqs", help="Sequences per step (scheduler limit)."
)
MAX_NUM_BATCHED_TOKENS = typer.Option(
    DEFAULT_MAX_NUM_BATCHED_TOKENS, "--max-num-batched-tokens", "--chunk",
    help="Tokens per step, as in vLLM: the prefill chunk and the profile run's size.",
)
PP = typer.Option(
    1, "--pipeline-parallel-size", "-pp",
    help="Pipeline stages, as in vLLM: only 1, pipeline parallelism is not modelled.",
)
JSON = typer.Option(False, "--json", help="Print the result as JSON.")


class PlanUsageError(Exception):
    """A bad argument caught by a plan command itself (not by the specs)."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise PlanUsageError(message)


def single_stage(pp: int) -> None:
    """Accept vLLM's --pipeline-parallel-size where it changes nothing (1), refuse it else."""
    require(pp == 1, f"--pipeline-parallel-size {pp}: pipeline parallelism is not modelled "
            "(only 1); -tp plans tensor parallelism")


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Spec and usage errors become one literal line on stderr and exit code 2."""
    try:
        yield
    except (SpecError, PlanUsageError) as exc:
        raise fail(str(exc)) from None


# click's UsageError as typer raises it: newer typers carry their own copy of click, whose
# classes are not the `click` package's, so take it from the class typer exports.
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class PlanGroup(TyperGroup):
    """Option-parsing errors (a non-number, an unknown flag) as one line, not a usage box."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _USAGE_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `plan kv` alone: the help, as asked
                raise
            raise usage_error_in_one_line(exc, ctx) from None


@dataclass(frozen=True)
class Target:
    """The model, GPU and formats a calculator runs for, and how each name was resolved."""

    resolved: tuple[Resolved, ...]
    model: ModelSpec | None = None
    gpu: GpuSpec | None = None
    weights: FormatSpec | None = None
    kv: FormatSpec | None = None

    def need_model(self) -> ModelSpec:
        assert self.model is not None
        return self.model

    def need_gpu(self) -> GpuSpec:
        assert self.gpu is not None
        return self.gpu

    def need_formats(self) -> tuple[FormatSpec, FormatSpec]:
        assert self.weights is not None and self.kv is not None
        return self.weights, self.kv


def _format_notes(weights: FormatSpec, checkpoint: str | None) -> tuple[str, str]:
    dtype_note = f"the checkpoint's torch_dtype is {checkpoint}" if checkpoint else (
        "the checkpoint names no torch_dtype")
    if checkpoint and checkpoint not in ("bfloat16", "float16"):
        dtype_note += ", served in 16 bits"
    kv_note = ("follows dtype" if weights.name in ("bf16", "fp16")
               else "the 16-bit activation type; quantized weights leave it as it is")
    return dtype_note, kv_note


def _format_resolution(kind: str, requested: str, used: FormatSpec, why: str) -> Resolved:
    asked = requested.strip().lower()
    if asked == "auto":
        return Resolved(kind, requested, used.name, "auto", why)
    return Resolved(kind, requested, used.name, EXACT if asked == used.name else ALIAS)


def resolve(
    model: str | None = None,
    gpu: str | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str | None = None,
) -> Target:
    """Resolve the names a command was given; SpecError (one line, exit 2) when one is bad."""
    resolved: list[Resolved] = []
    m = g = weights = kv = None
    if model is not None:
        m, r = resolve_model(model)
        resolved.append(r)
    if gpu is not None:
        g, r = resolve_gpu(gpu)
        resolved.append(r)
    if dtype is not None and kv_cache_dtype is not None:
        checkpoint = m.dtype if m is not None else None
        weights, kv = serving_formats(dtype, kv_cache_dtype, checkpoint)
        dtype_note, kv_note = _format_notes(weights, checkpoint)
        resolved.append(_format_resolution("dtype", dtype, weights, dtype_note))
        resolved.append(_format_resolution("kv_cache_dtype", kv_cache_dtype, kv, kv_note))
    return Target(tuple(resolved), m, g, weights, kv)
