"""The engine: a step loop in its own thread, fed by thread-safe add/abort.

Threads: the server's threads call `add_request`, `abort_request`, `stats`,
`steps_since` and `memory_report`; they only touch the inbox, the live-request map and the
step log, under `_lock`. The scheduler, block pool and executor belong to the engine thread
alone, so a step never races a request being added or cancelled: those wait in the inbox
until the start of the next step.

A step's window runs from the end of the previous step's compute to the end of its own, so
the bookkeeping between two computes is inside a step (as on a real GPU engine, where host
work overlaps or delays the device), and a timed executor's deadline absorbs it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from infbench.specs import get_gpu
from reference_engine.block_pool import BlockPool
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.device import SimDevice
from reference_engine.executor import Executor, ExecutorClosed
from reference_engine.fair_share import fair_share_for
from reference_engine.faults import HOST_LATE_S, Faults
from reference_engine.lora import LoraModules, step_fields
from reference_engine.profiling import StepProfiler
from reference_engine.request import (
    OutputCallback,
    RequestOutput,
    SamplingParams,
    Sequence,
    SequenceStatus,
)
from reference_engine.scheduler import AdmissionError, Scheduler, SchedulerOutput
from reference_engine.spec_decode import SpecCounters, SpecDecoder, SpeculativeConfig
from reference_engine.structured_output import StructuredOutputs, requeue

log = logging.getLogger("reference_engine.engine")
__all__ = ["AdmissionError", "DuplicateRequestError", "Engine", "EngineStats", "build_executor"]


class DuplicateRequestError(ValueError):
    """A request id is reused while the request that holds it is still live."""


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    kv_usage: float               # fraction of KV blocks in use, 0..1
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_queries: int     # tokens looked up in the prefix cache
    prefix_cache_hits: int        # of which found
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    num_steps: int
    num_requests_finished: int
    hung: bool                    # the hang fault has stopped the step loop


def build_executor(config: EngineConfig, faults: Faults, device: SimDevice | None = None) -> Executor:
    if faults.rank_specs and (config.executor != "torch" or config.tensor_parallel_size < 2):
        spec = faults.rank_specs[0]
        raise ConfigError(f"fault {spec}: needs --executor torch with --tensor-parallel-size "
                          f">= 2 (real ranks to act on)")
    if config.executor == "torch" and config.tensor_parallel_size > 1:
        # N processes joined by torch.distributed (reference_engine/parallel/).
        from reference_engine.parallel.tp_executor import TPExecutor
        return TPExecutor(config, faults)
    if config.executor == "sim":
        from reference_engine.sim_executor import SimExecutor
        return SimExecutor(config, faults.device_factor, faults.collective_factor, device)
    from reference_engine.torch_executor import TorchExecutor  # torch is imported only here
    return TorchExecutor.from_config(config)


def make_device(config: EngineConfig, faults: Faults) -> SimDevice:
    """The simulated GPUs whose telemetry /metrics shows (and the GPU faults act on)."""
    try:
        return SimDevice(config.gpu, config.tensor_parallel_size, faults.gpu,
                         get_gpu(config.gpu).pcie_gen)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class Engine:
    def __init__(self, config: EngineConfig, executor: Executor | None = None) -> None:
        self.config = config
        self.faults = Faults(config.faults)
        self.device = make_device(config, self.faults)
        self.executor = (executor if executor is not None
                         else build_executor(config, self.faults, self.device))
        # Executors other than sim cannot derate bandwidth or clocks themselves: stretch
        # their steps (a throttled clock stretches all of a real step, roughly).
        self._stretch = (1.0 if self.executor.name == "sim"
                         else self.faults.device_factor / self.device.clock_ratio)
        self.profiler = StepProfiler(config.profile_dir, config.profile_steps, self.executor)
        self.pool = BlockPool(self.executor.num_blocks, self.executor.block_size,
                              config.enable_prefix_caching)
        # The adapters served (lora.py): the server resolves request model names against them.
        self.lora = (LoraModules.parse(config.lora_modules, config.max_loras, config.max_lora_rank,
                                       config.model_name) if config.enable_lora else None)
        self.spec = (SpecDecoder(SpeculativeConfig.parse(config.speculative_config))
                     if config.speculative_config else None)
        self.scheduler = Scheduler(self.pool, config.max_num_seqs, config.token_budget,
                                   config.max_model_len, config.enable_chunked_prefill,
                                   self.executor.eos_token_id, config.scheduling_policy, self.spec,
                                   fair_share_for(config),
                                   config.max_loras if config.enable_lora else None)
        self._lock = threading.RLock()  # RLock: a failing callback re-enters to cancel itself
        self._wake = threading.Condition(self._lock)
        self.structured = StructuredOutputs(config, self._notify)  # structured_output.py
        self._live: dict[str, Sequence] = {}
        self._inbox: list[Sequence] = []
        self._aborts: list[Sequence] = []
        self._steps: deque[dict[str, Any]] = deque(maxlen=config.step_log_size)
        self._seq_ids = itertools.count()
        self._step_id = 0
        self._finished = 0
        self._window_start: float | None = None
        self._hung = False
        self._spec_seen = SpecCounters()  # counters at the last step record
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- public API (any thread) ----------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("engine already started")
        self._thread = threading.Thread(target=self._run, name="engine-step-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        shutdown = getattr(self.executor, "shutdown", None)
        if shutdown is not None:
            # A multi-process executor stops its other ranks first: a step blocked in a
            # collective (a hung rank) then fails at once instead of holding the join.
            shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
        self.structured.close()
        if self.profiler.active:  # a profile still recording at shutdown is written, not lost
            self.profiler.poll_stop()

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    on_output: OutputCallback) -> None:
        """Queue a request; raises AdmissionError if it can never fit, DuplicateRequestError
        if request_id is live. on_output is called from the engine thread."""
        self.scheduler.check_admissible(len(prompt_token_ids), params.max_tokens)
        seq = Sequence(next(self._seq_ids), request_id, prompt_token_ids, params, on_output,
                       time.monotonic())
        with self._wake:
            if request_id in self._live:
                raise DuplicateRequestError(f"request_id {request_id!r} is already in use")
            self._live[request_id] = seq
            self._inbox.append(seq)
            self._wake.notify()

    def abort_request(self, request_id: str) -> None:
        """Cancel a request; idempotent. After this returns its callback gets at most the one
        final "abort" output, and the id may be reused at once."""
        with self._wake:
            seq = self._live.pop(request_id, None)
            if seq is None:
                return
            seq.aborted = True
            self._aborts.append(seq)
            self._wake.notify()

    @property
    def is_alive(self) -> bool:
        """The step loop thread is running (a hung loop is alive; a crashed one is not)."""
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> EngineStats:
        s = self.scheduler
        with self._lock:
            inbox = len(self._inbox)
        used = self.pool.num_used_blocks
        return EngineStats(
            num_running=len(s.running),
            num_waiting=len(s.waiting) + inbox + self.structured.num_waiting,
            kv_usage=used / self.pool.num_blocks, kv_blocks_used=used,
            kv_blocks_total=self.pool.num_blocks, prefix_cache_queries=s.prefix_cache_queries,
            prefix_cache_hits=s.prefix_cache_hits, num_preemptions=s.num_preemptions,
            prompt_tokens_total=s.prompt_tokens_total,
            generation_tokens_total=s.generation_tokens_total, num_steps=self._step_id,
            num_requests_finished=self._finished, hung=self._hung)

    def steps_since(self, step_id: int) -> list[dict[str, Any]]:
        """Step records with id > step_id still in the ring buffer, oldest first."""
        with self._lock:
            if not self._steps:
                return []
            skip = max(0, step_id - self._steps[0]["step_id"] + 1)
            return [dict(r) for r in itertools.islice(self._steps, skip, None)]

    def spec_counters(self) -> SpecCounters | None:
        """Speculative decoding's counters (one consistent snapshot), None when it is off."""
        return self.spec.counters if self.spec is not None else None

    def memory_report(self) -> dict[str, int]:
        report = dict(self.executor.memory_report())
        report["retained"] = self.faults.retained_bytes
        report["total"] = sum(v for k, v in report.items() if k != "total")
        return report

    def health(self) -> str | None:
        """None when healthy, else one line saying why not (an executor that watches its
        ranks reports a collective timeout or a failed rank)."""
        report = getattr(self.executor, "health", None)
        return report() if report is not None else None

    def check_invariants(self) -> None:
        """Scheduler and pool invariants; only while the step loop is not running a step."""
        self.scheduler.check_invariants()
        self.structured.check_invariants([*self.scheduler.waiting, *self.scheduler.running])

    # ---- the step loop (engine thread) ----------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self.profiler.poll(self._step_id + 1)  # start/stop profiling between steps
            with self._wake:
                if not (self._inbox or self._aborts or self.scheduler.has_work()
                        or self.structured.has_ready()):
                    self._window_start = None  # idle: the next step starts when work arrives
                    # A timed executor's clock owes nothing across idle time; the torch
                    # executor computes for real and has no clock to reset.
                    reset = getattr(self.executor, "idle", None)
                    if reset is not None:
                        reset()
                    self._wake.wait(timeout=0.5)
                    continue
            try:
                self.step()
            except ExecutorClosed:
                return  # stop() shut the executor down under this step
            except Exception:
                log.exception("engine step failed; stopping the step loop")
                raise

    def step(self) -> dict[str, Any] | None:
        """Run one step; returns its log record, or None if there was nothing to compute.
        Called by the engine thread, or directly by tests when the thread is not started."""
        return self._step()

    def _step(self) -> dict[str, Any] | None:
        start = self._window_start if self._window_start is not None else time.monotonic()
        t0 = time.monotonic()
        self._intake()
        step_id = self._step_id + 1
        # Again after the intake: a /start_profile answered after the loop's own poll, and a
        # request its client sent after that answer, would otherwise meet in a step the
        # profile misses (round R51 beside the neighbour: the engine thread lost the CPU
        # between the two, and the profile began one step after the request's first).
        self.profiler.poll(step_id)
        if self.device.lost():
            self._device_lost()
            return None
        if self.faults.should_hang(step_id):
            self._hang()
            return None
        out = self.scheduler.schedule(step_id, start)
        if not out.scheduled and not out.preempted:
            return None
        if out.scheduled:
            self.structured.prepare(out.batch)  # this step's grammar masks, priced on the batch
        host_s = time.monotonic() - t0
        exec_start = time.monotonic()
        with self.profiler.annotate(step_id):
            sampled = self.executor.execute(out.batch) if out.scheduled else {}
        end = time.monotonic()
        sampled = self.structured.apply(sampled)
        extra = (self._stretch - 1.0) * (end - exec_start)
        if self.executor.name != "sim":  # the sim prices the mask itself; others wait it out
            extra += self.structured.host_extra_s(end - exec_start)
        stall = self.faults.stall_seconds(step_id, start)
        late = getattr(self.executor, "last_late_s", 0.0) if out.scheduled else 0.0
        if extra + stall > 0:
            due = end + extra + stall
            time.sleep(extra + stall)  # a device or host that is slower than it should be
            end = time.monotonic()
            late += end - due
        self._window_start = end
        parts = getattr(self.executor, "last_parts", None) or {}
        bd = parts.get("breakdown")
        self.device.observe_step(parts.get("device_s", end - exec_start),
                                 bd.memory_s if bd is not None else 0.0,
                                 parts.get("pcie_bytes", 0.0), end)
        t1 = time.monotonic()
        produced = self.scheduler.update(out, sampled, end)
        host_s += time.monotonic() - t1
        if out.scheduled:
            self.profiler.record(step_id, start, end, out.batch)
        # The step is in the log before any client gets its tokens: a reader of /engine/steps
        # who has seen a response end finds the step that ended it (round R49: on a saturated
        # host the engine thread lost the CPU between the two, and the log lagged one step).
        record = self._record(step_id, start, end, out, stall > 0, host_s, late >= HOST_LATE_S)
        self._emit(produced)
        return record

    # ---- step helpers ---------------------------------------------------------------------
    def _intake(self) -> None:
        # Owns: moves new sequences into the scheduler; cancelled ones are freed (exactly
        # once, by Scheduler.abort) and told "abort".
        with self._lock:
            new, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
        self.scheduler.enqueue(self.structured.admit(new))  # cold schemas wait for a compile
        requeue(self.scheduler, self.structured.take_ready())
        for seq in aborts:
            if self.scheduler.abort(seq) or self.structured.abort(seq):
                self._finished += 1
                self.faults.on_request_finished()
            # Also when it finished in the step that raced the abort: _emit sends nothing to
            # an aborted sequence, so this is its one final output either way.
            self._call(seq, self._abort_output(seq))

    def _record(self, step_id: int, start: float, end: float, out: SchedulerOutput,
                stalled: bool, host_s: float, host_late: bool = False) -> dict[str, Any]:
        s = self.scheduler
        spec_before = self._spec_seen
        record = {
            "step_id": step_id, "start": start, "end": end,
            "prefill_tokens": out.num_prefill_tokens, "decode_seqs": out.num_decode_seqs,
            "num_running": len(s.running), "num_waiting": len(s.waiting),
            "preemptions": len(out.preempted), "kv_blocks_used": self.pool.num_used_blocks,
            "kv_blocks_total": self.pool.num_blocks, "fault": self.faults.step_label(stalled, host_late),
            "host_s": host_s,  # engine time outside the executor (intake, schedule, update)
            # Sum of the decoding sequences' contexts (each new token attends to itself and all
            # before it): with decode_seqs, the KV a decode step reads; the MBU truth in tests.
            "decode_context_tokens": sum(w.start_pos + 1 for w in out.batch.seqs if w.is_decode)
            if out.scheduled else 0,
        }
        parts = (getattr(self.executor, "last_parts", None) or {}) if out.scheduled else {}
        record.update(self.structured.step_fields(parts))
        if self.spec is not None:  # this step's drafted and accepted tokens, from the counters
            now = self._spec_seen = self.spec.counters
            record["spec_draft_tokens"] = now.num_draft_tokens - spec_before.num_draft_tokens
            record["spec_accepted_tokens"] = now.num_accepted_tokens - spec_before.num_accepted_tokens
        if self.lora is not None:  # the batch's adapters and who waits for a slot (lora.py)
            record.update(step_fields((q for q, _ in out.scheduled), s.running, s.waiting,
                                      parts.get("lora_s", 0.0), self.lora.max_loras))
        with self._lock:
            self._step_id = step_id
            self._steps.append(record)
        return record

    def _notify(self) -> None:
        # A compile finished (compile thread): wake an idle step loop to queue its requests.
        with self._wake:
            self._wake.notify()

    def _emit(self, produced: list[Sequence]) -> None:
        # Finished sequences leave the live map here (unless abort already took them, or
        # the id now names a newer request); outputs of aborted sequences are dropped.
        with self._lock:
            for seq in produced:
                finished = seq.status is SequenceStatus.FINISHED
                if finished:
                    if self._live.get(seq.request_id) is seq:
                        del self._live[seq.request_id]
                    self._finished += 1
                    self.faults.on_request_finished()
                if not seq.aborted:
                    self._call(seq, RequestOutput(
                        seq.request_id, seq.token_ids[-seq.num_new_tokens:], finished,
                        seq.finish_reason,
                        seq.num_prompt_tokens, seq.num_cached_tokens, seq.arrival_time,
                        seq.first_scheduled_time, seq.first_token_time))

    def _abort_output(self, seq: Sequence) -> RequestOutput:
        return RequestOutput(seq.request_id, [], True, "abort", seq.num_prompt_tokens,
                             seq.num_cached_tokens, seq.arrival_time, seq.first_scheduled_time,
                             seq.first_token_time)

    def _call(self, seq: Sequence, out: RequestOutput) -> None:
        try:
            seq.on_output(out)
        except Exception:
            # A broken consumer must not stop the engine; its request is cancelled.
            log.exception("on_output of request %r failed; aborting it", seq.request_id)
            with self._lock:
                if self._live.get(seq.request_id) is seq:
                    del self._live[seq.request_id]
                    seq.aborted = True
                    self._aborts.append(seq)

    def _device_lost(self) -> None:
        # A fatal XID (fault xid): the GPU is gone, and with it a real engine's CUDA context.
        # Every request in flight or queued ends with "abort"; no step runs again, and later
        # requests end the same way as soon as they arrive.
        with self._lock:
            if not self._hung:
                log.error("fault xid: XID %d, the GPU is lost; aborting every request",
                          self.device.xid_now())
                self._hung = True
            lost = list(self._live.values())
            self._live.clear()
            for seq in lost:
                seq.aborted = True
                self._aborts.append(seq)
        self._intake()

    def _hang(self) -> None:
        # The hang fault: the loop stops making progress (no steps, no outputs) while every
        # other thread keeps answering; only stop() releases it.
        if not self._hung:
            log.warning("fault hang: step loop stopped before step %d", self._step_id + 1)
        self._hung = True
        self._stop.wait()
