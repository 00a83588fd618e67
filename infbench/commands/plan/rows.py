"""What each `infbench plan` calculator shows: its result as sections of (term, value, how).

Pure functions from a typed result (and the specs it was computed for) to strings; printing
them is `render`'s job. Every figure comes from the result; nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infbench.specs import GpuSpec, ModelSpec
from infbench.specs.allreduce import AllReduceReport
from infbench.specs.claim import ClaimReport
from infbench.specs.cost import CostReport
from infbench.specs.gpus import GIB
from infbench.specs.kv import KvReport
from infbench.specs.memory import MemoryPlan
from infbench.specs.throughput import RooflineReport

TERMS = ("term", "value", "how")


@dataclass(frozen=True)
class Section:
    """One table: a title, column names and rows of literal strings."""

    title: str
    rows: Sequence[tuple[str, ...]]  # each row as many strings as there are columns
    columns: tuple[str, ...] = TERMS
    right: tuple[int, ...] = (1,)  # right-justified columns


Block = Section | str  # a str is a paragraph printed as it is


def size(n: float) -> str:
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):,.2f} MiB"
    if abs(n) >= 1 << 10:
        return f"{n / (1 << 10):,.2f} KiB"
    return f"{n:,.0f} B"


def duration(s: float) -> str:
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.3f} ms"
    return f"{s * 1e6:,.2f} µs"


def kv(r: KvReport, m: ModelSpec) -> list[Block]:
    per_layer = (
        f"{m.mla.kv_lora_rank} latent + {m.mla.qk_rope_head_dim} rope"
        if m.mla
        else f"2 (K,V) x {m.num_kv_heads} kv heads x {m.head_dim} head_dim"
    )
    per_gpu = (
        "MLA latent replicated on every rank"
        if m.mla
        else f"{r.kv_heads_per_gpu} kv head(s) per GPU, each duplicated {r.replication}x"
    )
    layers = f"{r.sliding_layers} sliding (window {r.window})" if r.window else "all full attention"
    bs = r.block_size
    rows = [
        ("attention", r.attention, f"{m.num_attention_heads} query heads, {m.num_kv_heads} kv heads"),
        ("elements / token / layer", f"{r.elements_per_token_per_layer:,}", per_layer),
        ("bytes / element", f"{r.bytes_per_element:g}", r.kv_format),
        ("layers", f"{r.num_layers}", layers),
        ("bytes / token", f"{r.bytes_per_token:,.0f}", "elements x bytes x layers (one copy)"),
        ("bytes / token / GPU", f"{r.bytes_per_token_per_gpu:,.0f}", per_gpu),
        ("context", f"{r.context:,}", "tokens"),
        ("bytes / sequence", size(r.bytes_per_sequence),
         "sum over layers of min(context, window) tokens"),
        ("bytes / sequence / GPU", size(r.bytes_per_sequence_per_gpu), f"tp={r.tp}"),
        ("bytes / sequence, all GPUs", size(r.bytes_per_sequence_all_gpus),
         "per GPU x tp (duplicates included)"),
        ("bytes / block / GPU", size(r.bytes_per_block_per_gpu), f"{bs} tokens x bytes/token/GPU"),
        ("blocks / sequence", f"{r.blocks_per_sequence:,}", f"ceil({r.context} / {bs})"),
        ("waste at this context", f"{r.waste_tokens} tokens", "unused slots in the last block"),
        ("waste bound", f"{r.waste_bound_tokens} tokens = {size(r.waste_bound_bytes_per_gpu)}/GPU",
         "block_size - 1 per sequence"),
    ]
    return [Section(f"KV cache: {r.model}, tp={r.tp}", rows)]


def memory(p: MemoryPlan, m: ModelSpec, g: GpuSpec, max_num_batched_tokens: int,
           max_num_seqs: int, context: int, concurrency: int) -> list[Block]:
    mark = {p.failing_term: " <- runs out"} if p.failing_term else {}
    tp = p.tp
    rows = [
        ("total memory", size(p.total_bytes), f"{g.name} datasheet"),
        ("x gpu_memory_utilization", f"{p.gpu_memory_utilization:g}", ""),
        ("= budget", size(p.budget_bytes), "what the engine may use"),
        ("- weights / GPU", size(p.weights_bytes) + mark.get("weights", ""),
         f"{m.params.total / 1e9:.2f} B params, {p.weight_format}, / tp={tp}"),
        ("- peak activation", size(p.activation_bytes) + mark.get("activation", ""),
         f"profile run: {max_num_batched_tokens} tokens, sampler for {max_num_seqs} seqs"),
        ("- non-torch memory", size(p.non_torch_bytes) + mark.get("non_torch", ""),
         "CUDA context" + (" + NCCL/all-reduce buffers" if tp > 1 else "")),
        ("- CUDA graphs", size(p.cuda_graph_bytes) + mark.get("cuda_graphs", ""),
         "0 with --enforce-eager"),
        ("= KV pool / GPU", size(p.remaining_bytes),
         "what is left for KV blocks" if p.remaining_bytes > 0
         else "negative: the terms above overrun the budget"),
        ("KV bytes / token / GPU", f"{p.kv_bytes_per_token:,.0f}", p.kv_format),
        ("blocks", f"{p.num_blocks:,}", f"pool // ({p.block_size} x bytes/token)"),
        ("KV tokens", f"{p.kv_tokens:,}", "blocks x block_size"),
        ("max_model_len", f"{p.max_model_len:,}",
         f"needs {size(p.needed_bytes)} / GPU" + mark.get("kv_cache", "")),
        ("fits", "yes" if p.fits else "NO",
         f"largest max_model_len that fits: {p.max_model_len_that_fits:,}"),
        ("max concurrency", f"{concurrency:,}", f"sequences of {context:,} tokens"),
    ]
    blocks: list[Block] = [Section(f"Memory plan: {p.model} on {tp} x {p.gpu}", rows)]
    if p.error:
        blocks.append(f"The engine would fail at startup with:\n  {p.error}")
    if p.fixes:
        blocks.append(Section(
            "Changes, each priced",
            [(f.change, "yes" if f.fits else "no", f"{f.kv_tokens:,}", f.cost) for f in p.fixes],
            columns=("change", "fits", "KV tokens / GPU", "cost"), right=()))
    return blocks


def roofline(r: RooflineReport, m: ModelSpec, g: GpuSpec, compute: str) -> list[Block]:
    d, pf, c, line = r.decode, r.prefill, r.ceilings, r.line
    bw = g.memory_bandwidth * r.bandwidth_fraction
    peak = g.peak_flops(compute) * r.flops_fraction
    rows = [
        ("bandwidth used", f"{bw / 1e12:.2f} TB/s",
         f"{g.memory_bandwidth / 1e12:g} TB/s datasheet x {r.bandwidth_fraction}"),
        ("FLOP/s used", f"{peak / 1e12:,.0f} TFLOP/s",
         f"{compute} dense peak x {r.flops_fraction}"),
        ("decode: weight bytes", size(d.weight_bytes), "read once per step, per GPU"),
        ("decode: KV bytes", size(d.kv_bytes), f"{r.batch} seqs x {r.context} tokens"),
        ("decode: memory time", duration(d.memory_s), "bytes / bandwidth"),
        ("decode: compute time", duration(d.compute_s), f"{d.flops / 1e9:,.1f} GFLOP / FLOP/s"),
        ("decode: all-reduce time", duration(d.comm_s),
         f"2 x {m.num_layers} ring all-reduces, tp={r.tp}"),
        ("decode step", duration(d.seconds), f"{d.bound}-bound"),
        ("tokens/s (all users)", f"{r.decode_tokens_per_s:,.0f}", "batch / step"),
        ("tokens/s per user", f"{r.decode_tokens_per_s_per_user:,.1f}", "1 / step"),
        (f"prefill {r.prompt_tokens} tokens", duration(pf.seconds),
         f"{pf.bound}-bound: memory {duration(pf.memory_s)}, compute {duration(pf.compute_s)}"),
        ("compute-bound from",
         f"{r.compute_bound_prompt_tokens:,} tokens" if r.compute_bound_prompt_tokens else "never",
         "prompt length where prefill FLOPs outlast its bytes"),
        ("TTFT estimate", duration(r.ttft_s),
         f"{r.ttft_chunks} chunk(s) of <= {r.chunk_tokens}, no queueing, no other load"),
        ("step line", f"{duration(line.intercept_s)} + {duration(line.slope_s)} x B",
         f"least squares over B in {list(line.batches)}, "
         f"max error {line.max_relative_error:.1%}"),
        ("throughput limit", f"{line.throughput_limit:,.0f} tok/s", "1 / slope"),
        ("knee", f"B = {line.knee_batch:,.0f}", "intercept / slope: half the throughput limit"),
        ("ceiling: KV capacity", f"{c.kv_capacity:,}",
         f"sequences of {r.context} tokens in the KV pool"),
        ("ceiling: compute ridge", f"{c.compute_ridge:,}" if c.compute_ridge else "never",
         "batch where decode turns compute-bound"),
        ("ceiling: max_num_seqs", f"{c.max_num_seqs:,}", "scheduler limit"),
        ("lowest ceiling", c.lowest, f"concurrency <= {c.limit:,}"),
    ]
    curve = [
        (str(pt.batch), duration(pt.step_s), f"{pt.tokens_per_s:,.0f}",
         f"{pt.tokens_per_s_per_user:,.1f}", pt.bound)
        for pt in r.curve
    ]
    title = (f"Roofline: {r.model} on {r.tp} x {r.gpu} "
             f"({r.weight_format} weights, {r.kv_format} KV)")
    return [
        Section(title, rows),
        Section("Decode throughput curve", curve,
                columns=("batch", "step", "tokens/s", "tokens/s/user", "bound"),
                right=(0, 1, 2, 3, 4)),
    ]


def claim(r: ClaimReport, g: GpuSpec) -> list[Block]:
    rows = [
        ("claimed", f"{r.claimed_tokens_per_s_per_user:,.1f} tok/s/user",
         f"batch {r.batch}, context {r.context}"),
        ("bytes per token / GPU", size(r.bytes_per_token), "weights + KV read per decoded token"),
        ("ceiling", f"{r.ceiling_tokens_per_s_per_user:,.1f} tok/s/user",
         f"{g.memory_bandwidth / 1e12:g} TB/s datasheet, 100% used"),
        ("typical", f"{r.typical_tokens_per_s_per_user:,.1f} tok/s/user",
         "at the default 0.8 of bandwidth"),
        ("verdict", r.verdict, ""),
    ]
    conditions = [
        (cnd.condition, f"{cnd.ceiling_tokens_per_s_per_user:,.1f}",
         "yes" if cnd.makes_it_true else "no")
        for cnd in r.conditions
    ]
    return [
        Section(f"Claim check: {r.model} on {r.tp} x {r.gpu} "
                f"({r.weight_format} weights, {r.kv_format} KV)", rows),
        Section("Unstated conditions", conditions,
                columns=("condition", "ceiling tok/s/user", "makes it true"), right=()),
    ]


def allreduce(r: AllReduceReport, g: GpuSpec | None, m: ModelSpec | None,
              bandwidth_given: bool) -> list[Block]:
    n = r.n
    rows = [
        ("B (per direction)", f"{r.bandwidth / 1e9:,.1f} GB/s",
         "given" if bandwidth_given or g is None
         else f"{g.name} {g.interconnect} / 2 x achievable fraction"),
        ("alpha", duration(r.alpha_s), "per step"),
        ("ring latency", duration(r.ring_latency_s), f"2(n-1) alpha = {2 * (n - 1)} alpha"),
        ("ring bandwidth", duration(r.ring_bandwidth_s), "2(n-1)/n S/B"),
        ("ring total", duration(r.ring_s), ""),
        ("tree latency", duration(r.tree_latency_s), "2 ceil(log2 n) alpha"),
        ("tree bandwidth", duration(r.tree_bandwidth_s),
         "2 S/B (pipelined double binary tree, modelled)"),
        ("tree total", duration(r.tree_s), ""),
        ("faster", r.faster, f"for S = {size(r.size_bytes)}"),
        ("ring: bandwidth dominates above", size(r.ring_bandwidth_dominates_above),
         "S = n alpha B"),
        ("tree: bandwidth dominates above", size(r.tree_bandwidth_dominates_above),
         "S = log2(n) alpha B"),
        ("ring beats tree above", size(r.ring_beats_tree_above),
         "S = n alpha B ((n-1) - log2 n)"),
    ]
    if m is not None and r.bytes_per_token is not None:
        rows += [
            ("all-reduces / token", f"{r.allreduces_per_token}", f"2 per layer x {m.num_layers}"),
            ("bytes / all-reduce / token", f"{r.message_bytes_per_token:,}",
             f"hidden {m.hidden_size} x 2 bytes"),
            ("bytes / token", size(r.bytes_per_token), "2 x layers x hidden x 2"),
            ("link bytes / token / GPU", size(r.link_bytes_per_token_per_gpu or 0),
             "x 2(n-1)/n (ring)"),
        ]
    return [Section(f"All-reduce over {n} ranks", rows)]


def cost(r: CostReport, weights: str, kv: str) -> list[Block]:
    rows = [
        ("replica price", f"${r.replica_price_per_s * 3600:,.2f}/h",
         f"${r.price_per_gpu_hour:g}/GPU-hour x {r.tp} GPU(s)"),
        ("input tokens/s", f"{r.input_tokens_per_s:,.0f}",
         f"{r.input_source}: prefill of {r.prompt_tokens}-token prompts"),
        ("output tokens/s", f"{r.output_tokens_per_s:,.0f}",
         f"{r.output_source}: decode, batch {r.batch} at context {r.context}"),
        ("$ / M input tokens", f"${r.usd_per_million_input:,.4f}",
         "price/s / input tokens/s x 1e6"),
        ("$ / M output tokens", f"${r.usd_per_million_output:,.4f}",
         "price/s / output tokens/s x 1e6"),
    ]
    return [Section(f"Cost: {r.model} on {r.tp} x {r.gpu} ({weights} weights, {kv} KV)", rows)]


def gpus(catalog: tuple[GpuSpec, ...], notes: dict[str, str]) -> list[Block]:
    rows = [
        (g.name, size(g.memory_bytes), f"{g.memory_bandwidth / 1e12:g}",
         f"{g.bf16_flops / 1e12:g}", f"{g.fp8_flops / 1e12:g}" if g.fp8_flops else "-",
         f"{g.interconnect} {g.interconnect_bandwidth / 1e9:g} GB/s", f"Gen{g.pcie_gen}",
         str(g.sm_count), ", ".join(g.aliases), g.source)
        for g in catalog
    ]
    choices = [(alias, g.name, notes[alias]) for g in catalog for alias in g.aliases
               if alias in notes]
    return [
        Section("GPU catalog (datasheet figures; dense peaks)", rows,
                columns=("gpu", "memory", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "link",
                         "PCIe", "SMs", "also named", "source"), right=()),
        Section("Names that leave a choice, and the catalog's", choices,
                columns=("name", "resolves to", "why"), right=()),
    ]


def models(entries: list[tuple[ModelSpec, tuple[tuple[str, str | None], ...]]]) -> list[Block]:
    rows = []
    stand_ins = []
    for m, aliases in entries:
        p = m.params
        attention = "MLA" if m.mla else ("GQA + sliding" if m.has_sliding_window else "GQA")
        rows.append((
            m.name, f"{p.total / 1e9:.2f} B", f"{p.active / 1e9:.2f} B", str(m.num_layers),
            str(m.hidden_size), f"{m.num_attention_heads}/{m.num_kv_heads}", attention,
            f"{m.moe.experts_per_token}/{m.moe.num_experts}" if m.moe else "-",
            ", ".join(a for a, note in aliases if note is None) or "-",
        ))
        stand_ins += [(alias, m.name, note) for alias, note in aliases if note is not None]
    return [
        Section("Model catalog (parameters derived from config.json shapes; any case, and the id without its organisation, resolve too)", rows,
                columns=("model", "total", "active", "layers", "hidden", "heads/kv",
                         "attention", "experts", "also named"), right=()),
        Section("Names of other checkpoints the catalog answers for", stand_ins,
                columns=("name", "resolves to", "why"), right=()),
    ]
