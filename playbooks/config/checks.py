"""One finding per setting that shaped this run, each from the linked configuration and the
run's own rows (`settings.py`); none when the setting did not bind."""

from __future__ import annotations

import math
from typing import Any

from playbooks.config.settings import LinkedConfig, RunLoad
from playbooks.findings import Evidence, Finding

# Share of the engine's samples with a full batch and requests waiting from which the cap is
# a warning: below it, a burst queued for a moment.
CAP_WARNING_SHARE = 0.10
SHARED_PREFIX_WORKLOADS = ("prefix", "multiturn")


def _r(v: Any, nd: int = 1) -> Any:
    return round(float(v), nd) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _setting(cfg: LinkedConfig, key: str) -> str:
    return f"{key}={cfg.get(key)} ({cfg.origin.get(key, 'unknown')})"


def batch_cap_finding(cfg: LinkedConfig, load: RunLoad) -> Finding | None:
    n, f = cfg.number("max_num_seqs"), load.facts
    full, samples = f.get("samples_full_and_waiting") or 0, f.get("queue_samples") or 0
    if n is None or not samples or not full:
        return None
    share = full / samples
    asked = load.arrivals.get("concurrency") or None
    summary = (f"{_setting(cfg, 'max_num_seqs')} capped the batch: in {share:.0%} of the "
               f"engine's {f['queue_source'].replace('_', ' ')} it ran {n:.0f} requests with more "
               f"waiting (up to {f['peak_waiting']:.0f}); the run kept up to "
               f"{f['peak_in_flight'] or '?'} in flight"
               + (f" (--concurrency {asked})" if asked else "") +
               f". A queued request's wait is part of its TTFT (p50 {_r(f['ttft_p50_ms'])} ms, "
               f"p99 {_r(f['ttft_p99_ms'])} ms).")
    return Finding(
        "batch_capped_by_max_num_seqs", f"max_num_seqs={n:.0f} capped the batch; requests queued",
        0.85 if f["queue_source"] == "engine_steps" else 0.7,
        "warning" if share >= CAP_WARNING_SHARE else "info", summary,
        [Evidence("setting", {"max_num_seqs": n, "origin": cfg.origin.get("max_num_seqs"),
                              "config_id": cfg.config_id, "engine": cfg.engine}, cfg.sql),
         Evidence("queue", {k: _r(f.get(k), 3) for k in (
             "queue_source", "queue_samples", "peak_running", "peak_waiting", "samples_waiting",
             "samples_full_and_waiting")} | {"share_full_and_waiting": _r(share, 3)},
             load.sql["queue"], "samples where the engine ran max_num_seqs requests and others "
             "waited: the cap, not the KV pool or the prefill budget, held them back"),
         Evidence("ttft", {"p50_ms": _r(f.get("ttft_p50_ms")), "p99_ms": _r(f.get("ttft_p99_ms"))},
                  load.sql["ttft"])],
        [f"raise --max-num-seqs above {n:.0f} if the KV pool holds the larger batch "
         "(`infbench diagnose memory RUN` gives the concurrency the pool holds), then compare "
         "with `infbench gate`",
         f"or keep each replica at most {n:.0f} concurrent requests (route more replicas)"])


def max_model_len_finding(cfg: LinkedConfig, load: RunLoad) -> Finding | None:
    limit, f = cfg.number("max_model_len"), load.facts
    over = f.get("over_max_model_len") or 0
    if limit is None or not over:
        return None
    failed = f.get("over_max_model_len_failed") or 0
    summary = (f"{over} of {f['requests']} requests asked for more tokens (prompt + max_tokens, "
               f"up to {f['longest_request']:.0f}) than {_setting(cfg, 'max_model_len')}"
               + (f"; {failed} of them failed." if failed else
                  "; the engine served them anyway (it caps max_tokens to the context left)."))
    return Finding(
        "requests_over_max_model_len", f"Requests longer than max_model_len={limit:.0f}",
        0.9, "warning" if failed else "info", summary,
        [Evidence("setting", {"max_model_len": limit, "origin": cfg.origin.get("max_model_len"),
                              "config_id": cfg.config_id}, cfg.sql),
         Evidence("requests", {"over_limit": over, "over_limit_failed": failed,
                               "longest_request_tokens": f.get("longest_request"),
                               "requests": f.get("requests")}, load.sql["load"])],
        ["raise --max-model-len (the KV pool must hold it: `infbench plan memory`) or cap the "
         "workload's prompt and output lengths"])


def prefix_caching_finding(cfg: LinkedConfig, load: RunLoad) -> Finding | None:
    kind = str(load.workload.get("workload") or "")
    if cfg.get("enable_prefix_caching") is not False or kind not in SHARED_PREFIX_WORKLOADS:
        return None
    shape = {k: load.workload.get(k) for k in ("prefix_groups", "prefix_tokens", "turns")
             if load.workload.get(k) is not None}
    summary = (f"The workload shares prefixes ({kind}"
               + (", " + ", ".join(f"{k} {v}" for k, v in shape.items()) if shape else "")
               + f") and the engine ran with {_setting(cfg, 'enable_prefix_caching')}: every "
               "request prefilled its shared prefix again, in its TTFT and in the prefill "
               f"budget (TTFT p50 {_r(load.facts.get('ttft_p50_ms'))} ms).")
    return Finding(
        "prefix_caching_off", "Prefix caching off under a shared-prefix workload", 0.8, "warning",
        summary, [Evidence("setting", {"enable_prefix_caching": False,
                                       "origin": cfg.origin.get("enable_prefix_caching"),
                                       "workload": kind, **shape}, cfg.sql)],
        ["enable prefix caching (vLLM: --enable-prefix-caching) and run again: "
         "`infbench compare` the two runs' TTFT"])


def prefill_budget_finding(cfg: LinkedConfig, load: RunLoad) -> Finding | None:
    budget, f = cfg.number("max_num_batched_tokens"), load.facts
    p90 = f.get("p90_prompt")
    if budget is None or p90 is None or cfg.get("enable_chunked_prefill") is not True or p90 <= budget:
        return None
    steps = math.ceil(p90 / budget)
    summary = (f"{_setting(cfg, 'max_num_batched_tokens')} is below the run's p90 prompt "
               f"({p90:.0f} tokens): with chunked prefill such a prompt takes {steps} steps "
               "before its first token, so long prompts' TTFT grows with the step time while "
               "decoders' ITL stays bounded (the trade the budget sets).")
    return Finding(
        "prefill_budget_below_prompts", f"Prefill budget {budget:.0f} tokens splits long prompts",
        0.7, "info", summary,
        [Evidence("setting", {"max_num_batched_tokens": budget, "enable_chunked_prefill": True,
                              "origin": cfg.origin.get("max_num_batched_tokens")}, cfg.sql),
         Evidence("prompts", {"p50_prompt_tokens": _r(f.get("p50_prompt")),
                              "p90_prompt_tokens": _r(p90), "steps_for_p90_prompt": steps},
                  load.sql["load"])],
        ["`infbench diagnose stalls RUN --itl-target MS` gives a token budget for an ITL "
         "target from this run's own step costs"])
