"""Every replica against its peers on every latency metric the run has, at matched load.

Metrics: TTFT against the requests in flight on the replica at send, TPOT against the mean
in flight over the request's decode, and (with the engine's step log) the duration of an
engine step against its tokens (decode sequences + prefill tokens; steps with and without
prefill apart). A replica is *slower* when TTFT or TPOT, what its users see, is at least
`min_effect` higher at matched load with an interval (Bonferroni over replicas x metrics)
above no difference; a slower engine step is named beside them, never alone (a host that
steals the engine's CPU for a while stretches its logged steps more than its clients notice);
*busier* when, not slower, it was sent `busier_ratio` times its peers' requests or its
requests met that many times their load.

With the engine's step log, a replica the router sent `busier_ratio` times its peers'
requests is not called slower on TTFT or TPOT when its own engine steps at equal work are
surely not `min_effect` slower (the step interval's upper end below it): the engine says it
is as fast, and what the client saw at "matched" load is load the concurrency at send does
not capture (a higher arrival rate puts more prefill into the steps a request waits on). It
is busier, with the refuted metrics kept (`refuted_on`) for its finding to say so.

A replica whose TTFT alone is slower is slower only if its engine's own time before first
tokens says so, whatever its share and whether or not its pooled step interval can tell (round
R60 beside a busy neighbour: a replica sent 3x its peers' requests read TTFT x1.46 at matched
concurrency, its steps 1.09 (0.83-1.43), inconclusive, while its queue wait (0 ms) and prefill
time per request (5.277 ms against 5.273) were its peers': its front end, serving three times
the requests on a saturated host, took the time). Per request sent, the step log
gives the time a request waited in the engine's queue (the waiting count integrated over the
steps' time, Little's law: a scheduler limit such as max_num_seqs or a full KV cache queues
requests without slowing a step) and the time of the steps that carried prefill (more prefill
per request, prefix caching off, a smaller chunk budget, or slower prefill steps that the
pooled steps hide when most steps are decode-only). When that engine time exceeds its peers'
by less than `min_effect` of their TTFT, the extra TTFT was spent before the engine (HTTP
server, tokenizer, a host that gave its front end less CPU, the network) and the TTFT slowdown
is refuted. Without the waiting count nothing refutes it.

Two passes: the first compares each replica with all the others; the second compares each
with the replicas the first did not find slower, so a healthy replica is not made to look
fast, nor a second slow one hidden, by a slow peer in the pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from playbooks.replicas.matched import Comparison, compare, z_for
from playbooks.replicas.observations import EngineTime, Observations

METRIC_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "step": "engine step"}
CLIENT_METRICS = ("ttft", "tpot")


@dataclass
class ReplicaVerdict:
    replica: str
    comparisons: dict[str, Comparison]
    slower_on: list[str] = field(default_factory=list)   # metrics where it is slower
    refuted_on: list[str] = field(default_factory=list)  # slower there, its engine steps say not
    busier: bool = False
    load_ratio: float | None = None      # mean in flight at send / the peers'
    request_ratio: float | None = None   # measured requests / the peers' mean
    peers: list[str] = field(default_factory=list)
    engine: EngineTime | None = None         # its engine's time per request before first tokens
    peers_engine: EngineTime | None = None   # its peers' mean of the same
    engine_explains: bool = False            # that time exceeds its peers' by min_effect of TTFT
    refuted_by: str = ""  # "engine_time": its time before first tokens; "steps": its steps at equal work

    @property
    def slower(self) -> bool:
        return bool(self.slower_on)


def _clusters(names: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    idx = {n: i for i, n in enumerate(sorted({str(x) for x in names}))}
    return np.array([idx[str(n)] for n in names], dtype=np.int64) * 1_000_000 + np.floor(
        np.nan_to_num(seconds)).astype(np.int64)


def _metric_inputs(obs: Observations) -> dict[str, tuple]:
    """metric -> (replica per row, y, load, cluster, strata)."""
    q, s = obs.requests, obs.steps
    out: dict[str, tuple] = {}
    if obs.n_requests:
        cl = _clusters(q["replica"], q["send_ns"] / 1e9)
        out["ttft"] = (q["replica"], q["ttft_ms"], q["replica_concurrency"].astype(np.float64), cl, None)
        out["tpot"] = (q["replica"], q["tpot_ms"], q["decode_load"], cl, None)
    if len(s["replica"]):
        work = np.column_stack([s["decode_seqs"] + s["prefill_tokens"], s["prefill_tokens"]]).astype(np.float64)
        out["step"] = (s["replica"], s["step_ms"], work, _clusters(s["replica"], s["start_s"]),
                       (s["prefill_tokens"] > 0).astype(np.int64))
    return out


def _pass(inputs: dict[str, tuple], replicas: list[str], peers_of: dict[str, list[str]]
          ) -> dict[str, dict[str, Comparison]]:
    out: dict[str, dict[str, Comparison]] = {r: {} for r in replicas}
    code = {r: i for i, r in enumerate(replicas)}
    for metric, (names, y, load, cl, strata) in inputs.items():
        # Replica names as integer codes once per metric (string compares per pass are slow).
        uniq, inv = np.unique(names.astype(str), return_inverse=True)
        codes = np.array([code.get(u, -1) for u in uniq.tolist()], dtype=np.int64)[inv]
        load = np.asarray(load)
        for r in replicas:
            keep = np.isin(codes, [code[p] for p in (r, *peers_of[r])])
            out[r][metric] = compare(metric, r, y[keep], load[keep], codes[keep] == code[r],
                                     cl[keep], None if strata is None else strata[keep])
    return out


def judge(obs: Observations, min_effect: float, busier_ratio: float, alpha: float
          ) -> tuple[list[ReplicaVerdict], float]:
    """One verdict per replica (in the run's order) and the z used for the intervals."""
    inputs = _metric_inputs(obs)
    replicas = obs.replicas
    z = z_for(alpha, len(replicas) * max(1, len(inputs)))
    threshold = float(np.log1p(min_effect))

    def hits_on(cmps: dict[str, Comparison]) -> list[str]:
        hits = [m for m, c in cmps.items()
                if c.delta is not None and c.se is not None
                and c.delta >= threshold and c.delta - c.quantile(z) * c.se > 0]
        return hits if any(m in CLIENT_METRICS for m in hits) else []

    def steps_say_not_slower(cmps: dict[str, Comparison]) -> bool:
        step = cmps.get("step")
        return (step is not None and step.delta is not None and step.se is not None
                and step.delta + step.quantile(z) * step.se < threshold)

    if obs.sent is not None:
        counts = obs.sent
    else:
        names, n = np.unique(obs.requests["replica"].astype(str), return_counts=True)
        counts = dict(zip(names.tolist(), n.tolist(), strict=True))

    def request_ratio(r: str, peers: list[str]) -> float | None:
        peer_counts = [counts.get(p, 0) for p in peers]
        if not peer_counts or np.mean(peer_counts) <= 0:
            return None
        return counts.get(r, 0) / float(np.mean(peer_counts))

    times = obs.engine_time or {}

    def peers_time(peers: list[str]) -> EngineTime | None:
        known = [times[p] for p in peers if p in times]
        if not known or len(known) < len(peers) or any(t.total_ms is None for t in known):
            return None
        return EngineTime(float(np.mean([t.queue_wait_ms or 0.0 for t in known])),
                          float(np.mean([t.prefill_ms for t in known])), source=known[0].source)

    def peers_ttft(peers: list[str]) -> float | None:
        q = obs.requests
        if not obs.n_requests:
            return None
        y = np.asarray(q["ttft_ms"], dtype=np.float64)[np.isin(q["replica"].astype(str), peers)]
        y = y[np.isfinite(y)]
        return float(np.median(y)) if len(y) else None

    def engine_explains(r: str, peers: list[str]) -> bool:
        """r's engine spent at least `min_effect` of its peers' TTFT more per request before
        first tokens than theirs (unknown: assume it did, so nothing is refuted)."""
        mine, theirs, level = times.get(r), peers_time(peers), peers_ttft(peers)
        if mine is None or mine.total_ms is None or theirs is None or theirs.total_ms is None \
                or level is None:
            return True
        return mine.total_ms - theirs.total_ms >= min_effect * level

    def split(r: str, cmps: dict[str, Comparison], peers: list[str]) -> tuple[list[str], list[str], str]:
        """(slower on, refuted on, refuted by): a TTFT-only slowdown is refuted unless its
        engine's own time before first tokens explains it ("engine_time"; an unknown engine
        time explains it); otherwise, where its engine steps at equal work say it is not
        slower, a client-side slowdown of a replica the router sent more is refuted ("steps")."""
        hits = hits_on(cmps)
        if not hits:
            return [], [], ""
        if hits == ["ttft"] and not engine_explains(r, peers):
            return [], hits, "engine_time"
        if steps_say_not_slower(cmps) and (request_ratio(r, peers) or 0.0) >= busier_ratio:
            return [], hits, "steps"
        return hits, [], ""

    everyone = {r: [p for p in replicas if p != r] for r in replicas}
    first = _pass(inputs, replicas, everyone)
    suspects = {r for r in replicas if split(r, first[r], everyone[r])[0]}
    healthy = [r for r in replicas if r not in suspects]
    peers_of = {r: ([p for p in healthy if p != r] or everyone[r]) for r in replicas}
    second = _pass(inputs, replicas, peers_of) if suspects else first
    verdicts = []
    for r in replicas:
        cmps = second[r]
        slower, refuted, by = split(r, cmps, peers_of[r])
        v = ReplicaVerdict(r, cmps, slower, refuted, peers=peers_of[r], refuted_by=by)
        ttft = cmps.get("ttft")
        v.load_ratio = ttft.load_ratio if ttft is not None else None
        v.request_ratio = request_ratio(r, peers_of[r])
        v.busier = not v.slower and any(x is not None and x >= busier_ratio
                                        for x in (v.load_ratio, v.request_ratio))
        v.engine, v.peers_engine = times.get(r), peers_time(peers_of[r])
        v.engine_explains = (v.engine is not None and v.engine.total_ms is not None
                             and v.peers_engine is not None and engine_explains(r, peers_of[r]))
        verdicts.append(v)
    return verdicts, z
