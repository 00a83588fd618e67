"""A closed-loop benchmark of the sim engine on a virtual clock: the calibration harness.

`vllm bench serve --max-concurrency C --request-rate inf` keeps C requests in flight: each
finished request is replaced by the next one at once, until `num_prompts` have been sent.
This module replays that loop through the engine's own scheduler and block pool, with each
step lasting what `SimExecutor.predict` says, but on a virtual clock instead of real sleeps
- the same steps the live engine would run, without waiting for them, so a sweep of a 70B
model at concurrency 256 takes seconds of CPU instead of minutes of wall time.

What is left out, deliberately: the HTTP server and client (their cost is not the
device's), detokenisation and streaming. Those are what the e2e tests over a real socket
measure; this harness measures what the sim's model of the device and engine predicts.
Metrics follow vLLM's `benchmark_serving` definitions: TTFT from send to first token, TPOT
per request = (latency - TTFT) / (output tokens - 1), output throughput = all output tokens
/ (last finish - first send).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from reference_engine.block_pool import BlockPool
from reference_engine.config import EngineConfig
from reference_engine.fair_share import fair_share_for
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler
from reference_engine.sim_executor import SimExecutor

_PROMPT_TOKEN = 0x41  # one printable byte; prefix caching is off in calibration configs


@dataclass(frozen=True)
class ClosedLoopResult:
    concurrency: int
    num_prompts: int
    median_ttft_ms: float
    median_tpot_ms: float
    mean_tpot_ms: float
    output_throughput: float  # output tokens per second over the whole run
    duration_s: float
    num_steps: int
    num_preemptions: int


def run_closed_loop(config: EngineConfig, input_len: int, output_len: int, concurrency: int,
                    num_prompts: int, client_gap_s: float = 0.0,
                    executor: SimExecutor | None = None) -> ClosedLoopResult:
    """Send `num_prompts` requests of `input_len` tokens asking for exactly `output_len`
    (ignore_eos), `concurrency` at a time; a request is replaced `client_gap_s` after it
    finishes (the client's turnaround). Distinct prompts, so nothing hits the prefix cache."""
    if concurrency <= 0 or num_prompts <= 0 or input_len <= 0 or output_len <= 0:
        raise ValueError("concurrency, num_prompts, input_len and output_len must be > 0")
    ex = executor or SimExecutor(config)
    pool = BlockPool(ex.num_blocks, ex.block_size, config.enable_prefix_caching)
    sched = Scheduler(pool, config.max_num_seqs, config.token_budget, config.max_model_len,
                      config.enable_chunked_prefill, ex.eos_token_id, config.scheduling_policy,
                      fair=fair_share_for(config))
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    now = 0.0
    sent = 0
    pending: list[float] = [0.0] * min(concurrency, num_prompts)  # send times not yet reached
    done: list[Sequence] = []
    send_time: dict[int, float] = {}
    finish_time: dict[int, float] = {}
    steps = 0

    def send(at: float) -> None:
        nonlocal sent
        # Each prompt differs in its first token, as random-dataset prompts do.
        prompt = [sent % 200 + 32] + [_PROMPT_TOKEN] * (input_len - 1)
        seq = Sequence(sent, f"r{sent}", prompt, params, lambda _out: None, at)
        sched.check_admissible(seq.num_prompt_tokens, output_len)
        sched.add(seq)
        send_time[seq.seq_id] = at
        sent += 1

    while len(done) < num_prompts:
        for at in [t for t in pending if t <= now]:
            pending.remove(at)
            send(at)
        if not sched.has_work():
            now = min(pending)  # every slot waits on its client
            continue
        steps += 1
        out = sched.schedule(steps, now)
        if not out.scheduled:
            raise RuntimeError(f"step {steps}: nothing schedulable with work queued")
        now += ex.predict(out.batch)
        sampled = {w.seq_id: _PROMPT_TOKEN for w in out.batch.seqs if w.sample}
        for seq in sched.update(out, sampled, now):
            if seq.is_finished:
                done.append(seq)
                finish_time[seq.seq_id] = now
                if sent + len(pending) < num_prompts:
                    pending.append(now + client_gap_s)
        if steps % 997 == 0:
            sched.check_invariants()

    # a finished sequence has sampled a token, so its first-token time is set
    first = {s.seq_id: float(s.first_token_time or 0.0) for s in done}
    ttft = [(first[s.seq_id] - send_time[s.seq_id]) * 1e3 for s in done]
    tpot = [(finish_time[s.seq_id] - first[s.seq_id]) * 1e3 / (output_len - 1)
            for s in done] if output_len > 1 else [0.0]
    duration = max(finish_time.values()) - min(send_time.values())
    return ClosedLoopResult(
        concurrency=concurrency, num_prompts=num_prompts,
        median_ttft_ms=statistics.median(ttft), median_tpot_ms=statistics.median(tpot),
        mean_tpot_ms=statistics.fmean(tpot),
        output_throughput=num_prompts * output_len / duration, duration_s=duration,
        num_steps=steps, num_preemptions=sched.num_preemptions)

