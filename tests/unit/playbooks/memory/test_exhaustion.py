"""KV exhaustion from a synthetic step log with a known truth: which requests held what when
the pool filled, and the cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import create_run
from infbench.store.writer import insert_batch, to_arrow
from playbooks.memory import diagnose_memory
from tests.support.stores import new_store

MS = 1_000_000


def _run(con, prompt: int, output: int, n: int, blocks: int) -> None:  # noqa: ANN001
    """n requests sent at 0 ms, one token every 10 ms after a 20 ms prefill; the step log's
    pool fills at step 5 (t = 50 ms) and preempts there."""
    create_run(con, run_id="x", config={"arrivals": {"concurrency": n}}, target_url="http://127.0.0.1:1",
               model="m", endpoint="completions", t0_monotonic_ns=0)
    end = (20 + 10 * output) * MS
    insert_batch(con, "x", "requests", to_arrow("requests", {
        "request_idx": list(range(n)), "phase": ["measure"] * n, "send_ns": [0] * n,
        "end_ns": [end] * n, "prompt_tokens": [prompt] * n, "output_tokens": [output] * n,
        "status_code": [200] * n}))
    chunks = [(r, k, (20 + 10 * k) * MS) for r in range(n) for k in range(output)]
    insert_batch(con, "x", "chunks", to_arrow("chunks", {
        "request_idx": [c[0] for c in chunks], "seq": [c[1] for c in chunks],
        "t_ns": [c[2] for c in chunks], "read_idx": [c[1] for c in chunks],
        "nbytes": [10] * len(chunks), "content": [True] * len(chunks),
        "coalesced": [False] * len(chunks)}))
    steps = list(range(1, 11))
    used = [min(blocks, blocks * s // 5) for s in steps]
    insert_batch(con, "x", "engine_steps", to_arrow("engine_steps", {
        "step_id": steps, "start_s": [s * 0.01 for s in steps], "end_s": [s * 0.01 + 0.01 for s in steps],
        "num_running": [n] * 10, "num_waiting": [0] * 4 + [2] * 6,
        "preemptions": [0, 0, 0, 0, 1, 0, 1, 0, 0, 0], "kv_blocks_used": used,
        "kv_blocks_total": [blocks] * 10, "decode_seqs": [n] * 10}))


@pytest.mark.parametrize(("prompt", "output", "n", "blocks", "filled_by", "cap"), [
    (40, 200, 6, 64, "outputs", 4),     # prompts need 6 x 3 = 18 of 64 blocks: outputs filled it
    (500, 30, 8, 200, "prompts", 5),    # prompts need 8 x 32 = 256 of 200 blocks
])
def test_what_filled_the_pool_and_the_cap(tmp_path: Path, prompt: int, output: int, n: int,
                                          blocks: int, filled_by: str, cap: int) -> None:
    con = new_store(tmp_path / "x.duckdb")
    try:
        _run(con, prompt, output, n, blocks)
        d = diagnose_memory(con, "x")
    finally:
        con.close()
    x = d.context["kv_exhaustion"]
    assert x["filled_by"] == filled_by
    assert x["t_s"] == pytest.approx(0.05)
    assert x["preemptions_after_fill"] == 2
    assert x["cap"] == cap == blocks // -(-(prompt + output) // 16)
    assert x["observed_concurrency"] == n
    f = next(f for f in d.findings if f.verdict == "kv_cache_exhausted")
    held = next(e for e in f.evidence if e.name == "what_filled_it").values
    # At 50 ms every request has its prompt and 4 tokens (at 20, 30, 40, 50 ms).
    assert held == {"in_flight": n, "prompt_tokens": n * prompt, "prompt_blocks": n * -(-prompt // 16),
                    "pool_blocks": blocks, "output_tokens_so_far": n * 4}
