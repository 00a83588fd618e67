"""`infbench plan specdec`: tokens per step from acceptance and K against the roofline's step
times, per batch size, and the K that maximises throughput at each (infbench.specs.specdec)."""

from __future__ import annotations

import typer

from infbench.commands.plan import render
from infbench.commands.plan.inputs import (
    DTYPE,
    GPU,
    JSON,
    KV_DTYPE,
    MODEL,
    PP,
    TP,
    one_line_errors,
    require,
    resolve,
    single_stage,
)
from infbench.commands.plan.rows import Block, Section, duration
from infbench.commands.plan.verbs import app
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION
from infbench.specs.specdec import SpecPlan, plan_specdec

DEFAULT_BATCHES = "1,2,4,8,16,32,64,128,256"


def _batches(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    require(bool(values) and min(values) >= 1,
            f"--batch-sizes: expected batch sizes >= 1 like 1,8,64, got {text!r}")
    return values


def _rows(p: SpecPlan) -> list[Block]:
    table = Section(
        f"Speculation with K={p.k} at acceptance {p.alpha:g}: {p.expected_tokens:.3f} tokens per "
        f"verified step (context {p.context})",
        [(str(r.batch), duration(r.plain_step_s), duration(r.spec_step_s), f"{r.plain_tok_s:,.0f}",
          f"{r.spec_tok_s:,.0f}", f"x{r.speedup:.2f}", str(r.best_k), f"{r.best_tok_s:,.0f}")
         for r in p.rows],
        columns=("batch", "step, K=0", f"step, K={p.k}", "tok/s, K=0", f"tok/s, K={p.k}",
                 "speed-up", "best K", "tok/s, best K"),
        right=(0, 1, 2, 3, 4, 5, 6, 7))
    if p.costs_above is None:
        verdict = f"K={p.k} pays at every batch size given (up to {p.rows[-1].batch})."
    else:
        verdict = (f"K={p.k} costs throughput from batch {p.costs_above}: verifying K+1 tokens per "
                   "sequence makes the step compute-bound there; the best K column says what to "
                   "run instead (0: no speculation).")
    return [table, "E(α, K) = (1 − α^(K+1)) / (1 − α); step times from the roofline, K draft "
                   "positions at the draft cost each, plus the fixed overhead.", verdict]


@app.command("specdec")
def specdec(
    model: str = MODEL,
    gpu: str = GPU,
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    acceptance: float = typer.Option(..., "--acceptance", "-a", help="α: the chance a draft "
                                     "token is accepted given the one before it was "
                                     "(`diagnose specdec` gives it per position)."),
    k: int = typer.Option(3, "--num-speculative-tokens", "-k", help="Draft tokens per step."),
    context: int = typer.Option(1024, "--context", "-c", help="Context of each sequence."),
    batch_sizes: str = typer.Option(DEFAULT_BATCHES, "--batch-sizes",
                                    help="Batch sizes to price, comma-separated."),
    draft_ms: float = typer.Option(0.0, "--draft-ms", help="Cost of one draft position (0 for "
                                   "n-gram lookup; a draft model's forward pass)."),
    step_overhead_ms: float = typer.Option(0.0, "--step-overhead-ms",
                                           help="Fixed host cost of every step."),
    max_k: int = typer.Option(8, "--max-k", help="Largest K tried for the best K."),
    bandwidth_fraction: float = typer.Option(DEFAULT_BANDWIDTH_FRACTION, "--bandwidth-fraction"),
    flops_fraction: float = typer.Option(DEFAULT_FLOPS_FRACTION, "--flops-fraction"),
    as_json: bool = JSON,
) -> None:
    """Speculative decoding's tokens per step against its verification cost, per batch size.

    Example:

    infbench plan specdec -m llama-3.1-8b -g a100 -a 0.7 -k 4 --batch-sizes 1,16,64,128,256
    """
    with one_line_errors():
        single_stage(pp)
        require(max_k >= 1, f"--max-k: {max_k} must be >= 1")
        batches = _batches(batch_sizes)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        weights, kv_format = t.need_formats()
        p = plan_specdec(t.need_model(), t.need_gpu(), tp=tp, weight_format=weights,
                         kv_format=kv_format, alpha=acceptance, k=k, context=context,
                         batches=batches, draft_s=draft_ms / 1e3,
                         overhead_s=step_overhead_ms / 1e3, max_k=max_k,
                         bandwidth_fraction=bandwidth_fraction, flops_fraction=flops_fraction)
    if as_json:
        render.emit_json(p, t)
        return
    render.show(t, _rows(p))
