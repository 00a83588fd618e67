"""Documented synthetic timelines written with the store's own writer, for tests and the
benchmark: N requests decoding in lockstep, one token per engine step, with optional
engine-wide stalls (every K steps, by wall time like a timer, or at given steps), private stalls of chosen
requests, a client that reads late (coalesced reads), requests that fail, and a hung engine.

Timeline: step i ends at t_i = sum of step durations; every running request gets its token
at t_i (+ a per-request read offset of request_idx microseconds). Request r runs steps
[start_r, start_r + tokens) with start_r = (r // concurrency) * tokens (closed-loop waves).
"""

from __future__ import annotations

import numpy as np

from infbench.store import create_run, finish_run, new_run_id
from infbench.store.writer import insert_batch, to_arrow


def _durations(n_steps: int, step_ms: float, stall_every: int, stall_every_s: float,
               stall_ms: float, stall_at: list[int], slow: dict[int, float] | None = None) -> np.ndarray:
    dur = np.full(n_steps, step_ms)
    at = np.asarray(stall_at, dtype=np.int64)
    dur[at[at < n_steps]] += stall_ms
    for step, extra_ms in (slow or {}).items():
        dur[step] += extra_ms
    if stall_every:
        dur[np.arange(n_steps) % stall_every == 0] += stall_ms
    if stall_every_s:
        # A timer, as the reference engine's `every_s` fault: the first step that starts at
        # or after each due time stalls; due times are every_s apart from the start.
        start, due, every = 0.0, stall_every_s * 1e3, stall_every_s * 1e3
        for i in range(n_steps):
            if start >= due:
                dur[i] += stall_ms
                due += (int((start - due) // every) + 1) * every
            start += dur[i]
    return dur


def _reads(r: np.ndarray, t: np.ndarray, windows_ns: np.ndarray, hold_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """A client that does not read for `hold_ns` after each window start: what arrived
    meanwhile is read at the window's end, in one read. Returns (read time, read_idx)."""
    if not len(windows_ns):
        return t, np.arange(len(t))
    w = np.searchsorted(windows_ns, t, side="right") - 1
    held = (w >= 0) & (t < windows_ns[np.clip(w, 0, None)] + hold_ns)
    t_read = np.where(held, windows_ns[np.clip(w, 0, None)] + hold_ns, t)
    order = np.lexsort((t_read, r))
    rs, ts = r[order], t_read[order]
    new = np.ones(len(rs), dtype=bool)
    new[1:] = (rs[1:] != rs[:-1]) | (ts[1:] != ts[:-1])
    read_idx = np.empty(len(rs), dtype=np.int64)
    read_idx[order] = np.cumsum(new) - 1
    return t_read, read_idx


def write_timeline(con, *, requests: int, concurrency: int, tokens: int, step_ms: float = 6.0,
                   stall_every: int = 0, stall_every_s: float = 0.0, stall_ms: float = 0.0,
                   stall_at: list[int] | None = None, slow: dict[int, float] | None = None,
                   private: dict[int, tuple[int, float]] | None = None, steps: bool = True,
                   client_hold_every: int = 0, client_hold_ms: float = 0.0,
                   fail: dict[int, tuple[int, str, float]] | None = None,
                   hang_at_step: int = 0, timeout_s: float = 3.0,
                   metrics_every_s: float = 0.0, prefill: dict[int, int] | None = None) -> str:
    """Write one run; returns its run id.

    `stall_at`: step ids that stall by `stall_ms` (besides `stall_every`/`stall_every_s`).
    `slow`: step id -> extra ms, each its own (a long prefill step next to a stall, say).
    `private`: request_idx -> (token index, extra ms), a gap only that request sees (its
    later tokens shift later). `client_hold_every`/`client_hold_ms`: every N steps the client
    stops reading for that long, then reads what arrived in one read (coalesced).
    `fail`: request_idx -> (tokens it gets, error_class, seconds until it ends after its
    last token). `hang_at_step`: the engine never runs that step or any later one; requests
    still running time out `timeout_s` after their send, and each slot's next request is sent
    then and times out too. `metrics_every_s`: /metrics scrapes of running requests and
    tokens generated, as the engine reports them. `prefill`: step id -> the prefill tokens
    the step log records for it (0 elsewhere).
    """
    run_id = new_run_id()
    create_run(con, run_id=run_id, config={"target": {"engine_args": []}}, target_url="synthetic",
               model="synthetic", endpoint="completions", t0_monotonic_ns=0)
    waves = -(-requests // concurrency)
    n_steps = waves * tokens + 1
    dur = _durations(n_steps, step_ms, stall_every, stall_every_s, stall_ms, stall_at or [], slow)
    ends_ns = (np.cumsum(dur) * 1e6).astype(np.int64)
    starts_ns = ends_ns - (dur * 1e6).astype(np.int64)
    r = np.repeat(np.arange(requests), tokens)
    k = np.tile(np.arange(tokens), requests)
    step = (r // concurrency) * tokens + k + 1
    t = ends_ns[step] + r * 1000
    for req, (at, extra) in (private or {}).items():
        t[(r == req) & (k >= at)] += int(extra * 1e6)
    send = ends_ns[(np.arange(requests) // concurrency) * tokens] - 1_000_000
    end = np.full(requests, -1, dtype=np.int64)
    error: list[str | None] = [None] * requests
    keep = np.ones(len(r), dtype=bool)
    for req, (got, cls, after_s) in (fail or {}).items():
        keep &= ~((r == req) & (k >= got))
        last = t[(r == req) & (k == got - 1)]
        end[req] = (last[0] if len(last) else send[req]) + int(after_s * 1e9)
        error[req] = cls
    if hang_at_step:
        keep &= step < hang_at_step
        for req in range(requests):
            if step[req * tokens + tokens - 1] >= hang_at_step:
                if req >= concurrency and end[req - concurrency] >= 0:
                    send[req] = end[req - concurrency]  # the slot frees when its request times out
                end[req] = send[req] + int(timeout_s * 1e9)
                error[req] = "timeout"
    r, k, t = r[keep], k[keep], t[keep]
    windows = ends_ns[::client_hold_every] if client_hold_every else np.zeros(0, dtype=np.int64)
    t, read_idx = _reads(r, t, windows, int(client_hold_ms * 1e6))
    coalesced = np.zeros(len(r), dtype=bool)
    coalesced[1:] = (r[1:] == r[:-1]) & (read_idx[1:] == read_idx[:-1])
    chunks = {"request_idx": r.tolist(), "seq": k.tolist(), "t_ns": t.tolist(),
              "read_idx": read_idx.tolist(), "nbytes": [8] * len(r), "content": [True] * len(r),
              "coalesced": coalesced.tolist()}
    insert_batch(con, run_id, "chunks", to_arrow("chunks", chunks))
    big = np.iinfo(np.int64).max
    first = np.full(requests, big, dtype=np.int64)
    last = np.full(requests, -1, dtype=np.int64)
    np.minimum.at(first, r, t)
    np.maximum.at(last, r, t)
    end = np.where(end >= 0, end, last)
    got = np.bincount(r, minlength=requests)
    opt = ([None if v == big else int(v) for v in first], [None if v < 0 else int(v) for v in last])
    reqs = {"request_idx": list(range(requests)), "phase": ["measure"] * requests,
            "send_ns": send.tolist(), "intended_send_ns": send.tolist(),
            "first_content_ns": opt[0], "last_content_ns": opt[1], "last_chunk_ns": opt[1],
            "end_ns": end.tolist(), "error_class": error,
            "prompt_tokens": [100] * requests, "output_tokens": got.tolist()}
    insert_batch(con, run_id, "requests", to_arrow("requests", reqs))
    ran = np.arange(n_steps) < (hang_at_step or n_steps)
    if steps:
        s = {"step_id": np.arange(n_steps)[ran].tolist(), "start_s": (starts_ns[ran] / 1e9).tolist(),
             "end_s": (ends_ns[ran] / 1e9).tolist(),
             "prefill_tokens": [(prefill or {}).get(i, 0) for i in np.flatnonzero(ran)],
             "decode_seqs": [concurrency] * int(ran.sum()), "num_running": [concurrency] * int(ran.sum()),
             "num_waiting": [0] * int(ran.sum()), "preemptions": [0] * int(ran.sum())}
        insert_batch(con, run_id, "engine_steps", to_arrow("engine_steps", s))
    if metrics_every_s:
        at = np.arange(0, int(end.max()) + 1, int(metrics_every_s * 1e9), dtype=np.int64)
        running = ((send[None, :] <= at[:, None]) & (end[None, :] > at[:, None])).sum(axis=1)
        generated = np.searchsorted(np.sort(t), at, side="right")
        m = {"t_ns": np.repeat(at, 2).tolist(), "source": ["engine"] * (2 * len(at)),
             "name": ["vllm:num_requests_running", "vllm:generation_tokens_total"] * len(at),
             "labels": [""] * (2 * len(at)),
             "value": np.column_stack([running, generated]).ravel().astype(float).tolist()}
        insert_batch(con, run_id, "metric_samples", to_arrow("metric_samples", m))
    finish_run(con, run_id, status="completed_with_errors" if any(error) else "completed")
    return run_id
