"""The start-up memory log, in vLLM V1's words and format.

vLLM prints each phase of its start-up budget as it takes it: weights loaded, the profile
run (peak activation, non-torch memory), the CUDA-graph estimate, the KV memory left, the
pool in tokens, the concurrency that allows, and finally the graphs captured; or the error
that stopped it. The reference engine prints the same lines for its own budget, so
`infbench diagnose startup` reads this engine's log as it reads vLLM's, and a test can hold
the log's figures against `infbench plan memory`.

Lines go to the `reference_engine.startup` logger with vLLM's record format
(`INFO 12-01 08:30:00 [gpu_worker.py:271] Available KV cache memory: 3.39 GiB`); the file
and line in brackets are vLLM's module names for the phase, not this engine's.
"""

from __future__ import annotations

import logging
import sys

from infbench.specs import get_gpu, get_model
from infbench.specs.gpus import GIB
from infbench.specs.memory import MemoryPlan, plan_memory
from reference_engine.config import EngineConfig

log = logging.getLogger("reference_engine.startup")
VLLM_FORMAT = "%(levelname)s %(asctime)s [%(vllm_file)s] %(message)s"
VLLM_DATEFMT = "%m-%d %H:%M:%S"


def configure(level: str = "INFO") -> None:
    """Send the start-up lines to stderr in vLLM's record format (once)."""
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(VLLM_FORMAT, VLLM_DATEFMT))
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False


def sim_plan(config: EngineConfig) -> MemoryPlan:
    """The budget the sim executor sizes its pool by (the same call, the same arguments; a
    test holds the two equal)."""
    return plan_memory(
        get_model(config.model), get_gpu(config.gpu), tp=config.tensor_parallel_size,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len, block_size=config.block_size,
        weight_format=config.weight_format, kv_format=config.kv_format,
        max_num_batched_tokens=config.token_budget, max_num_seqs=config.max_num_seqs)


def _say(level: int, where: str, message: str, *args: object) -> None:
    log.log(level, message, *args, extra={"vllm_file": where})


def log_plan(plan: MemoryPlan, num_blocks: int | None = None, enforce_eager: bool = False) -> None:
    """The phases of `plan` in the order vLLM takes them; the error line when it does not fit.
    `num_blocks` is the pool actually allocated (an override replaces the plan's)."""
    g = float(GIB)
    _say(logging.INFO, "gpu_model_runner.py:2082", "Model loading took %.4f GiB and %.6f seconds",
         plan.weights_bytes / g, 0.0)
    non_kv = plan.weights_bytes + plan.activation_bytes + plan.non_torch_bytes
    _say(logging.INFO, "gpu_worker.py:276",
         "Memory profiling takes %.2f seconds. Total non KV cache memory: %.2fGiB; torch peak "
         "memory increase: %.2fGiB; non-torch forward increase memory: %.2fGiB; weights "
         "memory: %.2fGiB.", 0.0, non_kv / g, plan.activation_bytes / g,
         plan.non_torch_bytes / g, plan.weights_bytes / g)
    # The plan reserves this whether or not graphs are captured (the sim executor's budget).
    _say(logging.INFO, "gpu_model_runner.py:6806", "Estimated CUDA graph memory: %.2f GiB total",
         plan.cuda_graph_bytes / g)
    _say(logging.INFO, "gpu_worker.py:299", "Available KV cache memory: %.2f GiB",
         max(0.0, plan.remaining_bytes) / g)
    blocks = plan.num_blocks if num_blocks is None else num_blocks
    if num_blocks is not None and num_blocks != plan.num_blocks:
        _say(logging.INFO, "kv_cache_utils.py:1105",
             "Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d", plan.num_blocks,
             num_blocks)
    elif not plan.fits:
        _say(logging.ERROR, "core.py:708", "%s", plan.error)
        return
    tokens = blocks * plan.block_size
    _say(logging.INFO, "kv_cache_utils.py:1229", "GPU KV cache size: %s tokens", f"{tokens:,}")
    # vLLM's figure: the pool's tokens over one max_model_len sequence's (whole blocks).
    per_seq = -(-plan.max_model_len // plan.block_size) * plan.block_size
    _say(logging.INFO, "kv_cache_utils.py:1234",
         "Maximum concurrency for %s tokens per request: %.2fx", f"{plan.max_model_len:,}",
         tokens / per_seq)
    if not enforce_eager:
        _say(logging.INFO, "gpu_model_runner.py:3480", "Graph capturing finished in %.0f secs, "
             "took %.2f GiB", 0.0, plan.cuda_graph_bytes / g)


def log_torch(weights_bytes: int, kv_pool_bytes: int, num_blocks: int, block_size: int,
              max_model_len: int) -> None:
    """The torch executor's budget: it loads real weights and allocates a real pool of a
    configured size (no profile run), so only those phases are printed."""
    g = float(GIB)
    _say(logging.INFO, "gpu_model_runner.py:2082", "Model loading took %.4f GiB and %.6f seconds",
         weights_bytes / g, 0.0)
    _say(logging.INFO, "gpu_worker.py:299", "Available KV cache memory: %.2f GiB", kv_pool_bytes / g)
    tokens = num_blocks * block_size
    per_seq = -(-max_model_len // block_size) * block_size
    _say(logging.INFO, "kv_cache_utils.py:1229", "GPU KV cache size: %s tokens", f"{tokens:,}")
    _say(logging.INFO, "kv_cache_utils.py:1234",
         "Maximum concurrency for %s tokens per request: %.2fx", f"{max_model_len:,}",
         tokens / per_seq)


def log_started(executor: object, config: EngineConfig, num_blocks: int) -> None:
    """The start-up lines of an engine whose executor was built."""
    plan = getattr(executor, "plan", None)
    if isinstance(plan, MemoryPlan):
        log_plan(plan, num_blocks if config.num_gpu_blocks is not None else None,
                 config.enforce_eager)
        return
    report = executor.memory_report()  # type: ignore[attr-defined]  # every executor has it (Executor protocol); typed object to keep this module off the executors
    log_torch(report["weights"], report["kv_pool"], num_blocks, config.block_size,
              config.max_model_len)


def log_failed(config: EngineConfig) -> None:
    """The start-up lines of a sim engine whose budget did not fit (the executor refused to
    build): the phases up to the error, as vLLM prints them before it raises."""
    if config.executor != "sim" or config.num_gpu_blocks is not None:
        return
    try:
        plan = sim_plan(config)
    except ValueError:  # an unknown model or GPU: that error is the whole story
        return
    if not plan.fits:
        log_plan(plan, enforce_eager=config.enforce_eager)
