"""Tensor parallelism on the torch executor: what N real ranks cost on this machine.

The same greedy requests (same prompts and output length, EOS ignored) run through the real
engine (scheduler, block pool, executor) at TP=1, 2 and 4; at TP>1 the ranks are real
processes joined by gloo. Measured per TP: start-up (spawning and joining the ranks),
wall time and output tokens/s, the median step, collectives per step and rank 0's median
all-reduce. The generated tokens must be identical at every TP; the benchmark fails loudly
if they are not. Results go to benchmarks/results/tp_engine.md with the machine.

    python benchmarks/bench_tp_engine.py [--requests 8 --prompt-len 32 --output-len 32]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_engine.config import EngineConfig  # noqa: E402
from reference_engine.engine import Engine  # noqa: E402
from reference_engine.request import SamplingParams  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "tp_engine.md"
RUN_TIMEOUT_S = 600.0


def run(tp: int, prompts: list[list[int]], output_len: int) -> tuple[dict[str, float], dict[int, list[int]]]:
    t0 = time.perf_counter()
    eng = Engine(EngineConfig(executor="torch", tensor_parallel_size=tp, num_gpu_blocks=256,
                              max_model_len=512, max_num_seqs=len(prompts)))
    startup = time.perf_counter() - t0
    try:
        outs: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
        for i, p in enumerate(prompts):
            eng.add_request(f"r{i}", p, SamplingParams(max_tokens=output_len, temperature=0.0,
                                                       ignore_eos=True),
                            lambda o, i=i: outs[i].extend(o.new_token_ids))
        t0 = time.perf_counter()
        while eng.scheduler.has_work() or eng._inbox:
            if time.perf_counter() - t0 > RUN_TIMEOUT_S:
                raise RuntimeError(f"TP={tp}: the run did not finish in {RUN_TIMEOUT_S:.0f} s")
            eng.step()
        wall = time.perf_counter() - t0
        steps = eng.steps_since(0)
        row = {"startup_s": startup, "wall_s": wall,
               "tokens_per_s": sum(map(len, outs.values())) / wall,
               "median_step_ms": statistics.median(r["end"] - r["start"] for r in steps) * 1e3,
               "collectives_per_step": 0.0, "median_all_reduce_ms": float("nan")}
        log = getattr(eng.executor, "log", None)
        if log is not None:
            entries = log.entries()
            row["collectives_per_step"] = len(entries) / len(steps)
            row["median_all_reduce_ms"] = statistics.median(
                e["duration_ms"] for e in entries if e["profiling_name"].endswith("all_reduce"))
    finally:
        eng.stop()
    return row, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(256) for _ in range(args.prompt_len)] for _ in range(args.requests)]
    machine = describe()
    rows, reference = {}, None
    for tp in (1, 2, 4):
        rows[tp], outs = run(tp, prompts, args.output_len)
        if reference is None:
            reference = outs
        elif outs != reference:
            raise SystemExit(f"TP={tp} generated different tokens than TP=1")
        print(f"TP={tp}: {rows[tp]}", flush=True)
    lines = [
        "# Tensor parallelism on the torch executor (real gloo ranks)", "",
        f"Machine: {machine}", "",
        f"{args.requests} greedy requests, prompt {args.prompt_len} tokens, output "
        f"{args.output_len} tokens, tiny-llama (2 layers, hidden 128), all submitted at once; "
        "identical tokens at every TP (checked). The host is shared: at a high load average "
        "each process gets a slice of two cores, so N rank processes get about N slices and "
        "a larger TP can look faster; read the start-up and all-reduce columns as the cost of "
        "the ranks, not the wall time as a speed-up.", "",
        "| TP | start-up s | wall s | output tok/s | median step ms | collectives/step | "
        "median all-reduce ms (rank 0) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for tp, r in rows.items():
        lines.append(f"| {tp} | {r['startup_s']:.1f} | {r['wall_s']:.2f} | "
                     f"{r['tokens_per_s']:.0f} | {r['median_step_ms']:.1f} | "
                     f"{r['collectives_per_step']:.0f} | {r['median_all_reduce_ms']:.2f} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print(RESULTS.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
