"""The `infbench plan` verbs: each resolves its inputs, calls one calculator in
`infbench.specs` and hands the typed result to `render` (tables) or JSON."""

from __future__ import annotations

import typer

from infbench.commands.plan import render, rows
from infbench.commands.plan.inputs import (
    BLOCK_SIZE,
    DTYPE,
    GPU,
    GPU_MEMORY_UTILIZATION,
    JSON,
    KV_DTYPE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    MODEL,
    PP,
    TP,
    PlanGroup,
    one_line_errors,
    require,
    resolve,
    single_stage,
)
from infbench.specs import GPUS, MODEL_NAMES
from infbench.specs.allreduce import DEFAULT_ALPHA_S, allreduce_report
from infbench.specs.claim import check_claim
from infbench.specs.cost import cost_report
from infbench.specs.gpus import ALIAS_NOTES as GPU_ALIAS_NOTES
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION
from infbench.specs.kv import kv_report
from infbench.specs.memory import plan_memory
from infbench.specs.models import catalog_aliases, get_model
from infbench.specs.throughput import roofline_report

app = typer.Typer(
    cls=PlanGroup,
    help="Calculators for serving: KV size, memory budget, roofline, claims, all-reduce, cost. "
    "Options take vLLM's names (--tensor-parallel-size/-tp, --dtype, --kv-cache-dtype, "
    "--max-model-len, --gpu-memory-utilization, ...).\n\n"
    "Example:\n\ninfbench plan memory -m llama-3.1-8b -g h100 --max-model-len 32768",
    no_args_is_help=True,
)


@app.command("kv")
def kv(
    model: str = MODEL,
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    context: int = typer.Option(8192, "--context", "-c", help="Tokens in one sequence."),
    block_size: int = BLOCK_SIZE,
    as_json: bool = JSON,
) -> None:
    """KV bytes per token, per sequence and per GPU; blocks and the waste bound.

    Example:

    infbench plan kv -m llama-3.1-70b -tp 4 --kv-cache-dtype fp8
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, None, dtype, kv_cache_dtype)
        m, (_, kv_format) = t.need_model(), t.need_formats()
        r = kv_report(m, tp, kv_format, context, block_size)
    if as_json:
        render.emit_json(r, t)
        return
    render.show(t, rows.kv(r, m))


@app.command("memory")
def memory(
    model: str = MODEL,
    gpu: str = GPU,
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    max_model_len: int = typer.Option(
        None, "--max-model-len", help="Longest sequence, as in vLLM. Default: the model's "
        "max_position_embeddings."
    ),
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    block_size: int = BLOCK_SIZE,
    max_num_seqs: int = MAX_NUM_SEQS,
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
    context: int = typer.Option(
        None, "--context", help="Context for the concurrency figure (default max_model_len)."
    ),
    as_json: bool = JSON,
) -> None:
    """The startup memory budget (vLLM's order), whether max_model_len fits, and fixes.

    Exit code 1 when max_model_len does not fit (the engine would refuse to start).

    Example:

    infbench plan memory -m llama-3.1-70b -g h100 -tp 4 --max-model-len 65536
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        weights, kv_format = t.need_formats()
        p = plan_memory(
            t.need_model(),
            t.need_gpu(),
            tp=tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            block_size=block_size,
            weight_format=weights,
            kv_format=kv_format,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
        )
        ctx = p.max_model_len if context is None else context
        concurrency = p.max_concurrency(ctx)
    if as_json:
        render.emit_json(p, t, concurrency_context=ctx, max_concurrency=concurrency)
    else:
        render.show(t, rows.memory(p, t.need_model(), t.need_gpu(), max_num_batched_tokens,
                                   max_num_seqs, ctx, concurrency))
    if not p.fits:
        raise typer.Exit(1)


@app.command("roofline")
def roofline(
    model: str = MODEL,
    gpu: str = GPU,
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    batch: int = typer.Option(1, "--batch", "-b", help="Decoding sequences per step."),
    context: int = typer.Option(2048, "--context", "-c", help="Context of each decoding sequence."),
    prompt: int = typer.Option(2048, "--prompt", "-p", help="Prompt tokens for prefill and TTFT."),
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = MAX_NUM_SEQS,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    block_size: int = BLOCK_SIZE,
    bandwidth_fraction: float = typer.Option(DEFAULT_BANDWIDTH_FRACTION, "--bandwidth-fraction"),
    flops_fraction: float = typer.Option(DEFAULT_FLOPS_FRACTION, "--flops-fraction"),
    as_json: bool = JSON,
) -> None:
    """Decode/prefill step times, TTFT, the step-time line, throughput knee, ceilings.

    Example:

    infbench plan roofline -m llama-3.1-8b -g h100 -b 32 --max-num-seqs 128
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        weights, kv_format = t.need_formats()
        r = roofline_report(
            t.need_model(),
            t.need_gpu(),
            tp,
            weights,
            kv_format,
            batch,
            context,
            prompt,
            max_num_batched_tokens,
            max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            bandwidth_fraction=bandwidth_fraction,
            flops_fraction=flops_fraction,
            block_size=block_size,
        )
    if as_json:
        render.emit_json(r, t, knee_batch=r.line.knee_batch,
                         throughput_limit=r.line.throughput_limit)
        return
    render.show(t, rows.roofline(r, t.need_model(), t.need_gpu(), weights.compute))


@app.command("claim")
def claim(
    tokens_per_s_per_user: float = typer.Argument(
        ..., help="Claimed decode tokens/s for one user."
    ),
    model: str = MODEL,
    gpu: str = GPU,
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    context: int = typer.Option(1024, "--context", "-c", help="Context of the decoding user."),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences decoding together."),
    as_json: bool = JSON,
) -> None:
    """Check a tokens/s-per-user claim against the bandwidth floor.

    Example:

    infbench plan claim 100 -m llama-3.1-70b -g h100 -tp 2
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        weights, kv_format = t.need_formats()
        r = check_claim(t.need_model(), t.need_gpu(), tokens_per_s_per_user, tp, weights,
                        kv_format, context, batch)
    if as_json:
        render.emit_json(r, t)
        return
    render.show(t, rows.claim(r, t.need_gpu()))


@app.command("allreduce")
def allreduce(
    size: float = typer.Option(1 << 20, "--size", "-s", help="Message size in bytes."),
    n: int = typer.Option(
        8, "--tensor-parallel-size", "-tp", "--n", "-n",
        help="Ranks in the all-reduce: the tensor-parallel size.",
    ),
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
    as_json: bool = JSON,
) -> None:
    """Ring and tree all-reduce times and TP all-reduce bytes per token.

    Example:

    infbench plan allreduce -g h100 -tp 8 -m llama-3.1-70b
    """
    with one_line_errors():
        require(size >= 0, f"size must be >= 0 bytes, got {size:g}")
        require(gpu is not None or bandwidth_gbps is not None, "give --gpu or --bandwidth")
        t = resolve(model, gpu)
        bw = bandwidth_gbps * 1e9 if bandwidth_gbps is not None else None
        r = allreduce_report(n, size, t.gpu, bw, alpha_us * 1e-6, t.model)
    if as_json:
        render.emit_json(r, t)
        return
    render.show(t, rows.allreduce(r, t.gpu, t.model, bandwidth_given=bw is not None))


@app.command("cost")
def cost(
    model: str = MODEL,
    gpu: str = GPU,
    price: float = typer.Option(..., "--price", help="USD per GPU-hour."),
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    batch: int = typer.Option(64, "--batch", "-b", help="Sequences decoding together."),
    context: int = typer.Option(2048, "--context", "-c", help="Context of each decoding sequence."),
    prompt: int = typer.Option(2048, "--prompt", "-p", help="Prompt tokens per request."),
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    input_tps: float = typer.Option(
        None, "--input-tps", help="Measured prefill tokens/s (else roofline)."
    ),
    output_tps: float = typer.Option(
        None, "--output-tps", help="Measured decode tokens/s (else roofline)."
    ),
    as_json: bool = JSON,
) -> None:
    """Price per million input and output tokens.

    Example:

    infbench plan cost -m llama-3.1-8b -g h100 --price 3.5 -b 64
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        weights, kv_format = t.need_formats()
        r = cost_report(
            t.need_model(),
            t.need_gpu(),
            price,
            tp,
            weights,
            kv_format,
            batch,
            context,
            prompt,
            chunk_tokens=max_num_batched_tokens,
            input_tokens_per_s=input_tps,
            output_tokens_per_s=output_tps,
        )
    if as_json:
        render.emit_json(r, t, weight_format=weights.name, kv_format=kv_format.name)
        return
    render.show(t, rows.cost(r, weights.name, kv_format.name))


@app.command("gpus")
def gpus(as_json: bool = JSON) -> None:
    """The GPU catalog with each figure's source, and the names each GPU answers to.

    Example:

    infbench plan gpus --json
    """
    if as_json:
        render.emit_json_list([
            render.plain(g) | {"aliases": list(g.aliases),
                               "alias_notes": {a: GPU_ALIAS_NOTES[a] for a in g.aliases
                                               if a in GPU_ALIAS_NOTES}}
            for g in GPUS
        ])
        return
    render.show(resolve(), rows.gpus(GPUS, GPU_ALIAS_NOTES), min_width=160)


@app.command("models")
def models(as_json: bool = JSON) -> None:
    """The model catalog (parameters derived from the shapes) and the names it answers to.

    Example:

    infbench plan models
    """
    entries = [(get_model(name), catalog_aliases(name)) for name in MODEL_NAMES]
    if as_json:
        render.emit_json_list([
            {
                "name": m.name,
                "total_params": m.params.total,
                "active_params": m.params.active,
                "layers": m.num_layers,
                "attention": "MLA" if m.mla else "GQA",
                "aliases": [{"name": a, "note": note} for a, note in aliases],
            }
            for m, aliases in entries
        ])
        return
    render.show(resolve(), rows.models(entries), min_width=140)
