"""Synthetic runs for gate tests: a small continuous-batching server simulated request by
request, with the noise real runs have.

- The workload (what a seed fixes, shared by every run made with it): prompt and output
  lengths from a mix (lognormal, heavy-tailed or uniform) and, for an open loop, the arrival
  schedule. Runs of one workload carry the same fingerprint and pair request by request.
- The server: one global step clock; every request in flight gets a token per step, so
  requests that overlap share the same slow steps. Steps jitter (lognormal), a share of them
  stall (a neighbour took the CPU: exponential extra time), prefill costs per prompt token.
- Run-to-run drift: each run's machine speed is off by a lognormal factor (small).
- The client stamps every event with a little jitter.

A regression is a factor on decode steps (`decode`), on prefill (`prefill`), on the stall
share (`stalls`), or rare long pauses (`hiccups`, a share of steps: only the requests in
flight during one get slower, so the tail moves and the median hardly does).
"""

from __future__ import annotations

import dataclasses
import heapq
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from infbench.gate.samples import Gaps, RunSamples
from infbench.store import RunRow


@dataclass(frozen=True)
class Workload:
    prompt: np.ndarray  # tokens, in request order
    output: np.ndarray  # tokens (>= 1)
    arrival_s: np.ndarray | None  # open loop: intended send times; None: closed loop
    concurrency: int
    fingerprint: str
    config: dict = field(default_factory=dict)


def make_workload(n: int, seed: int, *, lengths: str = "lognormal", concurrency: int = 16,
                  rate: float | None = None) -> Workload:
    """`n` requests; `rate` (requests/s) makes it an open loop with Poisson arrivals."""
    rng = np.random.default_rng([seed, 1])
    if lengths == "lognormal":
        prompt = rng.lognormal(np.log(200), 0.6, n)
        output = rng.lognormal(np.log(40), 0.5, n)
    elif lengths == "heavy":  # Pareto tails: a few requests are 10-50x the typical one
        prompt = 64 * (1 + rng.pareto(1.5, n))
        output = 12 * (1 + rng.pareto(1.3, n))
    elif lengths == "uniform":
        prompt = rng.uniform(32, 256, n)
        output = rng.uniform(8, 64, n)
    else:
        raise ValueError(lengths)
    prompt = np.clip(np.round(prompt), 4, 8000).astype(int)
    output = np.clip(np.round(output), 1, 600).astype(int)
    arrival = None if rate is None else np.cumsum(rng.exponential(1.0 / rate, n))
    arrivals = {"kind": "closed", "concurrency": concurrency} if rate is None else {"kind": "poisson", "rate": rate}
    config = {"workload": {"kind": "synthetic", "lengths": lengths}, "arrivals": arrivals, "seed": seed,
              "stop": {"num_requests": n, "duration_s": None}, "target": {"endpoint": "chat", "model": "m"}}
    return Workload(prompt, output, arrival, concurrency, f"wf-test-{lengths}-{seed}-{n}-{rate}", config)


HICCUP_MS = 150.0  # a rare long pause (a stuck step), far beyond the usual stalls


@dataclass(frozen=True)
class Machine:
    step_ms: float = 6.0  # decode step (memory-bound: nearly flat in batch size)
    prefill_us_per_token: float = 30.0
    jitter: float = 0.05  # lognormal sd of each step
    stall_share: float = 0.01  # share of steps a neighbour delays
    stall_ms: float = 10.0  # mean extra time of a delayed step
    drift: float = 0.01  # lognormal sd of a run's overall speed
    client_ms: float = 0.05  # sd of the client's stamp of an event


def simulate(w: Workload, m: Machine, seed: int, *, decode: float = 1.0, prefill: float = 1.0,
             stalls: float = 1.0, hiccups: float = 0.0, run_id: str | None = None) -> RunSamples:
    """One run of workload `w` on machine `m`; `decode`, `prefill`, `stalls` > 1 and
    `hiccups` > 0 regress."""
    rng = np.random.default_rng([seed, 2])
    n = w.prompt.size
    speed = float(np.exp(rng.normal(0.0, m.drift)))
    horizon = int(w.output.sum()) + n + 2000 if w.arrival_s is None else \
        int(w.arrival_s[-1] * 1e3 / m.step_ms * 1.2) + int(w.output.max()) + 2000
    d = m.step_ms * speed * np.exp(rng.normal(0.0, m.jitter, horizon))
    stalled = rng.random(horizon) < m.stall_share * stalls
    d[stalled] += rng.exponential(m.stall_ms * speed, int(stalled.sum()))
    d *= decode  # a slower device stretches every step, a delayed one too
    d[rng.random(horizon) < hiccups] += HICCUP_MS
    t = np.concatenate(([0.0], np.cumsum(d))) / 1e3  # step boundaries, s
    pre = w.prompt * m.prefill_us_per_token * 1e-6 * prefill * speed * np.exp(rng.normal(0.0, m.jitter, n))
    send = np.empty(n)
    k1 = np.empty(n, dtype=np.int64)
    if w.arrival_s is None:  # closed loop: a request goes out when a slot frees
        bounds = t.tolist()
        free = [0.0] * w.concurrency
        for i in range(n):
            s = heapq.heappop(free) + abs(rng.normal(0.0, 2e-4))
            k = bisect_left(bounds, s)
            send[i], k1[i] = s, k
            heapq.heappush(free, bounds[k + int(w.output[i])] + pre[i])
    else:
        send = w.arrival_s + np.abs(rng.normal(0.0, 2e-4, n))
        k1 = np.searchsorted(t, send)
    intended = send if w.arrival_s is None else w.arrival_s
    # token j of request i comes at the end of step k1 + j (+ its prefill), stamped with jitter
    first = t[k1 + 1] + pre + rng.normal(0.0, m.client_ms / 1e3, n)
    last = t[k1 + w.output] + pre + rng.normal(0.0, m.client_ms / 1e3, n)
    last = np.maximum(last, first)
    owner = np.repeat(np.arange(n), w.output - 1)
    j = np.arange(owner.size) - np.repeat(np.cumsum(w.output - 1) - (w.output - 1), w.output - 1)
    steps = k1[owner] + 1 + j
    gaps = d[steps] + np.diff(rng.normal(0.0, m.client_ms, owner.size + 1))
    per = {"ttft": (first - send) * 1e3, "ttft_intended": (first - intended) * 1e3,
           "e2el": (last - send) * 1e3, "e2el_intended": (last - intended) * 1e3,
           "tpot": np.where(w.output > 1, (last - first) * 1e3 / np.maximum(w.output - 1, 1), np.nan)}
    done = last + 1e-4
    rid = run_id or f"sim{seed}"
    row = RunRow(rid, datetime(2025, 1, 1), None, "completed", None, None, None, None, w.config, {}, False, 0)
    used = d[: int(k1.max() + w.output.max()) + 1]
    return RunSamples(row, rid, per, Gaps(np.maximum(gaps, 0.0), owner), used, send, done,
                      w.output.astype(float), w.prompt.astype(float), (float(send.min()), float(done.max())),
                      np.arange(n), np.full(n, -1), np.zeros(n, dtype=np.int64), w.fingerprint)


def synthetic_run(n: int, scale: float, seed: int) -> RunSamples:
    """A closed-loop run of `n` lognormal-length requests on a machine `scale` times slower
    (every step and prefill), its own workload seed: unpaired with any other."""
    return simulate(make_workload(n, seed), Machine(), seed, decode=scale, prefill=scale)


def keep_requests(s: RunSamples, keep: np.ndarray) -> RunSamples:
    """`s` with only the requests where `keep` is true (as if the others had failed)."""
    rows = np.flatnonzero(keep)
    pos = np.full(s.n_requests, -1)
    pos[rows] = np.arange(rows.size)
    g = pos[s.itl.owner] >= 0
    return dataclasses.replace(
        s, per_request={k: v[rows] for k, v in s.per_request.items()},
        itl=Gaps(s.itl.values[g], pos[s.itl.owner][g]), send_s=s.send_s[rows], done_s=s.done_s[rows],
        output_tokens=s.output_tokens[rows], prompt_tokens=s.prompt_tokens[rows],
        request_idx=s.request_idx[rows], conversation_id=s.conversation_id[rows], turn=s.turn[rows])


def slow_some(s: RunSamples, share: float, factor: float, seed: int) -> RunSamples:
    """`s` with a random `share` of its requests `factor` times slower end to end (TTFT,
    e2e and TPOT alike): a regression that hits only some requests."""
    hit = np.random.default_rng(seed).random(s.n_requests) < share
    scale = np.where(hit, factor, 1.0)
    per = {k: v * scale for k, v in s.per_request.items()}
    return dataclasses.replace(s, per_request=per, done_s=s.send_s + (s.done_s - s.send_s) * scale)
