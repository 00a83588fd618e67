"""`infbench plan compare`: two GPUs for the same planned workload — the spec-sheet figures
that differ, which of them this workload's regime depends on, and the ratio the roofline
expects for each part (infbench.specs.compare)."""

from __future__ import annotations

import typer

from infbench.commands.plan import render
from infbench.commands.plan.inputs import (
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
    Target,
    one_line_errors,
    resolve,
    single_stage,
)
from infbench.commands.plan.rows import Block, Section
from infbench.commands.plan.verbs import app
from infbench.specs.compare import GpuComparison, compare_gpus
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION, resolve_gpu


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "none (BF16 peak)" if unit == "TFLOP/s" else "not published"
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"
    return f"{text} {unit}".strip()


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"x{x:.2f}"


def _rows(c: GpuComparison) -> list[Block]:
    a, b = c.gpu_a, c.gpu_b
    specs = Section(
        f"Spec sheets: {a} (a) and {b} (b); * = this workload's regime depends on it",
        [(("* " if r.governs else "  ") + r.figure, _num(r.a, r.unit), _num(r.b, r.unit),
          _ratio(r.ratio), r.moves) for r in c.specs],
        columns=("figure", a, b, "b / a", "what it moves"), right=(1, 2, 3))
    parts = Section(
        f"{c.model}, tp={c.tp}, weights {c.weight_format}, KV {c.kv_format}: the roofline on each",
        [(r.part, r.bound, r.depends_on, _num(r.a, r.unit), _num(r.b, r.unit), _ratio(r.expected))
         for r in c.regimes],
        columns=("part", "bound on a", "depends on", a, b, "b vs a"), right=(3, 4, 5))
    moved = [r for r in c.specs if r.governs and r.ratio is not None and abs(r.ratio - 1) > 0.005]
    if c.b_slower_anywhere:
        worse = [r.part for r in c.regimes if r.expected is not None and r.expected < 0.995]
        verdict = (f"On the spec sheets {b} is expected slower or smaller than {a} for: "
                   + "; ".join(worse) + ". Measured the same way, that much is the hardware.")
    else:
        verdict = (f"On the spec sheets {b} is expected no slower than {a} for any part of this "
                   "workload" + (" (" + ", ".join(f"{r.figure} {_ratio(r.ratio)}" for r in moved)
                                 + ")" if moved else "") +
                   f". A measured {b} slower than {a} on the same configuration is not what the "
                   "spec sheets say: check what they do not list — kernel tuning tables keyed "
                   "on the device name (`infbench diagnose startup LOG` names the ones the "
                   "engine did not find), clocks and power caps under load (`nvidia-smi -q -d "
                   "CLOCK,POWER`), and the engine and driver versions on each.")
    unfit = [g for g, ok in zip((a, b), c.fits, strict=True) if not ok]
    if unfit:
        verdict = (f"{' and '.join(unfit)}: not one {c.context}-token sequence fits beside the "
                   f"weights at tp={c.tp} (`infbench plan memory` shows the budget); its speed rows "
                   "are what it would run at if it fit. Raise -tp or quantize to compare them "
                   "serving. " + verdict)
    return [specs, parts,
            "b vs a: b's throughput, speed-up or capacity over a's (above x1.00, b is better). "
            "The same bandwidth and FLOPS fractions apply to both GPUs, so each ratio is the spec "
            "sheets' own.", verdict]


@app.command("compare")
def compare(
    model: str = MODEL,
    gpu: str = GPU,
    compare_gpu: str = typer.Option(..., "--compare-gpu", help="The GPU to compare --gpu with "
                                    "(b in the tables; ratios are b over a)."),
    tp: int = TP,
    pp: int = PP,
    dtype: str = DTYPE,
    kv_cache_dtype: str = KV_DTYPE,
    batch: int = typer.Option(32, "--batch", "-b", help="Decoding sequences per step."),
    context: int = typer.Option(2048, "--context", "-c", help="Context of each decoding sequence."),
    prompt: int = typer.Option(2048, "--prompt", "-p", help="Prompt tokens for prefill and TTFT."),
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = MAX_NUM_SEQS,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    bandwidth_fraction: float = typer.Option(DEFAULT_BANDWIDTH_FRACTION, "--bandwidth-fraction"),
    flops_fraction: float = typer.Option(DEFAULT_FLOPS_FRACTION, "--flops-fraction"),
    as_json: bool = JSON,
) -> None:
    """Two GPUs, one workload: the spec-sheet differences that move it, and the ratio expected.

    Example:

    infbench plan compare -m llama-3.1-8b -g h100 --compare-gpu h200 -b 64
    """
    with one_line_errors():
        single_stage(pp)
        t = resolve(model, gpu, dtype, kv_cache_dtype)
        other, other_resolved = resolve_gpu(compare_gpu)
        weights, kv_format = t.need_formats()
        c = compare_gpus(t.need_model(), t.need_gpu(), other, tp, weights, kv_format, batch,
                         context, prompt, max_num_batched_tokens, max_num_seqs,
                         gpu_memory_utilization, bandwidth_fraction, flops_fraction)
    if as_json:
        render.emit_json(c, t, compare_gpu=render.plain(other_resolved),
                         spec_ratios={r.figure: r.ratio for r in c.specs})
        return
    shown = Target((*t.resolved, other_resolved), t.model, t.gpu, t.weights, t.kv)
    render.show(shown, _rows(c), min_width=150)
