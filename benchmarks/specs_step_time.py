"""Cost of `infbench.specs.roofline.step_time` per engine step.

Run from the repository root after `pip install -e .`:
    python benchmarks/specs_step_time.py   (writes benchmarks/results/specs_step_time.md)
The reference engine's sim executor calls step_time once per step with up to 256 decode
contexts, so it must stay in the tens of microseconds.
"""

from __future__ import annotations

import os
import platform
import timeit
from pathlib import Path

from infbench.specs import get_gpu, get_model
from infbench.specs.roofline import step_time

CASES = [
    ("llama-3.1-8b", "h100", 1, "256 decodes + 1 chunk"),
    ("gemma-2-9b", "h100", 1, "256 decodes (sliding window)"),
    ("deepseek-v3", "h200", 8, "256 decodes (MLA + MoE, tp=8)"),
]


def main() -> None:
    contexts = list(range(1000, 1256))
    lines = [
        "# step_time cost per call",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "",
        "| model | gpu | tp | step | µs per call |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, gpu, tp, what in CASES:
        m, g = get_model(name), get_gpu(gpu)
        chunks = [(512, 100)] if "chunk" in what else []

        def call(m=m, g=g, tp=tp, chunks=chunks) -> None:  # type: ignore[no-untyped-def]
            step_time(m, g, tp=tp, decode_contexts=contexts, prefill_chunks=chunks)

        call()  # builds the cached cost model
        n = 2000
        best = min(timeit.repeat(call, number=n, repeat=5)) / n * 1e6
        lines.append(f"| {name} | {gpu} | {tp} | {what} | {best:.1f} |")
    out = Path(__file__).parent / "results" / "specs_step_time.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
