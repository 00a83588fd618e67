"""Profiling engine steps into a PyTorch-profiler (Kineto) trace, vLLM-style.

`--profile-dir DIR` (or vLLM's `VLLM_TORCH_PROFILER_DIR`) turns it on; `POST /start_profile`
and `POST /stop_profile` bracket what is recorded, and `--profile-steps START:COUNT` records
steps START .. START+COUNT-1 without calling the endpoints. Each step is an annotation
`engine_step#N` with N the step log's `step_id`, so a trace lines up with `/engine/steps`.

- torch executor: a real `torch.profiler` trace of the steps (CPU ops; CUDA kernels too on a
  GPU), `engine_step#N` as a `record_function` around each step's forward pass.
- sim executor: a synthetic trace of the roofline-timed steps. Each step is laid out as the
  sim timed it: the host part first (`--step-overhead-ms`, unless async scheduling hides it),
  then the step's kernels back to back on stream 7, per layer qkv projection, attention,
  output projection, MLP up and down (plus two all-reduces per layer at TP > 1) and the LM
  head, each lasting its share of the step's device time in proportion to the bytes it
  reads; a CUDA-graph replay is one `cudaGraphLaunch`, an eager step launches each kernel
  and waits `LAUNCH_US` before it (piecewise graphs: before attention only). The rest of
  the step window (emitting outputs, the wait's jitter) is host time after the kernels.
  A derated device (`slow-device`) shows as slower kernels, host overhead as a longer host
  part: what the MBU playbook's trace buckets measure.

Start and stop requests from the HTTP thread are applied by the engine thread at a step
boundary (or within 0.5 s when idle), so the torch profiler starts and stops on the thread
that runs the model.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from reference_engine.config import ConfigError

log = logging.getLogger("reference_engine")

LAYER_KERNELS = ("qkv_proj", "attention_decode", "o_proj", "mlp_gate_up", "mlp_down")
STREAM, GPU_PID, HOST_PID, HOST_TID = 7, 0, 1, 1


class ProfileError(RuntimeError):
    """Profiling cannot do what was asked (not enabled, already running, not running)."""


def parse_steps(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    start, _, count = str(text).partition(":")
    try:
        a, n = int(start), int(count or 1)
    except ValueError:
        raise ConfigError(f"profile_steps: expected START:COUNT, got {text!r}") from None
    if a < 1 or n < 1:
        raise ConfigError(f"profile_steps: START and COUNT must be >= 1, got {text!r}")
    return a, n


class StepProfiler:
    def __init__(self, directory: str | None, steps: str | None, executor: Any) -> None:
        self.dir = Path(directory) if directory else None
        self.steps = parse_steps(steps)
        if self.steps and not self.dir:
            raise ConfigError("profile_steps needs profile_dir (--profile-dir DIR)")
        self.executor = executor
        self._lock = threading.Lock()
        self._want: bool | None = None      # pending start (True) / stop (False)
        self._done = threading.Event()
        self.active = False
        self.last_path: Path | None = None
        self._events: list[dict[str, Any]] = []
        self._torch: Any = None
        self._t0 = 0.0
        self._base_ns = 0
        self._corr = 0
        self._count = 0

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    # ---- requests (any thread) ------------------------------------------------------------
    def request_start(self) -> None:
        if not self.enabled:
            raise ProfileError("profiling is off: start the engine with --profile-dir DIR")
        with self._lock:
            if (self.active and self._want is not False) or self._want is True:
                raise ProfileError("a profile is already being recorded")
            self._want = True
            self._done.clear()

    def request_stop(self, timeout: float = 60.0) -> Path:
        if not self.enabled:
            raise ProfileError("profiling is off: start the engine with --profile-dir DIR")
        with self._lock:
            if not self.active and self._want is not True:
                raise ProfileError("no profile is being recorded (POST /start_profile first)")
            self._want = False
            self._done.clear()
        if not self._done.wait(timeout):
            raise ProfileError("the engine did not finish the trace in time")
        assert self.last_path is not None
        return self.last_path

    # ---- the engine thread ----------------------------------------------------------------
    def poll(self, next_step: int) -> None:
        """Apply pending start/stop (and --profile-steps) before step `next_step` runs."""
        if not self.enabled:
            return
        with self._lock:
            want, self._want = self._want, None
        if self.steps:
            first, count = self.steps
            if next_step == first and not self.active:
                want = True
            elif next_step >= first + count and self.active:
                want = False
                self.steps = None
        if want is True and not self.active:
            self._start()
        elif want is False and self.active:
            self._stop()

    def poll_stop(self) -> None:
        """Write a profile still being recorded (the engine is shutting down)."""
        if self.active:
            self._stop()

    def annotate(self, step_id: int) -> Any:
        if self.active and self._torch is not None:
            import torch

            return torch.profiler.record_function(f"engine_step#{step_id}")
        return _NULL

    def record(self, step_id: int, start: float, end: float, batch: Any) -> None:
        """After a step: the sim's synthetic events for it."""
        if self.active and self._torch is None:
            self._sim_step(step_id, start, end, batch)

    # ---- internals ------------------------------------------------------------------------
    def _start(self) -> None:
        assert self.dir is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events, self._corr = [], 0
        self._t0 = time.monotonic()
        self._base_ns = time.time_ns()
        if getattr(self.executor, "name", "") == "torch":
            import torch

            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self._torch = torch.profiler.profile(activities=acts)
            self._torch.start()
        self.active = True
        log.info("profiling started (trace to %s)", self.dir)

    def _stop(self) -> None:
        assert self.dir is not None
        self._count += 1
        name = f"engine-{getattr(self.executor, 'name', 'x')}-{time.strftime('%Y%m%d-%H%M%S')}-{self._count}"
        path = self.dir / f"{name}.pt.trace.json"
        try:
            if self._torch is not None:
                self._torch.stop()
                self._torch.export_chrome_trace(str(path))
            else:
                path.write_text(json.dumps(self._sim_document()))
        finally:
            self._torch, self._events = None, []
            self.active = False
            self.last_path = path
            self._done.set()
        log.info("profile written to %s", path)

    def _us(self, t: float) -> float:
        return round((t - self._t0) * 1e6, 3)

    def _sim_document(self) -> dict[str, Any]:
        ex = self.executor
        return {"schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": ex.gpu.name,
                                      "totalGlobalMem": ex.gpu.memory_bytes}],
                "distributedInfo": {"backend": "sim", "rank": 0, "world_size": ex.tp},
                "traceEvents": self._events, "traceName": "reference_engine sim",
                "displayTimeUnit": "ms",
                "baseTimeNanoseconds": self._base_ns}

    def _sim_step(self, step_id: int, start: float, end: float, batch: Any) -> None:
        from reference_engine.sim_kernels import step_kernels

        ex, ev = self.executor, self._events
        parts = ex.last_parts
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"engine_step#{step_id}",
                   "pid": HOST_PID, "tid": HOST_TID, "ts": self._us(start),
                   "dur": round((end - start) * 1e6, 3),
                   "args": {"decode_seqs": batch.num_decode_seqs,
                            "prefill_tokens": batch.num_prefill_tokens}})
        if not parts:
            return
        host = 0.0 if ex.async_scheduling else ex.overhead_s
        t = start + host
        graph = parts["graph"]
        kernels = step_kernels(ex, parts)
        graph_corr = 0
        if graph:  # one replay launches every kernel but the ones a piecewise graph leaves out
            self._corr += 1
            graph_corr = self._corr
            self._launch("cudaGraphLaunch", max(start, t - 5e-6), graph_corr)
        for name, dur, gap in kernels:
            t += gap
            corr = graph_corr
            if not graph or gap > 0:
                self._corr += 1
                corr = self._corr
                self._launch("cudaLaunchKernel", max(start, t - min(gap, 4e-6) - 1e-6), corr)
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": GPU_PID, "tid": STREAM,
                       "ts": self._us(t), "dur": round(dur * 1e6, 3),
                       "args": {"device": 0, "stream": STREAM, "correlation": corr,
                                "External id": step_id}})
            t += dur

    def _launch(self, name: str, t: float, corr: int) -> None:
        self._events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": HOST_PID,
                             "tid": HOST_TID, "ts": self._us(t), "dur": 1.0,
                             "args": {"correlation": corr, "cbid": 211}})


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()
