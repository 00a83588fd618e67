"""Speculative decoding in the bundled engine: where it stops paying, measured against the
roofline's prediction (`infbench plan specdec`), and what the drafter costs the host.

(a) For each case, 96 greedy requests with repetitive prompts and long-tailed output lengths
    are added at once to an in-process sim engine (the batch drains from 96 to 1), with and
    without n-gram speculation. From the engine's step log (decode-only steps), tokens per
    second per batch-size bucket (powers of two) on both; the measured crossover is the
    first bucket from which speculation's throughput stays below the plain run's. The
    prediction is `plan_specdec` at the measured per-token acceptance α (the counters'
    acceptance at position 0 given a draft: vLLM's per-position rate) and the mean context.
    Reported, not asserted: the sim adds per-step costs the plan leaves out (kernel floor,
    steps without drafts).
(b) The scheduler's and drafter's host time per step (`host_s` in the step log) with and
    without speculation in the same runs, at the largest batch.

Run: `python benchmarks/bench_specdec.py` (about 90 s). Results go to
benchmarks/results/specdec.md with the machine description.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

from machine_info import describe

from infbench.specs import get_gpu, get_model
from infbench.specs.specdec import plan_specdec
from reference_engine.config import EngineConfig
from reference_engine.engine import Engine
from reference_engine.request import RequestOutput, SamplingParams

RESULTS = Path(__file__).resolve().parent / "results" / "specdec.md"
N = 96
PROMPT = 300
# (model, gpu, dtype, K, sim copy probability)
CASES = [("meta-llama/Llama-3.1-8B", "A100-80GB-SXM", "fp8", 10, 0.8),
         ("Qwen/Qwen2.5-3B", "A100-80GB-SXM", "bf16", 6, 0.9)]


def bucket(b: int) -> int:
    return 1 << (b.bit_length() - 1)


def lengths() -> list[int]:
    # a deterministic long tail (lognormal-like): most short, a few long
    return [int(60 * 1.035 ** ((i * 37) % N)) for i in range(N)]


def run(model: str, gpu: str, dtype: str, spec: dict | None, copy: float) -> tuple[list[dict], Engine]:
    cfg = EngineConfig(executor="sim", model=model, gpu=gpu, dtype=dtype, max_model_len=4096,
                       sim_copy_probability=copy, seed=5, speculative_config=spec)
    engine = Engine(cfg)
    done = threading.Event()
    left = [N]

    def on_output(out: RequestOutput) -> None:
        if out.finished:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    engine.start()
    for i, n in enumerate(lengths()):
        words = f"item {i} of the list: copy this line again; "
        prompt = list((words * (PROMPT // len(words) + 1)).encode()[:PROMPT])
        engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=n, temperature=0.0,
                                                           ignore_eos=True), on_output)
    done.wait(300)
    time.sleep(0.05)
    steps = engine.steps_since(0)
    engine.stop()
    return steps, engine


def per_bucket(steps: list[dict]) -> dict[int, float]:
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s in steps:
        if s["prefill_tokens"] == 0 and s["decode_seqs"] > 0:
            a = acc[bucket(s["decode_seqs"])]
            a[0] += s["decode_seqs"] + s.get("spec_accepted_tokens", 0)
            a[1] += s["end"] - s["start"]
    return {b: t / d for b, (t, d) in acc.items() if d > 0}


def crossover(ratios: dict[int, float]) -> int | None:
    for b in sorted(ratios):
        if all(r < 1.0 for c, r in ratios.items() if c >= b):
            return b
    return None


def main() -> None:
    lines = ["# Speculative decoding: measured crossover against `plan specdec`", "",
             f"Command: `python benchmarks/bench_specdec.py` · {time.strftime('%Y-%m-%d %H:%M')}",
             "", f"Machine: {describe()}", "", "HEADLINE", "",
             "| case | α (pos 0) | mean accepted length | ratio per bucket (spec / plain) | "
             "measured from | predicted from | host ms/step at 64+ plain / spec |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    found: list[tuple[int | None, int | None]] = []
    extra: list[float] = []
    for model, gpu, dtype, k, copy in CASES:
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2,
                "prompt_lookup_max": 3}
        t0 = time.monotonic()
        plain_steps, _ = run(model, gpu, dtype, None, copy)
        spec_steps, engine = run(model, gpu, dtype, spec, copy)
        c = engine.spec_counters()
        assert c is not None and c.num_drafts > 0
        alpha = c.accepted_per_pos[0] / c.num_drafts
        base, fast = per_bucket(plain_steps), per_bucket(spec_steps)
        ratios = {b: fast[b] / base[b] for b in sorted(base.keys() & fast.keys())}
        context = PROMPT + statistics.mean(lengths()) // 2
        plan = plan_specdec(get_model(model), get_gpu(gpu), weight_format=dtype, kv_format="bf16",
                            alpha=alpha, k=k, context=int(context), batches=sorted(ratios),
                            overhead_s=0.5e-3)

        def host(steps: list[dict]) -> float:
            return statistics.median(s["host_s"] for s in steps if s["decode_seqs"] >= 64) * 1e3

        found.append((crossover(ratios), plan.costs_above))
        extra.append(host(spec_steps) - host(plain_steps))
        lines.append(
            f"| {model.split('/')[-1]} {dtype} on {gpu}, K={k}, copy {copy} | {alpha:.2f} | "
            f"{1 + c.num_accepted_tokens / c.num_drafts:.2f} | "
            + ", ".join(f"{b}: {r:.2f}" for b, r in ratios.items())
            + f" | {crossover(ratios)} | {plan.costs_above} | "
            f"{host(plain_steps):.2f} / {host(spec_steps):.2f} |")
        print(lines[-1], f"({time.monotonic() - t0:.0f} s)", flush=True)
    agree = sum(1 for m, p in found if m == p)
    lines[lines.index("HEADLINE")] = (
        f"The batch bucket from which speculation costs throughput, measured on the sim's step "
        f"log, is the one `plan specdec` predicts (or both say it pays up to the largest batch) "
        f"in **{agree} of {len(found)}** cases; the "
        f"n-gram drafter and verification bookkeeping cost the host **{max(extra):.2f} ms per "
        f"step** more at 64+ sequences (median; the Python engine's, not a GPU engine's).")
    lines += ["", "The crossover is the first power-of-two bucket from which speculation's "
              "throughput stays below the plain run's (step log, decode-only steps). The "
              "prediction is plan specdec at the measured α, K and mean context with a 0.5 ms "
              "step overhead; the sim adds a kernel floor per step and runs steps without "
              "drafts, which the plan does not price."]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
