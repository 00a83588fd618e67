"""Build the workload a command line asks for (shared by `infbench run` and `infbench sweep`)."""

from __future__ import annotations

from pathlib import Path

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.preflight import Target
from infbench.loadgen.workloads import (
    WORKLOADS,
    MultiTurn,
    SharedPrefix,
    ShareGPT,
    Structured,
    Synthetic,
    Trace,
    Workload,
)

# Used when no --output-tokens is given, except by ShareGPT, which then takes each reply's
# length from the dataset (so passing this same value explicitly still means "force it").
DEFAULT_OUTPUT_TOKENS = "uniform:64:256"


def build_workload(
    kind: str, *, input_len: LengthDist, output_len: LengthDist | None, target: Target, prefix_groups: int,
    prefix_tokens: int, turns: int, dataset: Path | None, trace: Path | None, time_scale: float,
    trace_start: float, trace_end: float | None,
) -> Workload:
    """The workload `kind` asks for. `output_len` None means the workload's own default: the
    replies' lengths for ShareGPT, DEFAULT_OUTPUT_TOKENS for the others."""
    tokens = target.tokens
    if kind == "sharegpt":
        if dataset is None:
            raise ValueError("dataset: --workload sharegpt needs --dataset FILE.json")
        if not dataset.is_file():
            raise ValueError(f"dataset: {dataset} does not exist")
        return ShareGPT(dataset, tokens, output_len)
    if output_len is None:
        output_len = LengthDist.parse(DEFAULT_OUTPUT_TOKENS, "output_tokens")
    if kind == "synthetic":
        return Synthetic(input_len, output_len, tokens)
    if kind == "prefix":
        return SharedPrefix(prefix_groups, prefix_tokens, input_len, output_len, tokens)
    if kind == "multiturn":
        return MultiTurn(turns, input_len, output_len, tokens)
    if kind == "structured":
        return Structured(input_len, output_len, tokens)
    if kind == "trace":
        if trace is None:
            raise ValueError("trace: --workload trace needs --trace FILE (CSV or JSONL)")
        if not trace.is_file():
            raise ValueError(f"trace: {trace} does not exist")
        return Trace(trace, tokens, time_scale, trace_start, trace_end)
    raise ValueError(f"workload: {kind!r} is not one of {', '.join(WORKLOADS)}")
