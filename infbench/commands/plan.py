"""`infbench plan`: the serving calculators, each a table of its formula's terms.

Every verb is a thin shell over a plain function in `infbench.specs`; bad input is one
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from infbench.specs import GPUS, MODEL_NAMES, SpecError, get_format, get_gpu, get_model
from infbench.specs.allreduce import DEFAULT_ALPHA_S, allreduce_report
from infbench.specs.claim import check_claim
from infbench.specs.cost import cost_report
from infbench.specs.gpus import GIB
from infbench.specs.kv import kv_report
from infbench.specs.memory import plan_memory
from infbench.specs.throughput import roofline_report

app = typer.Typer(
    help="Calculators for serving: KV size, memory budget, roofline, claims, all-reduce, cost.",
    no_args_is_help=True,
)

GPU_OPT = typer.Option(
    ..., "--gpu", "-g", help="GPU name, e.g. H100, H200, A100-80GB, L40S, MI300X."
)
MODEL_OPT = typer.Option(..., "--model", "-m", help="Catalog model name or path to a config.json.")
TP_OPT = typer.Option(1, "--tp", help="Tensor-parallel degree.")
WFMT_OPT = typer.Option(
    "bf16", "--weights", help="Weight format: bf16, fp8, int8, int4[-gN], mxfp4, nvfp4."
)
KVFMT_OPT = typer.Option("bf16", "--kv-dtype", help="KV-cache format: bf16 or fp8.")
JSON_OPT = typer.Option(False, "--json", help="Print the result as JSON.")


class _Usage(Exception):
    """A bad argument caught in this module (not by the specs)."""


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except (SpecError, _Usage) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise _Usage(message)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: _plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "layout"  # a derived helper, not a result
        }
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return (
        getattr(obj, "name", obj)
        if not isinstance(obj, str | int | float | bool | type(None))
        else obj
    )


def _emit_json(obj: Any, **extra: Any) -> None:
    data = _plain(obj)
    data.update(extra)
    typer.echo(json.dumps(data, indent=2))


def _size(n: float) -> str:
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):,.2f} MiB"
    if abs(n) >= 1 << 10:
        return f"{n / (1 << 10):,.2f} KiB"
    return f"{n:,.0f} B"


def _time(s: float) -> str:
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.3f} ms"
    return f"{s * 1e6:,.2f} µs"


def _table(title: str, rows: list[tuple[str, str, str]]) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("term")
    table.add_column("value", justify="right")
    table.add_column("how")
    for row in rows:
        table.add_row(*row)
    Console(width=max(120, Console().width)).print(table)


def _run(body: Callable[[], None]) -> None:
    with _one_line_errors():
        body()


@app.command("kv")
def kv(
    model: str = MODEL_OPT,
    tp: int = TP_OPT,
    kv_dtype: str = KVFMT_OPT,
    context: int = typer.Option(8192, "--context", "-c", help="Tokens in one sequence."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block."),
    as_json: bool = JSON_OPT,
) -> None:
    """KV bytes per token, per sequence and per GPU; blocks and the waste bound."""

    def body() -> None:
        m = get_model(model)
        r = kv_report(m, tp, kv_dtype, context, block_size)
        if as_json:
            _emit_json(r)
            return
        per_layer = (
            f"{m.mla.kv_lora_rank} latent + {m.mla.qk_rope_head_dim} rope"
            if m.mla
            else f"2 (K,V) x {m.num_kv_heads} kv heads x {m.head_dim} head_dim"
        )
        rows = [
            (
                "attention",
                r.attention,
                f"{m.num_attention_heads} query heads, {m.num_kv_heads} kv heads",
            ),
            ("elements / token / layer", f"{r.elements_per_token_per_layer:,}", per_layer),
            ("bytes / element", f"{r.bytes_per_element:g}", r.kv_format),
            (
                "layers",
                f"{r.num_layers}",
                f"{r.sliding_layers} sliding (window {r.window})"
                if r.window
                else "all full attention",
            ),
            ("bytes / token", f"{r.bytes_per_token:,.0f}", "elements x bytes x layers (one copy)"),
            (
                "bytes / token / GPU",
                f"{r.bytes_per_token_per_gpu:,.0f}",
                "MLA latent replicated on every rank"
                if m.mla
                else f"{r.kv_heads_per_gpu} kv head(s) per GPU, each duplicated {r.replication}x",
            ),
            ("context", f"{r.context:,}", "tokens"),
            (
                "bytes / sequence",
                _size(r.bytes_per_sequence),
                "sum over layers of min(context, window) tokens",
            ),
            ("bytes / sequence / GPU", _size(r.bytes_per_sequence_per_gpu), f"tp={tp}"),
            (
                "bytes / sequence, all GPUs",
                _size(r.bytes_per_sequence_all_gpus),
                "per GPU x tp (duplicates included)",
            ),
            (
                "bytes / block / GPU",
                _size(r.bytes_per_block_per_gpu),
                f"{block_size} tokens x bytes/token/GPU",
            ),
            (
                "blocks / sequence",
                f"{r.blocks_per_sequence:,}",
                f"ceil({r.context} / {block_size})",
            ),
            ("waste at this context", f"{r.waste_tokens} tokens", "unused slots in the last block"),
            (
                "waste bound",
                f"{r.waste_bound_tokens} tokens = {_size(r.waste_bound_bytes_per_gpu)}/GPU",
                "block_size - 1 per sequence",
            ),
        ]
        _table(f"KV cache: {m.name}", rows)

    _run(body)


@app.command("memory")
def memory(
    model: str = MODEL_OPT,
    gpu: str = GPU_OPT,
    tp: int = TP_OPT,
    weights: str = WFMT_OPT,
    kv_dtype: str = KVFMT_OPT,
    max_model_len: int = typer.Option(
        None, "--max-model-len", help="Default: the model's max_position_embeddings."
    ),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization"),
    block_size: int = typer.Option(16, "--block-size"),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
    context: int = typer.Option(
        None, "--context", help="Context for the concurrency figure (default max_model_len)."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """The startup memory budget (vLLM's order), whether max_model_len fits, and fixes."""

    def body() -> None:
        m, g = get_model(model), get_gpu(gpu)
        p = plan_memory(
            m,
            g,
            tp=tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            block_size=block_size,
            weight_format=weights,
            kv_format=kv_dtype,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
        )
        ctx = context or p.max_model_len
        concurrency = p.max_concurrency(ctx)
        if as_json:
            _emit_json(p, concurrency_context=ctx, max_concurrency=concurrency)
            if not p.fits:
                raise typer.Exit(1)
            return
        mark = {p.failing_term: " <- runs out"} if p.failing_term else {}
        rows = [
            ("total memory", _size(p.total_bytes), f"{g.name} datasheet"),
            ("x gpu_memory_utilization", f"{p.gpu_memory_utilization:g}", ""),
            ("= budget", _size(p.budget_bytes), "what the engine may use"),
            (
                "- weights / GPU",
                _size(p.weights_bytes) + mark.get("weights", ""),
                f"{m.params.total / 1e9:.2f} B params, {p.weight_format}, / tp={tp}",
            ),
            (
                "- peak activation",
                _size(p.activation_bytes) + mark.get("activation", ""),
                f"profile run: {max_num_batched_tokens} tokens, sampler for {max_num_seqs} seqs",
            ),
            (
                "- non-torch memory",
                _size(p.non_torch_bytes) + mark.get("non_torch", ""),
                "CUDA context" + (" + NCCL/all-reduce buffers" if tp > 1 else ""),
            ),
            (
                "- CUDA graphs",
                _size(p.cuda_graph_bytes) + mark.get("cuda_graphs", ""),
                "0 with --enforce-eager",
            ),
            (
                "= KV pool / GPU",
                _size(p.remaining_bytes),
                "what is left for KV blocks" if p.remaining_bytes > 0
                else "negative: the terms above overrun the budget",
            ),
            ("KV bytes / token / GPU", f"{p.kv_bytes_per_token:,.0f}", p.kv_format),
            ("blocks", f"{p.num_blocks:,}", f"pool // ({p.block_size} x bytes/token)"),
            ("KV tokens", f"{p.kv_tokens:,}", "blocks x block_size"),
            (
                "max_model_len",
                f"{p.max_model_len:,}",
                f"needs {_size(p.needed_bytes)} / GPU" + mark.get("kv_cache", ""),
            ),
            (
                "fits",
                "yes" if p.fits else "NO",
                f"largest max_model_len that fits: {p.max_model_len_that_fits:,}",
            ),
            ("max concurrency", f"{concurrency:,}", f"sequences of {ctx:,} tokens"),
        ]
        _table(f"Memory plan: {m.name} on {tp} x {g.name}", rows)
        if p.error:
            typer.echo(f"The engine would fail at startup with:\n  {p.error}")
        if p.fixes:
            fixes = Table(title="Changes, each priced", title_justify="left")
            for col in ("change", "fits", "KV tokens / GPU", "cost"):
                fixes.add_column(col)
            for f in p.fixes:
                fixes.add_row(f.change, "yes" if f.fits else "no", f"{f.kv_tokens:,}", f.cost)
            Console(width=max(120, Console().width)).print(fixes)
        if not p.fits:
            raise typer.Exit(1)

    _run(body)


@app.command("roofline")
def roofline(
    model: str = MODEL_OPT,
    gpu: str = GPU_OPT,
    tp: int = TP_OPT,
    weights: str = WFMT_OPT,
    kv_dtype: str = KVFMT_OPT,
    batch: int = typer.Option(1, "--batch", "-b", help="Decoding sequences per step."),
    context: int = typer.Option(2048, "--context", "-c", help="Context of each decoding sequence."),
    prompt: int = typer.Option(2048, "--prompt", "-p", help="Prompt tokens for prefill and TTFT."),
    chunk: int = typer.Option(8192, "--chunk", help="Prefill chunk (max_num_batched_tokens)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    bandwidth_fraction: float = typer.Option(0.8, "--bandwidth-fraction"),
    flops_fraction: float = typer.Option(0.6, "--flops-fraction"),
    as_json: bool = JSON_OPT,
) -> None:
    """Decode/prefill step times, TTFT, the step-time line, throughput knee, ceilings."""

    def body() -> None:
        m, g = get_model(model), get_gpu(gpu)
        r = roofline_report(
            m,
            g,
            tp,
            weights,
            kv_dtype,
            batch,
            context,
            prompt,
            chunk,
            max_num_seqs,
            bandwidth_fraction=bandwidth_fraction,
            flops_fraction=flops_fraction,
        )
        if as_json:
            _emit_json(r, knee_batch=r.line.knee_batch, throughput_limit=r.line.throughput_limit)
            return
        d, pf = r.decode, r.prefill
        bw = g.memory_bandwidth * bandwidth_fraction
        peak = g.peak_flops(get_format(weights).compute) * flops_fraction
        c = r.ceilings
        rows = [
            (
                "bandwidth used",
                f"{bw / 1e12:.2f} TB/s",
                f"{g.memory_bandwidth / 1e12:g} TB/s datasheet x {bandwidth_fraction}",
            ),
            (
                "FLOP/s used",
                f"{peak / 1e12:,.0f} TFLOP/s",
                f"{get_format(weights).compute} dense peak x {flops_fraction}",
            ),
            ("decode: weight bytes", _size(d.weight_bytes), "read once per step, per GPU"),
            ("decode: KV bytes", _size(d.kv_bytes), f"{batch} seqs x {context} tokens"),
            ("decode: memory time", _time(d.memory_s), "bytes / bandwidth"),
            ("decode: compute time", _time(d.compute_s), f"{d.flops / 1e9:,.1f} GFLOP / FLOP/s"),
            (
                "decode: all-reduce time",
                _time(d.comm_s),
                f"2 x {m.num_layers} ring all-reduces, tp={tp}",
            ),
            ("decode step", _time(d.seconds), f"{d.bound}-bound"),
            ("tokens/s (all users)", f"{r.decode_tokens_per_s:,.0f}", "batch / step"),
            ("tokens/s per user", f"{r.decode_tokens_per_s_per_user:,.1f}", "1 / step"),
            (
                f"prefill {prompt} tokens",
                _time(pf.seconds),
                f"{pf.bound}-bound: memory {_time(pf.memory_s)}, compute {_time(pf.compute_s)}",
            ),
            (
                "compute-bound from",
                f"{r.compute_bound_prompt_tokens:,} tokens"
                if r.compute_bound_prompt_tokens
                else "never",
                "prompt length where prefill FLOPs outlast its bytes",
            ),
            (
                "TTFT estimate",
                _time(r.ttft_s),
                f"{r.ttft_chunks} chunk(s) of <= {chunk}, no queueing, no other load",
            ),
            (
                "step line",
                f"{_time(r.line.intercept_s)} + {_time(r.line.slope_s)} x B",
                f"least squares over B in {list(r.line.batches)}, max error {r.line.max_relative_error:.1%}",
            ),
            ("throughput limit", f"{r.line.throughput_limit:,.0f} tok/s", "1 / slope"),
            (
                "knee",
                f"B = {r.line.knee_batch:,.0f}",
                "intercept / slope: half the throughput limit",
            ),
            (
                "ceiling: KV capacity",
                f"{c.kv_capacity:,}",
                f"sequences of {context} tokens in the KV pool",
            ),
            (
                "ceiling: compute ridge",
                f"{c.compute_ridge:,}" if c.compute_ridge else "never",
                "batch where decode turns compute-bound",
            ),
            ("ceiling: max_num_seqs", f"{c.max_num_seqs:,}", "scheduler limit"),
            ("lowest ceiling", c.lowest, f"concurrency <= {c.limit:,}"),
        ]
        _table(f"Roofline: {m.name} on {tp} x {g.name} ({weights} weights, {kv_dtype} KV)", rows)
        curve = Table(title="Decode throughput curve", title_justify="left")
        for col in ("batch", "step", "tokens/s", "tokens/s/user", "bound"):
            curve.add_column(col, justify="right")
        for pt in r.curve:
            curve.add_row(
                str(pt.batch),
                _time(pt.step_s),
                f"{pt.tokens_per_s:,.0f}",
                f"{pt.tokens_per_s_per_user:,.1f}",
                pt.bound,
            )
        Console(width=max(120, Console().width)).print(curve)

    _run(body)


@app.command("claim")
def claim(
    tokens_per_s_per_user: float = typer.Argument(
        ..., help="Claimed decode tokens/s for one user."
    ),
    model: str = MODEL_OPT,
    gpu: str = GPU_OPT,
    tp: int = TP_OPT,
    weights: str = WFMT_OPT,
    kv_dtype: str = KVFMT_OPT,
    context: int = typer.Option(1024, "--context", "-c"),
    batch: int = typer.Option(1, "--batch", "-b"),
    as_json: bool = JSON_OPT,
) -> None:
    """Check a tokens/s-per-user claim against the bandwidth floor."""

    def body() -> None:
        m, g = get_model(model), get_gpu(gpu)
        r = check_claim(m, g, tokens_per_s_per_user, tp, weights, kv_dtype, context, batch)
        if as_json:
            _emit_json(r)
            return
        rows = [
            (
                "claimed",
                f"{r.claimed_tokens_per_s_per_user:,.1f} tok/s/user",
                f"batch {batch}, context {context}",
            ),
            (
                "bytes per token / GPU",
                _size(r.bytes_per_token),
                "weights + KV read per decoded token",
            ),
            (
                "ceiling",
                f"{r.ceiling_tokens_per_s_per_user:,.1f} tok/s/user",
                f"{g.memory_bandwidth / 1e12:g} TB/s datasheet, 100% used",
            ),
            (
                "typical",
                f"{r.typical_tokens_per_s_per_user:,.1f} tok/s/user",
                "at the default 0.8 of bandwidth",
            ),
            ("verdict", r.verdict, ""),
        ]
        _table(f"Claim check: {m.name} on {tp} x {g.name}", rows)
        cond = Table(title="Unstated conditions", title_justify="left")
        for col in ("condition", "ceiling tok/s/user", "makes it true"):
            cond.add_column(col)
        for cnd in r.conditions:
            cond.add_row(
                cnd.condition,
                f"{cnd.ceiling_tokens_per_s_per_user:,.1f}",
                "yes" if cnd.makes_it_true else "no",
            )
        Console(width=max(120, Console().width)).print(cond)

    _run(body)


@app.command("allreduce")
def allreduce(
    size: float = typer.Option(1 << 20, "--size", "-s", help="Message size in bytes."),
    n: int = typer.Option(8, "--n", "-n", help="Ranks in the all-reduce."),
    gpu: str = typer.Option(None, "--gpu", "-g", help="Take the link bandwidth from this GPU."),
    bandwidth_gbps: float = typer.Option(
        None, "--bandwidth", help="Per-direction link GB/s (overrides --gpu)."
    ),
    alpha_us: float = typer.Option(
        DEFAULT_ALPHA_S * 1e6, "--alpha-us", help="Latency per step, µs."
    ),
    model: str = typer.Option(
        None, "--model", "-m", help="Also show a model's TP traffic per token."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Ring and tree all-reduce times and TP all-reduce bytes per token."""

    def body() -> None:
        _require(size >= 0, f"size must be >= 0 bytes, got {size}")
        _require(gpu is not None or bandwidth_gbps is not None, "give --gpu or --bandwidth")
        g = get_gpu(gpu) if gpu is not None else None
        m = get_model(model) if model is not None else None
        bw = bandwidth_gbps * 1e9 if bandwidth_gbps is not None else None
        r = allreduce_report(n, size, g, bw, alpha_us * 1e-6, m)
        if as_json:
            _emit_json(r)
            return
        rows = [
            (
                "B (per direction)",
                f"{r.bandwidth / 1e9:,.1f} GB/s",
                f"{g.name} {g.interconnect} / 2 x achievable fraction"
                if g and bw is None
                else "given",
            ),
            ("alpha", _time(r.alpha_s), "per step"),
            ("ring latency", _time(r.ring_latency_s), f"2(n-1) alpha = {2 * (n - 1)} alpha"),
            ("ring bandwidth", _time(r.ring_bandwidth_s), "2(n-1)/n S/B"),
            ("ring total", _time(r.ring_s), ""),
            ("tree latency", _time(r.tree_latency_s), "2 ceil(log2 n) alpha"),
            (
                "tree bandwidth",
                _time(r.tree_bandwidth_s),
                "2 S/B (pipelined double binary tree, modelled)",
            ),
            ("tree total", _time(r.tree_s), ""),
            ("faster", r.faster, f"for S = {_size(r.size_bytes)}"),
            (
                "ring: bandwidth dominates above",
                _size(r.ring_bandwidth_dominates_above),
                "S = n alpha B",
            ),
            (
                "tree: bandwidth dominates above",
                _size(r.tree_bandwidth_dominates_above),
                "S = log2(n) alpha B",
            ),
            (
                "ring beats tree above",
                _size(r.ring_beats_tree_above),
                "S = n alpha B ((n-1) - log2 n)",
            ),
        ]
        if m is not None:
            rows += [
                (
                    "all-reduces / token",
                    f"{r.allreduces_per_token}",
                    f"2 per layer x {m.num_layers}",
                ),
                (
                    "bytes / all-reduce / token",
                    f"{r.message_bytes_per_token:,}",
                    f"hidden {m.hidden_size} x 2 bytes",
                ),
                ("bytes / token", _size(r.bytes_per_token), "2 x layers x hidden x 2"),
                (
                    "link bytes / token / GPU",
                    _size(r.link_bytes_per_token_per_gpu),
                    "x 2(n-1)/n (ring)",
                ),
            ]
        _table(f"All-reduce over {n} ranks", rows)

    _run(body)


@app.command("cost")
def cost(
    model: str = MODEL_OPT,
    gpu: str = GPU_OPT,
    price: float = typer.Option(..., "--price", help="USD per GPU-hour."),
    tp: int = TP_OPT,
    weights: str = WFMT_OPT,
    kv_dtype: str = KVFMT_OPT,
    batch: int = typer.Option(64, "--batch", "-b"),
    context: int = typer.Option(2048, "--context", "-c"),
    prompt: int = typer.Option(2048, "--prompt", "-p"),
    input_tps: float = typer.Option(
        None, "--input-tps", help="Measured prefill tokens/s (else roofline)."
    ),
    output_tps: float = typer.Option(
        None, "--output-tps", help="Measured decode tokens/s (else roofline)."
    ),
    as_json: bool = JSON_OPT,
) -> None:
    """Price per million input and output tokens."""

    def body() -> None:
        m, g = get_model(model), get_gpu(gpu)
        r = cost_report(
            m,
            g,
            price,
            tp,
            weights,
            kv_dtype,
            batch,
            context,
            prompt,
            input_tokens_per_s=input_tps,
            output_tokens_per_s=output_tps,
        )
        if as_json:
            _emit_json(r)
            return
        rows = [
            (
                "replica price",
                f"${r.replica_price_per_s * 3600:,.2f}/h",
                f"${price:g}/GPU-hour x {tp} GPU(s)",
            ),
            (
                "input tokens/s",
                f"{r.input_tokens_per_s:,.0f}",
                f"{r.input_source}: prefill of {prompt}-token prompts",
            ),
            (
                "output tokens/s",
                f"{r.output_tokens_per_s:,.0f}",
                f"{r.output_source}: decode, batch {batch} at context {context}",
            ),
            (
                "$ / M input tokens",
                f"${r.usd_per_million_input:,.4f}",
                "price/s / input tokens/s x 1e6",
            ),
            (
                "$ / M output tokens",
                f"${r.usd_per_million_output:,.4f}",
                "price/s / output tokens/s x 1e6",
            ),
        ]
        _table(f"Cost: {m.name} on {tp} x {g.name}", rows)

    _run(body)


@app.command("gpus")
def gpus(as_json: bool = JSON_OPT) -> None:
    """The GPU catalog with each figure's source."""
    if as_json:
        typer.echo(json.dumps([_plain(g) for g in GPUS], indent=2))
        return
    table = Table(title="GPU catalog (datasheet figures; dense peaks)", title_justify="left")
    for col in (
        "gpu",
        "memory",
        "HBM TB/s",
        "BF16 TFLOP/s",
        "FP8 TFLOP/s",
        "link",
        "PCIe",
        "SMs",
        "source",
    ):
        table.add_column(col)
    for g in GPUS:
        table.add_row(
            g.name,
            _size(g.memory_bytes),
            f"{g.memory_bandwidth / 1e12:g}",
            f"{g.bf16_flops / 1e12:g}",
            f"{g.fp8_flops / 1e12:g}" if g.fp8_flops else "-",
            f"{g.interconnect} {g.interconnect_bandwidth / 1e9:g} GB/s",
            f"Gen{g.pcie_gen}",
            str(g.sm_count),
            g.source,
        )
    Console(width=max(160, Console().width)).print(table)


@app.command("models")
def models(as_json: bool = JSON_OPT) -> None:
    """The model catalog with parameter counts derived from the shapes."""

    def body() -> None:
        rows = []
        for name in MODEL_NAMES:
            m = get_model(name)
            rows.append((m, m.params))
        if as_json:
            typer.echo(
                json.dumps(
                    [
                        {
                            "name": m.name,
                            "total_params": p.total,
                            "active_params": p.active,
                            "layers": m.num_layers,
                            "attention": "MLA" if m.mla else "GQA",
                        }
                        for m, p in rows
                    ],
                    indent=2,
                )
            )
            return
        table = Table(
            title="Model catalog (parameters derived from config.json shapes)", title_justify="left"
        )
        for col in (
            "model",
            "total",
            "active",
            "layers",
            "hidden",
            "heads/kv",
            "attention",
            "experts",
        ):
            table.add_column(col)
        for m, p in rows:
            table.add_row(
                m.name,
                f"{p.total / 1e9:.2f} B",
                f"{p.active / 1e9:.2f} B",
                str(m.num_layers),
                str(m.hidden_size),
                f"{m.num_attention_heads}/{m.num_kv_heads}",
                "MLA" if m.mla else ("GQA + sliding" if m.has_sliding_window else "GQA"),
                f"{m.moe.experts_per_token}/{m.moe.num_experts}" if m.moe else "-",
            )
        Console(width=max(140, Console().width)).print(table)

    _run(body)
