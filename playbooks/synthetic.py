"""Documented synthetic timelines written with the store's own writer, for tests and the
benchmark: N requests decoding in lockstep, one token per engine step, with optional
engine-wide stalls every K steps and private stalls of chosen requests.

Timeline: step i ends at t_i = sum of step durations; every running request gets its token
at t_i (+ a per-request read offset of request_idx microseconds). Request r runs steps
[start_r, start_r + tokens) with start_r = (r // concurrency) * tokens (closed-loop waves).
"""

from __future__ import annotations

import numpy as np

from infbench.store import create_run, finish_run, new_run_id
from infbench.store.writer import insert_batch, to_arrow


def write_timeline(con, *, requests: int, concurrency: int, tokens: int, step_ms: float = 6.0,
                   stall_every: int = 0, stall_ms: float = 0.0,
                   private: dict[int, tuple[int, float]] | None = None, steps: bool = True) -> str:
    """Write one run; `private` maps request_idx -> (token index, extra ms) for a gap only that
    request sees (its tokens after that point shift later). Returns the run id."""
    run_id = new_run_id()
    create_run(con, run_id=run_id, config={"target": {"engine_args": []}}, target_url="synthetic",
               model="synthetic", endpoint="completions", t0_monotonic_ns=0)
    waves = -(-requests // concurrency)
    n_steps = waves * tokens + 1
    dur = np.full(n_steps, step_ms)
    if stall_every:
        dur[np.arange(n_steps) % stall_every == 0] += stall_ms
    ends_ns = (np.cumsum(dur) * 1e6).astype(np.int64)
    starts_ns = ends_ns - (dur * 1e6).astype(np.int64)
    r = np.repeat(np.arange(requests), tokens)
    k = np.tile(np.arange(tokens), requests)
    step = (r // concurrency) * tokens + k + 1
    t = ends_ns[step] + r * 1000
    for req, (at, extra) in (private or {}).items():
        t[(r == req) & (k >= at)] += int(extra * 1e6)
    chunks = {"request_idx": r.tolist(), "seq": k.tolist(), "t_ns": t.tolist(),
              "read_idx": k.tolist(), "nbytes": [8] * len(r), "content": [True] * len(r),
              "coalesced": [False] * len(r)}
    insert_batch(con, run_id, "chunks", to_arrow("chunks", chunks))
    first = t.reshape(requests, tokens)[:, 0]
    last = t.reshape(requests, tokens)[:, -1]
    send = ends_ns[(np.arange(requests) // concurrency) * tokens] - 1_000_000
    reqs = {"request_idx": list(range(requests)), "phase": ["measure"] * requests,
            "send_ns": send.tolist(), "intended_send_ns": send.tolist(),
            "first_content_ns": first.tolist(), "last_content_ns": last.tolist(),
            "last_chunk_ns": last.tolist(), "end_ns": last.tolist(),
            "prompt_tokens": [100] * requests, "output_tokens": [tokens] * requests}
    insert_batch(con, run_id, "requests", to_arrow("requests", reqs))
    if steps:
        s = {"step_id": list(range(n_steps)), "start_s": (starts_ns / 1e9).tolist(),
             "end_s": (ends_ns / 1e9).tolist(), "prefill_tokens": [0] * n_steps,
             "decode_seqs": [concurrency] * n_steps, "num_running": [concurrency] * n_steps,
             "num_waiting": [0] * n_steps, "preemptions": [0] * n_steps}
        insert_batch(con, run_id, "engine_steps", to_arrow("engine_steps", s))
    finish_run(con, run_id, status="completed")
    return run_id
