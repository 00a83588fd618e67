"""Engine overview: vLLM and SGLang under their own names, side by side in each panel.

Every panel has one target per engine (the two name sets have different bucket edges, so
their histograms are never summed together). vLLM's renamed series (ITL was
`time_per_output_token_seconds` before 0.11, KV usage `gpu_cache_usage_perc` and the prefix
cache counters `gpu_prefix_cache_*` before 0.10) are read with `or` series by series, before
any sum: each server counts under whichever name it has, and a 0.11 server that exposes both
is not counted twice.
"""

from __future__ import annotations

from dashboards.common import RATE, Spec, Target, Variable, build, quantile_targets

V = 'model_name=~"$model", instance=~"$instance"'
QS = (0.5, 0.9, 0.99)

VARIABLES = [
    Variable("model", "Model",
             'label_values({__name__=~"vllm:num_requests_running|sglang:num_running_reqs"}, model_name)'),
    Variable("instance", "Instance",
             'label_values({__name__=~"vllm:num_requests_running|sglang:num_running_reqs", '
             'model_name=~"$model"}, instance)'),
]


def _rate(name: str) -> str:
    return f"sum(rate({name}{{{V}}}[{RATE}]))"


def _rate_or(name: str, old: str) -> str:
    """The summed rate of `name`, or of its pre-rename `old` for servers that have only it."""
    return f"sum(rate({name}{{{V}}}[{RATE}]) or rate({old}{{{V}}}[{RATE}]))"


LATENCY = [
    Spec("Time to first token (server)",
         "TTFT percentiles from the engine's own histogram (queueing + prefill). A p99 far above "
         "p50 that moves with the waiting queue is admission/queueing; periodic spikes are stalls: "
         "run `infbench diagnose stalls RUN` on a run recorded at the same time.",
         quantile_targets("vllm:time_to_first_token_seconds_bucket", V, QS, "vLLM")
         + quantile_targets("sglang:time_to_first_token_seconds_bucket", V, QS, "SGLang"), "s"),
    Spec("Inter-token latency (server)",
         "Gap between output tokens (decode step time). Rising with batch size is expected; a "
         "step time above the bandwidth roofline means the GPU is underused: "
         "`infbench diagnose mbu RUN`; sudden multi-second gaps: `infbench diagnose stalls RUN`.",
         quantile_targets("vllm:inter_token_latency_seconds_bucket", V, QS, "vLLM",
                          fallback="vllm:time_per_output_token_seconds_bucket")
         + quantile_targets("sglang:inter_token_latency_seconds_bucket", V, QS, "SGLang"), "s"),
    Spec("End-to-end request latency (server)",
         "Whole-request latency as the engine sees it. If the client's e2e (infbench run "
         "dashboard) is much higher, the time is spent outside the engine (proxy, network, "
         "client): compare with `infbench show RUN`.",
         quantile_targets("vllm:e2e_request_latency_seconds_bucket", V, (0.5, 0.99), "vLLM")
         + quantile_targets("sglang:e2e_request_latency_seconds_bucket", V, (0.5, 0.99), "SGLang"),
         "s"),
    Spec("Queue time",
         "Time requests wait before their first scheduling. Non-zero p99 means the engine is at "
         "its max_num_seqs or KV capacity: find the knee with `infbench sweep`, or check KV "
         "usage and preemptions below.",
         quantile_targets("vllm:request_queue_time_seconds_bucket", V, (0.5, 0.99), "vLLM")
         + quantile_targets("sglang:queue_time_seconds_bucket", V, (0.5, 0.99), "SGLang"), "s"),
]

LOAD = [
    Spec("Token throughput",
         "Prompt and generated tokens per second. A drop at constant offered load is a "
         "regression or a stall: `infbench gate` against a baseline run, then "
         "`infbench diagnose stalls RUN`.",
         (Target(_rate("vllm:prompt_tokens_total"), "vLLM prompt tok/s"),
          Target(_rate("vllm:generation_tokens_total"), "vLLM generated tok/s"),
          Target(_rate("sglang:prompt_tokens_total"), "SGLang prompt tok/s"),
          Target(_rate("sglang:generation_tokens_total"), "SGLang generated tok/s")), "short"),
    Spec("Requests running and waiting",
         "Running = the batch; waiting = queued. Waiting above zero for long means the engine "
         "is saturated (or a replica is slow: `infbench diagnose replicas RUN` on a fleet run).",
         (Target(f"sum(vllm:num_requests_running{{{V}}})", "vLLM running"),
          Target(f"sum(vllm:num_requests_waiting{{{V}}})", "vLLM waiting"),
          Target(f"sum(sglang:num_running_reqs{{{V}}})", "SGLang running"),
          Target(f"sum(sglang:num_queue_reqs{{{V}}})", "SGLang waiting")), "short"),
    Spec("Finished requests by reason",
         "Successful requests per second by finish reason; `abort` means clients gave up or "
         "the server cancelled (timeouts): check the run's errors with `infbench show RUN`.",
         (Target(f"sum by (finished_reason) (rate(vllm:request_success_total{{{V}}}[{RATE}]))",
                 "vLLM {{finished_reason}}"),
          Target(_rate("sglang:num_requests_total"), "SGLang finished"),
          Target(_rate("sglang:num_aborted_requests_total"), "SGLang aborted")), "reqps"),
]

CACHE = [
    Spec("KV cache usage",
         "Share of the KV pool in use (0-1). Near 1 with preemptions means the pool is too "
         "small for the load (gpu_memory_utilization, max_model_len): "
         "`infbench diagnose memory RUN`, `infbench plan memory`.",
         (Target(f"max(vllm:kv_cache_usage_perc{{{V}}} or vllm:gpu_cache_usage_perc{{{V}}})",
                 "vLLM"),
          Target(f"max(sglang:token_usage{{{V}}})", "SGLang")), "percentunit"),
    Spec("Preemptions",
         "Requests evicted and recomputed (SGLang: retracted) per second. Any sustained rate "
         "wastes prefill work and inflates TTFT/e2e: the KV pool is too small for the batch; "
         "`infbench diagnose memory RUN`.",
         (Target(_rate("vllm:num_preemptions_total"), "vLLM"),
          Target(_rate("sglang:num_retracted_requests_total"), "SGLang")), "short"),
    Spec("Prefix cache hit rate",
         "Share of prompt tokens served from the prefix cache. Lower than the workload's shared "
         "share (the run summary's prefix_cache check) means cache eviction or routing that "
         "splits sessions across replicas: `infbench diagnose replicas RUN`.",
         (Target(f"{_rate_or('vllm:prefix_cache_hits_total', 'vllm:gpu_prefix_cache_hits_total')}"
                 f" / {_rate_or('vllm:prefix_cache_queries_total', 'vllm:gpu_prefix_cache_queries_total')}",
                 "vLLM"),
          Target(f"avg(sglang:cache_hit_rate{{{V}}})", "SGLang")), "percentunit"),
]


def dashboard():  # type: ignore[no-untyped-def]
    return build(
        "infbench-engine", "Inference engine overview (vLLM, SGLang)",
        "Latency percentiles from the engines' histograms, throughput, queue, KV cache, "
        "preemptions, prefix cache. Generated by dashboards/build.py; do not edit the JSON.",
        ["infbench", "vllm", "sglang"], VARIABLES,
        [("Latency", LATENCY), ("Load", LOAD), ("KV cache", CACHE)])
