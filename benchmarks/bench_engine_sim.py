"""Sim executor fidelity and engine overhead.

(a) Under load (64 and 256 running sequences, Llama-3.1-8B on H100-SXM), each decode step's
    measured duration (step log: end - start, the engine's own clock) against the roofline
    prediction for that exact batch (plus the fixed per-step overhead). Passes when the
    median and mean ratio are within 10% and at least 95% of the steps are.
(b) Scheduler + bookkeeping cost per step at 256 running sequences, executor time excluded:
    the step log's `host_s` (intake, schedule, update, output callbacks), measured with an
    instant executor in a tight loop and inside the real threaded run of (a). Passes when
    the median is <= 1 ms.

Run: `python benchmarks/bench_engine_sim.py` (about 30 s). Results go to
benchmarks/results/engine_sim.md with the machine description.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from machine_info import describe

from reference_engine.config import EngineConfig
from reference_engine.engine import Engine
from reference_engine.executor import StepBatch
from reference_engine.request import RequestOutput, SamplingParams

RESULTS = Path(__file__).resolve().parent / "results" / "engine_sim.md"
MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM"
PROMPT_LEN = 512


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def prompt(i: int) -> list[int]:
    return [32 + (i * 7 + j) % 90 for j in range(PROMPT_LEN)]


class NullExecutor:
    """Computes nothing, instantly: what remains of a step is the engine's own work."""

    name = "null"
    eos_token_id = 257
    block_size = 16

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks

    def execute(self, batch: StepBatch) -> dict[int, int]:
        return {w.seq_id: 97 for w in batch.seqs if w.sample}

    def memory_report(self) -> dict[str, int]:
        return {"weights": 0, "kv_pool": 0, "other": 0}


def fidelity(num_seqs: int, decode_tokens: int) -> dict[str, float]:
    config = EngineConfig(model=MODEL, gpu=GPU, max_num_seqs=max(num_seqs, 256),
                          step_overhead_ms=0.5, enable_prefix_caching=False)
    eng = Engine(config)
    executor = eng.executor
    predicted: dict[int, float] = {}
    real_execute = executor.execute

    def execute(batch: StepBatch) -> dict[int, int]:
        out = real_execute(batch)
        predicted[batch.step_id] = executor.last_prediction_s  # type: ignore[attr-defined]
        return out

    executor.execute = execute  # type: ignore[method-assign]
    done = threading.Semaphore(0)

    def on_output(out: RequestOutput) -> None:
        if out.finished:
            done.release()

    eng.start()
    try:
        for i in range(num_seqs):
            eng.add_request(f"r{i}", prompt(i), SamplingParams(max_tokens=decode_tokens,
                                                                ignore_eos=True), on_output)
        for _ in range(num_seqs):
            if not done.acquire(timeout=120):
                raise RuntimeError("benchmark requests did not finish in 120 s")
    finally:
        eng.stop()
    steps = [r for r in eng.steps_since(0)
             if r["prefill_tokens"] == 0 and r["decode_seqs"] == num_seqs]
    ratios = [(r["end"] - r["start"]) / predicted[r["step_id"]] for r in steps]
    return {
        "steps": len(steps),
        "predicted_ms": statistics.median(predicted[r["step_id"]] for r in steps) * 1e3,
        "measured_ms": statistics.median(r["end"] - r["start"] for r in steps) * 1e3,
        "ratio_mean": statistics.fmean(ratios), "ratio_p50": statistics.median(ratios),
        "ratio_min": min(ratios), "ratio_p99": pct(ratios, 0.99), "ratio_max": max(ratios),
        "within_10pct": sum(abs(x - 1) <= 0.10 for x in ratios) / len(ratios),
        "host_p50_ms": statistics.median(r["host_s"] for r in steps) * 1e3,
        "host_p99_ms": pct([r["host_s"] for r in steps], 0.99) * 1e3,
    }


def bookkeeping(num_seqs: int, steps: int) -> dict[str, float]:
    config = EngineConfig(model=MODEL, gpu=GPU, max_num_seqs=num_seqs, block_size=16)
    eng = Engine(config, executor=NullExecutor(num_blocks=num_seqs * 64))
    for i in range(num_seqs):
        eng.add_request(f"r{i}", prompt(i), SamplingParams(max_tokens=steps + 100,
                                                            ignore_eos=True), lambda o: None)
    while (rec := eng.step()) is not None and rec["prefill_tokens"]:
        pass  # prefill phase
    host: list[float] = []
    wall: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        rec = eng.step()
        wall.append(time.perf_counter() - t0)
        assert rec is not None and rec["decode_seqs"] == num_seqs
        host.append(rec["host_s"])
    return {"steps": steps, "host_p50_ms": statistics.median(host) * 1e3,
            "host_mean_ms": statistics.fmean(host) * 1e3, "host_p90_ms": pct(host, 0.9) * 1e3,
            "host_p99_ms": pct(host, 0.99) * 1e3, "step_p50_ms": statistics.median(wall) * 1e3}


def machine() -> str:
    return describe()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decode-tokens", type=int, default=150)
    ap.add_argument("--bookkeeping-steps", type=int, default=300)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    desc = machine()
    fid = {n: fidelity(n, args.decode_tokens) for n in (64, 256)}
    book = bookkeeping(256, args.bookkeeping_steps)
    fid_ok = all(abs(f["ratio_p50"] - 1) <= 0.1 and abs(f["ratio_mean"] - 1) <= 0.1
                 and f["within_10pct"] >= 0.95 for f in fid.values())
    book_ok = book["host_p50_ms"] <= 1.0
    lines = [
        "# Sim executor fidelity and engine overhead",
        "",
        f"Command: `python benchmarks/bench_engine_sim.py` · {time.strftime('%Y-%m-%d %H:%M')}",
        f"Machine: {desc}",
        f"Model {MODEL} on {GPU}, TP 1, bf16, prompt {PROMPT_LEN} tokens, "
        f"{args.decode_tokens} decode tokens per request, step overhead 0.5 ms.",
        "",
        "## (a) Decode step duration vs roofline prediction",
        "",
        "| running seqs | steps | predicted p50 ms | measured p50 ms | ratio p50 | ratio mean | "
        "ratio min | ratio p99 | ratio max | steps within 10% | host p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, f in fid.items():
        lines.append(
            f"| {n} | {f['steps']} | {f['predicted_ms']:.2f} | {f['measured_ms']:.2f} | "
            f"{f['ratio_p50']:.3f} | {f['ratio_mean']:.3f} | {f['ratio_min']:.3f} | "
            f"{f['ratio_p99']:.3f} | {f['ratio_max']:.3f} | {f['within_10pct']:.1%} | "
            f"{f['host_p50_ms']:.3f} |")
    lines += [
        "",
        f"Verdict: {'PASS' if fid_ok else 'FAIL'} (median and mean ratio within 10%, "
        ">= 95% of steps within 10%).",
        "",
        "Ratio = measured step (step log end - start) / (roofline + 0.5 ms overhead) for steps",
        "whose batch is every sequence decoding. The median shows the systematic error; the",
        "tail is the OS descheduling the engine thread while other jobs share the 2 cores",
        "(see the load average above): compare runs on a quiet machine.",
        "",
        "## (b) Scheduler + bookkeeping per step at 256 running sequences (executor excluded)",
        "",
        "| steps | host p50 ms | host mean ms | host p90 ms | host p99 ms | whole step p50 ms |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {book['steps']} | {book['host_p50_ms']:.3f} | {book['host_mean_ms']:.3f} | "
        f"{book['host_p90_ms']:.3f} | {book['host_p99_ms']:.3f} | {book['step_p50_ms']:.3f} |",
        "",
        f"Verdict: {'PASS' if book_ok else 'FAIL'} (median <= 1 ms). `host_s` covers intake,",
        "scheduling, applying sampled tokens, KV bookkeeping and the 256 output callbacks; the",
        "threaded run in (a) reports the same quantity as 'host p50' (cold caches after each",
        "sleep make it somewhat higher than this tight loop).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text)
    return 0 if fid_ok and book_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
