"""What a replica's engine itself spent on a request before its first token, in words and
evidence: the note for a TTFT slowdown its engine does not explain (compare.py refutes it), the
reason a busier replica's finding gives for a refuted slowdown, and
the reason a slower replica's finding gives when its steps are not slower but its engine is."""

from __future__ import annotations

from playbooks.findings import Evidence
from playbooks.replicas.compare import METRIC_WORDS, ReplicaVerdict
from playbooks.replicas.observations import Observations


def _per_request(v: ReplicaVerdict) -> str:
    """'its engine queued it 0.0 ms and spent 4.6 ms ..., against its peers' 0.0 and 4.2 ms'."""
    e, p = v.engine, v.peers_engine
    if e is None or p is None or e.queue_wait_ms is None or p.queue_wait_ms is None:
        return ""
    where = "in steps carrying prefill" if e.source == "steps" else "from its scheduling to its first token"
    return (f"per request its engine queued it {e.queue_wait_ms:.1f} ms and spent "
            f"{e.prefill_ms:.1f} ms {where}, against its peers' "
            f"{p.queue_wait_ms:.1f} and {p.prefill_ms:.1f} ms")


def outside_engine(v: ReplicaVerdict, z: float) -> str:
    """The run's note for a TTFT slowdown its engine's own time before first tokens does not
    explain, of a replica not called busier."""
    seen = ", ".join(f"{METRIC_WORDS[m]} {v.comparisons[m].describe(z)}" for m in v.refuted_on)
    return (f"{v.replica}: {seen} at matched load, but {_engine_account(v, z, 'it')}: the extra "
            "time was spent before its engine (HTTP server, tokenizer, host CPU, network), so it "
            "is not reported as a slower replica")


def refutation(v: ReplicaVerdict, z: float) -> str:
    """Why a busier replica's client-side slowdown at matched load was refuted, for its finding."""
    seen = " and ".join(METRIC_WORDS[m] for m in v.refuted_on)
    if v.refuted_by == "engine_time":
        account = _engine_account(v, z, f"its higher {seen} at matched concurrency")
        return (f"{account[0].upper()}{account[1:]}: that time was spent before its engine, on the "
                "load it was sent, not in a slower engine.")
    step = v.comparisons.get("step")
    return (f"Its engine steps at equal work are as fast as its peers' "
            f"({step.describe(z) if step is not None else 'not comparable'}): the higher {seen} at "
            "matched concurrency is the load it was sent, not a slower engine.")


def _engine_account(v: ReplicaVerdict, z: float, what: str) -> str:
    """'its engine's own time before first tokens does not explain WHAT (per request ...); its
    engine steps at equal work: x1.09 (...)'."""
    step = v.comparisons.get("step")  # None: no step log (a vLLM fleet), nothing to say of steps
    engine = _per_request(v)
    return (f"its engine's own time before first tokens does not explain {what}"
            + (f" ({engine})" if engine else "")
            + (f"; its engine steps at equal work: {step.describe(z)}" if step is not None else ""))


def engine_reason(v: ReplicaVerdict) -> str:
    """For a slower replica whose steps are not slower but whose engine time before first
    tokens is: which of the two parts says so ('' otherwise)."""
    e, p = v.engine, v.peers_engine
    if not v.engine_explains or "step" in v.slower_on or e is None or p is None:
        return ""
    queued = (e.queue_wait_ms or 0.0) - (p.queue_wait_ms or 0.0) >= e.prefill_ms - p.prefill_ms
    # Without a step log (vLLM's histograms) nothing says how fast its steps are.
    lead = ("Its engine steps are not slower, but" if v.comparisons.get("step") is not None
            else "Its engine says where:")
    return (f" {lead} {_per_request(v)}: "
            + ("a scheduler limit holds its requests (max_num_seqs, max_num_batched_tokens, "
               "a full KV cache)." if queued else
               "it does more prefill work per request (prefix caching, the chunked-prefill "
               "budget, slower prefill kernels)."))


def engine_evidence(v: ReplicaVerdict, obs: Observations) -> list[Evidence]:
    e, p = v.engine, v.peers_engine
    if e is None or p is None:
        return []
    return [Evidence("engine_time_before_first_token", {
        "queue_wait_ms": None if e.queue_wait_ms is None else round(e.queue_wait_ms, 3),
        "prefill_ms": round(e.prefill_ms, 3),
        "peers_queue_wait_ms": None if p.queue_wait_ms is None else round(p.queue_wait_ms, 3),
        "peers_prefill_ms": round(p.prefill_ms, 3), "peers": ",".join(v.peers)},
        obs.engine_time_sql or "", _HOW[e.source])]


_HOW = {"steps": "per request sent: the step log's waiting count x step time (Little's law: the "
                 "mean wait in its engine's queue), and the time of its steps that carried prefill",
        "vllm": "per request finished, from vLLM's own histograms (what the run added to "
                "vllm:request_queue_time_seconds and vllm:request_prefill_time_seconds): queued "
                "until first scheduled, then scheduled until its first token; the API server's "
                "HTTP, tokenizer and detokenizer work is in neither"}
