"""Synthetic per-request data of a fleet, with a known truth per replica.

Each replica gets requests whose load (requests in flight on it at send) is 1 + Poisson(base x
its load factor), a decode load near it, and latencies on a shared, nonlinear latency-load
curve `1 + a x load^p`, times its slowdown, times noise: i.i.d. log-normal per request and a
shock shared by the requests of one replica-second (they share batches and stalls).
"""

from __future__ import annotations

import numpy as np

from playbooks.replicas.observations import EngineTime, Observations


def synthetic_fleet(rng: np.random.Generator, replicas: dict[str, tuple[float, float]], *,
                    n: int = 200, base_load: float = 3.0, a: float = 0.15, p: float = 1.0,
                    noise: float = 0.1, second_noise: float = 0.0, duration_s: float = 20.0,
                    ttft_unmatched: dict[str, float] | None = None,
                    step_slowdown: dict[str, float] | None = None,
                    queue_ms: dict[str, float] | None = None,
                    prefill_slowdown: dict[str, float] | None = None,
                    steps_per_s: int = 50, prefill_per_request: bool = False,
                    step_noise: float = 0.05) -> Observations:
    """`replicas`: name -> (load factor, slowdown). `n` requests per unit of load factor.
    `ttft_unmatched`: a replica's TTFT factor that its concurrency at send does not explain
    (what a higher arrival rate does to a busier replica). `step_slowdown`: with it, an engine
    step log per replica (50 steps a second of decode sequences and some prefill, on one
    step-time line, times the replica's factor). `queue_ms`: with the step log, the mean time a
    request of that replica waits in its engine's queue, as the log's waiting count says it;
    None: the log has no waiting count. `prefill_slowdown`: a replica's factor on its steps
    that carry prefill only; `steps_per_s`: steps a second; `prefill_per_request`: one step
    carries each request's prefill (else 30% of steps carry some); `step_noise`: each step's
    log-normal noise (a host that runs steps late)."""
    cols: dict[str, list] = {k: [] for k in ("request_idx", "replica", "replica_concurrency", "send_ns",
                                             "ttft_ms", "tpot_ms", "e2e_ms", "decode_load")}
    idx = 0
    for name, (load_factor, slow) in replicas.items():
        m = int(round(n * load_factor))
        load = 1 + rng.poisson(base_load * load_factor, m)
        decode_load = np.maximum(1.0, load * np.exp(rng.normal(0, 0.15, m)))
        send_s = np.sort(rng.uniform(0, duration_s, m))
        shocks = rng.normal(0, second_noise, int(duration_s) + 1)
        shared = np.exp(shocks[send_s.astype(int)])
        ttft = (20.0 * (1 + a * load ** p) * slow * np.exp(rng.normal(0, noise, m)) * shared
                * (ttft_unmatched or {}).get(name, 1.0))
        tpot = 5.0 * (1 + a * decode_load ** p) * slow * np.exp(rng.normal(0, noise, m)) * shared
        cols["request_idx"] += list(range(idx, idx + m))
        idx += m
        cols["replica"] += [name] * m
        cols["replica_concurrency"] += load.tolist()
        cols["send_ns"] += (send_s * 1e9).astype(np.int64).tolist()
        cols["ttft_ms"] += ttft.tolist()
        cols["tpot_ms"] += tpot.tolist()
        cols["e2e_ms"] += (ttft + 63 * tpot).tolist()
        cols["decode_load"] += decode_load.tolist()
    req = {k: np.asarray(v, dtype=object if k == "replica" else None) for k, v in cols.items()}
    req["replica_concurrency"] = req["replica_concurrency"].astype(np.int32)
    steps = {k: np.asarray([]) for k in ("replica", "step_id", "step_ms", "decode_seqs",
                                         "prefill_tokens", "start_s")}
    steps["replica"] = steps["replica"].astype(object)
    if step_slowdown is not None:
        sent = {name: int(np.sum(req["replica"].astype(str) == name)) for name in replicas}
        steps = _step_log(rng, replicas, step_slowdown, base_load, duration_s,
                          prefill_slowdown or {}, steps_per_s, sent if prefill_per_request else None,
                          step_noise)
    obs = Observations(list(replicas), req, steps, "-- requests", "-- steps")
    if step_slowdown is not None and queue_ms is not None:
        obs.engine_time, obs.engine_time_sql = _engine_time(steps, req, queue_ms), "-- engine"
    return obs


def _engine_time(steps: dict[str, np.ndarray], req: dict[str, np.ndarray],
                 queue_ms: dict[str, float]) -> dict[str, EngineTime]:
    """As ENGINE_TIME_SQL has it: the queue wait given, the prefill steps' time per request."""
    out = {}
    for name in {str(r) for r in steps["replica"]}:
        mine = (steps["replica"].astype(str) == name) & (steps["prefill_tokens"] > 0)
        sent = int(np.sum(req["replica"].astype(str) == name))
        out[name] = EngineTime(queue_ms.get(name, 0.0), float(np.sum(steps["step_ms"][mine])) / sent)
    return out


def _step_log(rng: np.random.Generator, replicas: dict[str, tuple[float, float]],
              step_slowdown: dict[str, float], base_load: float, duration_s: float,
              prefill_slowdown: dict[str, float], steps_per_s: int,
              prefill_steps: dict[str, int] | None, step_noise: float = 0.05) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {k: [] for k in ("replica", "step_id", "step_ms", "decode_seqs",
                                             "prefill_tokens", "start_s")}
    for name, (load_factor, _) in replicas.items():
        k = int(steps_per_s * duration_s)
        decode = 1 + rng.poisson(base_load * load_factor, k)
        carries = (rng.random(k) < 0.3 if prefill_steps is None else
                   np.isin(np.arange(k), rng.choice(k, prefill_steps[name], replace=False)))
        prefill = np.where(carries, rng.integers(50, 500, k), 0)
        ms = (4.0 + 0.05 * decode + 0.02 * prefill) * step_slowdown.get(name, 1.0) * np.exp(
            rng.normal(0, step_noise, k)) * np.where(prefill > 0, prefill_slowdown.get(name, 1.0), 1.0)
        cols["replica"] += [name] * k
        cols["step_id"] += list(range(k))
        cols["step_ms"] += ms.tolist()
        cols["decode_seqs"] += decode.tolist()
        cols["prefill_tokens"] += prefill.tolist()
        cols["start_s"] += np.sort(rng.uniform(0, duration_s, k)).tolist()
    out = {k: np.asarray(v) for k, v in cols.items()}
    out["replica"] = out["replica"].astype(object)
    return out
