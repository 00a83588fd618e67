"""Build the workload a command line asks for (shared by `infbench run` and `infbench sweep`).

Everything a workload reads is checked here, before a run exists: a trace or dataset that
cannot be sent is a ValueError (one line, exit 2), and so is a fixed input length shorter than
the shortest prompt the target can be sent; what will be sent differently from what was asked
is listed by `workload_warnings`, printed before the run and kept in its config and summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from infbench.loadgen.preflight import Target
from infbench.loadgen.workloads import (
    WORKLOADS,
    MultiTurn,
    SharedPrefix,
    ShareGPT,
    Structured,
    Synthetic,
    TokenModel,
    Trace,
    Workload,
)
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.schemas import SchemaMix
from infbench.loadgen.workloads.synthetic import PROMPT_TEXTS
from infbench.loadgen.workloads.tenant_spec import AdapterMix, TenantSpec
from infbench.loadgen.workloads.tenants import TenantMix

# Used when no --output-tokens is given, except by ShareGPT, which then takes each reply's
# length from the dataset (so passing this same value explicitly still means "force it").
DEFAULT_OUTPUT_TOKENS = "uniform:64:256"
_SHORTEST_WORD = "of"  # one of the shortest words a prompt can be made of (prompts.WORDS)


def shortest_prompt(tokens: TokenModel) -> int:
    """Tokens of the shortest prompt the target can be sent: BOS, template and one word."""
    return max(1, round(tokens.predict(_SHORTEST_WORD)))


def _check_input(dist: LengthDist, tokens: TokenModel, option: str, what: str) -> None:
    floor = shortest_prompt(tokens)
    if dist.kind == "fixed" and int(dist.a) < floor:
        raise ValueError(f"{option}: {int(dist.a)} is shorter than the shortest {what} this target can be sent "
                         f"({floor} tokens: {round(tokens.overhead)} of BOS/template and one word)")


def _short_share(dist: LengthDist, floor: int) -> float:
    # A fixed stream, not the run's: how often the distribution falls below the floor.
    return float(np.mean(dist.sample(np.random.default_rng(0), 20_000) < floor))


def workload_warnings(wl: Workload) -> list[str]:
    """What the run will send differently from what was asked (counted), before it starts."""
    if isinstance(wl, TenantMix):  # each tenant's workload, a line said once
        return list(dict.fromkeys(w for part in wl.parts() for w in workload_warnings(part)))
    out = list(wl.warnings()) if isinstance(wl, Trace | ShareGPT) else []
    dist = wl.input_len if isinstance(wl, Synthetic | Structured) else None
    if dist is not None and dist.kind != "fixed":
        floor = shortest_prompt(wl.tokens)
        share = _short_share(dist, floor)
        if share > 0:
            out.append(f"input_tokens: {share:.1%} of the lengths {dist} draws are shorter than the shortest "
                       f"prompt this target can be sent ({floor} tokens); those requests are sent at about "
                       f"{floor} and count as off target")
    return out


def build_workload(
    kind: str, *, input_len: LengthDist, output_len: LengthDist | None, target: Target, prefix_groups: int,
    prefix_tokens: int, turns: int, dataset: Path | None, trace: Path | None, time_scale: float,
    trace_start: float, trace_end: float | None, schemas: SchemaMix | None = None,
    prompt_text: str = "salted",
) -> Workload:
    """The workload `kind` asks for, its files read and checked. `output_len` None means the
    workload's own default: the replies' lengths for ShareGPT, DEFAULT_OUTPUT_TOKENS for the
    others."""
    tokens = target.tokens
    if prompt_text not in PROMPT_TEXTS:
        raise ValueError(f"prompt_text: must be one of {', '.join(PROMPT_TEXTS)}, got {prompt_text!r}")
    if prompt_text != "salted" and kind != "synthetic":
        raise ValueError(f"prompt_text: --prompt-text {prompt_text} is for --workload synthetic, not {kind}")
    if schemas is not None and kind != "structured":
        raise ValueError(f"schemas: --schemas is for --workload structured, not {kind}")
    if kind == "sharegpt":
        if dataset is None:
            raise ValueError("dataset: --workload sharegpt needs --dataset FILE.json")
        if not dataset.is_file():
            raise ValueError(f"dataset: {dataset} does not exist")
        wl = ShareGPT(dataset, tokens, output_len)
        wl.load()
        return wl
    if output_len is None:
        output_len = LengthDist.parse(DEFAULT_OUTPUT_TOKENS, "output_tokens")
    if kind == "synthetic":
        _check_input(input_len, tokens, "input_tokens", "prompt")
        return Synthetic(input_len, output_len, tokens, prompt_text=prompt_text)
    if kind == "prefix":
        _check_input(LengthDist("fixed", prefix_tokens), tokens, "prefix_tokens", "prefix")
        return SharedPrefix(prefix_groups, prefix_tokens, input_len, output_len, tokens)
    if kind == "multiturn":
        return MultiTurn(turns, input_len, output_len, tokens)
    if kind == "structured":
        _check_input(input_len, tokens, "input_tokens", "prompt")
        return Structured(input_len, output_len, tokens, mix=schemas)
    if kind == "trace":
        if trace is None:
            raise ValueError("trace: --workload trace needs --trace FILE (CSV or JSONL)")
        if not trace.is_file():
            raise ValueError(f"trace: {trace} does not exist")
        if time_scale <= 0:
            raise ValueError(f"time_scale: must be > 0, got {time_scale:g}")
        if trace_start < 0 or (trace_end is not None and trace_end < trace_start):
            raise ValueError("trace_start/trace_end: need 0 <= --trace-start <= --trace-end")
        replay = Trace(trace, tokens, time_scale, trace_start, trace_end)
        replay.load()
        return replay
    raise ValueError(f"workload: {kind!r} is not one of {', '.join(WORKLOADS)}")


def check_tenants(kind: str, tenants: tuple[TenantSpec, ...]) -> None:
    """Tenants a workload of `kind` can take (ValueError naming the option otherwise)."""
    if tenants and kind == "trace":
        raise ValueError("tenants: --workload trace replays its own arrivals and lengths; "
                         "--tenants is for the generated workloads")
    if kind == "sharegpt" and any(t.input_len is not None for t in tenants):
        raise ValueError("tenants: input= does not apply to --workload sharegpt (its prompts "
                         "come from the dataset)")


def with_tenants(one: Callable[[LengthDist, LengthDist | None], Workload], kind: str,
                 input_len: LengthDist, output_len: LengthDist | None,
                 tenants: tuple[TenantSpec, ...], adapters: AdapterMix | None,
                 target: Target) -> Workload:
    """The run's workload (`one(input_len, output_len)` builds one), mixed over `tenants` (each
    its own workload, its lengths in place of the run's) and `adapters` where given. An
    adapter the target does not list in /v1/models is refused before anything is sent."""
    base = one(input_len, output_len)
    if not tenants and adapters is None:
        return base
    check_tenants(kind, tenants)
    if adapters is not None and target.models:
        missing = [a for a in adapters.adapters if a not in target.models]
        if missing:
            raise ValueError(f"adapters: {missing[0]!r} is not served by the target (its /v1/models "
                             f"lists {', '.join(target.models)}); vLLM serves an adapter with "
                             f"--enable-lora --lora-modules {missing[0]}=PATH")
    parts = [one(t.input_len or input_len, t.output_len or output_len) for t in tenants]
    return TenantMix(base, tenants, parts, adapters)
