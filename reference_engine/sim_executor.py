"""The sim executor: no tensors, real time.

Each step lasts what the roofline arithmetic of `infbench.specs` predicts for the named
model, GPU and TP given the step's composition (prefill chunks with their context, decode
sequences with theirs), plus a fixed per-step overhead — and the engine really waits that
long, so HTTP clients measure real latencies. The wait runs to a deadline counted from the
step's start, so the engine's own bookkeeping is absorbed inside the step rather than added
to it. The deadlines form the device's own clock: a wake-up the host makes late (a busy
neighbour, a GC pause) is made up by the following steps, up to `MAX_CATCH_UP_S`, as a GPU
keeps computing while its host looks away; so throughput and mean step time stay the
configured ones on a loaded machine. The KV pool has the size `infbench plan memory` computes. Tokens are synthetic:
printable ASCII bytes of the byte-level tokenizer, deterministic from a seed.

A real model stops at EOS; a sim that never did would answer a chat request without
`max_tokens` with the whole context window. So each sequence has a natural answer length,
lognormal (median `sim_output_median`, sigma `sim_output_sigma`, at least 16 tokens), a
function of its sampling stream and prompt length, and EOS comes there. Requests with
`ignore_eos` (what benchmarks send) get exactly `max_tokens`.

CUDA graphs and async scheduling are modelled on decode-only steps, the steps that set
TPOT: a batch up to the largest captured size is padded to the next captured size and
replayed (no launch cost beyond the fixed overhead); a larger batch, `enforce_eager` or
`cudagraph_mode=NONE` runs eagerly and pays `EAGER_KERNELS_PER_LAYER` launches of
`LAUNCH_US` per layer; `PIECEWISE` leaves attention's `PIECEWISE_EAGER_KERNELS_PER_LAYER`
outside the graph. A decode-only step also pays the share of its compute the weight stream
does not hide (`infbench.specs.gpus.EXPOSED_OVERLAP`). Steps carrying a prefill chunk
are dominated by its compute; their launch
cost stays inside the fixed overhead. With async scheduling the fixed (host) overhead runs
while the device computes, so a step lasts max(device, host) instead of device + host.
Structured output's token masks (the batch's `grammar_mask_s`) are host work too: beside the
forward pass when `grammar_mask_overlap`, else before it.
LoRA adapters (`enable_lora`) add each distinct adapter's shrink and expand to the step's
device time (lora.py prices them).
"""

from __future__ import annotations

import bisect
import math
import time

from infbench.specs import get_gpu, get_model
from infbench.specs.gpus import (
    DEFAULT_BANDWIDTH_FRACTION,
    DEFAULT_FLOPS_FRACTION,
    KERNELS_PER_LAYER,
    decode_kernel_floor_s,
    exposed_overlap_s,
)
from infbench.specs.memory import plan_memory
from infbench.specs.roofline import step_time
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.device import SimDevice
from reference_engine.executor import StepBatch
from reference_engine.lora import LoraCost, LoraModules
from reference_engine.sim_copy import ContextTexts, copied_token
from reference_engine.spec_decode import SpeculativeConfig, as_text

EOS_ID = 257  # the byte tokenizer's end of sequence (ids 0..255 are bytes)
_PRINTABLE_FIRST, _PRINTABLE_COUNT = 0x20, 0x7F - 0x20  # space .. '~'
_M64 = (1 << 64) - 1
_SPIN_S = 0.0002  # the last stretch before a deadline is waited out by yielding, not sleeping
# A device keeps computing while its host is late to look: a step that wakes late (sleep
# granularity, a busy neighbour's few ms) is made up by starting the next deadline early,
# if it is at most this late. A later wake is a host stall (the device finished and sat
# idle): it is kept whole, owing nothing, not compressed into a burst of short steps after
# it, which a client would read as one coalesced read and the stall playbook would spread
# below its threshold. The engine labels such a step host-late (faults.HOST_LATE_S, equal).
MAX_CATCH_UP_S = 0.020
_MIN_NATURAL_OUTPUT = 16
# The launch model infbench's config diff prices with (infbench/config/impact.py).
EAGER_KERNELS_PER_LAYER = KERNELS_PER_LAYER
PIECEWISE_EAGER_KERNELS_PER_LAYER = 2
LAUNCH_US = 4.0


def _mix(x: int) -> int:
    """splitmix64 finaliser: a cheap, well-spread hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _copy_bytes(tokens: int, start_pos: int, block_size: int, sample: bool) -> int:
    """Host<->device bytes one sequence's part of a step moves, as vLLM's GPU model runner
    prepares them: int32 token ids, int64 positions and slot mapping per token, the block
    table row (int32 per block of the context), and the int32 sampled id back."""
    blocks = -(-(start_pos + tokens) // block_size)
    return tokens * (4 + 8 + 8) + 4 * blocks + (4 if sample else 0)


class SimExecutor:
    name = "sim"
    eos_token_id = EOS_ID

    def __init__(self, config: EngineConfig, device_factor: float = 1.0,
                 collective_factor: float = 1.0, device: SimDevice | None = None,
                 *, prefill_factor: float = 1.0) -> None:
        """device_factor > 1 derates HBM bandwidth (slow-device fault); collective_factor > 1
        slows the TP all-reduce (slow-collective fault); `device` carries the GPU faults
        (throttle: compute at the clock ratio; pcie: host<->device copies at the link).
        prefill_factor misprices prefill for the calibration test (docs/sim_calibration.md):
        what a step's prefill chunks add to its roofline time is multiplied by it; no fault
        or engine option sets it."""
        if prefill_factor <= 0:
            raise ConfigError(f"prefill_factor must be > 0, got {prefill_factor}")
        self.prefill_factor = prefill_factor
        self.model = get_model(config.model)
        self.gpu = get_gpu(config.gpu)
        self.tp = config.tensor_parallel_size
        self.block_size = config.block_size
        self.weight_format = config.weight_format
        self.kv_format = config.kv_format
        self.overhead_s = config.step_overhead_ms / 1e3
        self.seed = config.seed
        self.eos_probability = config.sim_eos_probability
        self.output_median = config.sim_output_median
        self.output_sigma = config.sim_output_sigma
        self.copy_probability = config.sim_copy_probability
        self.texts = ContextTexts()
        # A drafting step's extra time: K draft positions at sim_draft_ms each (0 for n-gram
        # lookup, a draft model's forward passes otherwise). Verification of the K+1 tokens
        # is priced by the roofline as the small prefill chunk it is.
        spec = (SpeculativeConfig.parse(config.speculative_config)
                if config.speculative_config else None)
        self.draft_s = spec.num_speculative_tokens * spec.sim_draft_ms / 1e3 if spec else 0.0
        self.bandwidth_fraction = DEFAULT_BANDWIDTH_FRACTION / device_factor
        self.collective_factor = collective_factor
        self.device = device
        # A throttled SM clock lowers the compute roof (prefill, big batches) and the
        # per-kernel floor by the clock ratio; HBM bandwidth does not follow the SM clock.
        self.clock_ratio = device.clock_ratio if device is not None else 1.0
        self.flops_fraction = DEFAULT_FLOPS_FRACTION * self.clock_ratio
        if collective_factor > 1.0 and self.tp == 1:
            raise ConfigError("fault slow-collective needs tensor_parallel_size > 1")
        self.plan = plan_memory(
            self.model, self.gpu, tp=self.tp,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_model_len=config.max_model_len, block_size=self.block_size,
            weight_format=self.weight_format, kv_format=self.kv_format,
            max_num_batched_tokens=config.token_budget, max_num_seqs=config.max_num_seqs)
        if config.num_gpu_blocks is not None:
            self.num_blocks = config.num_gpu_blocks
        elif not self.plan.fits or self.plan.num_blocks <= 0:
            raise ConfigError(
                f"max_model_len ({config.max_model_len}) does not fit {self.model.name} on "
                f"{self.gpu.name} with tensor_parallel_size={self.tp}: "
                f"{self.plan.error or self.plan.failing_term} (see `infbench plan memory`)")
        else:
            self.num_blocks = self.plan.num_blocks
        self.last_prediction_s = 0.0
        self.last_late_s = 0.0  # how far past its deadline the last step ended (engine.py)
        self.last_parts: dict = {}
        # Owns: how late the last deadline was met, taken off the next deadline when it is
        # below MAX_CATCH_UP_S (else 0: a host stall owes nothing).
        self.carry_s = 0.0
        self.capture_sizes = config.capture_sizes
        self.piecewise = config.cudagraph_mode == "PIECEWISE"
        self.async_scheduling = config.async_scheduling
        self.grammar_mask_overlap = config.grammar_mask_overlap
        layers = self.model.num_layers
        self.eager_s = layers * EAGER_KERNELS_PER_LAYER * LAUNCH_US * 1e-6
        self.piecewise_s = layers * PIECEWISE_EAGER_KERNELS_PER_LAYER * LAUNCH_US * 1e-6
        # Every step's kernels each cost a floor the roofline does not see (launch gap, ramp,
        # last wave), graph or not: a fixed per-step device time that scales with depth.
        self.kernel_floor_s = decode_kernel_floor_s(layers, self.tp, self.clock_ratio)
        self.lora = (LoraCost(LoraModules.parse(config.lora_modules, config.max_loras,
                                                config.max_lora_rank, config.model_name),
                              self.model, self.gpu, self.tp, self.bandwidth_fraction,
                              self.flops_fraction, config.sim_lora_launch_us)
                     if config.enable_lora else None)

    def predict(self, batch: StepBatch) -> float:
        """Seconds this step takes on the simulated device, overhead included."""
        prefill: list[tuple[int, int]] = []
        decode: list[int] = []
        pcie_bytes = 0
        for w in batch.seqs:
            pcie_bytes += _copy_bytes(len(w.token_ids), w.start_pos, self.block_size, w.sample)
            if w.is_decode:
                decode.append(w.start_pos + 1)  # the new token attends to itself and all before
            else:
                prefill.append((len(w.token_ids), w.start_pos))
        launch = 0.0
        if decode and not prefill:
            n, sizes = len(decode), self.capture_sizes
            if sizes and n <= sizes[-1]:
                padded = sizes[bisect.bisect_left(sizes, n)]
                decode = decode + [1] * (padded - n)  # padding rows: compute, next to no KV
                launch = self.piecewise_s if self.piecewise else 0.0
            else:
                launch = self.eager_s
        bd = step_time(self.model, self.gpu, tp=self.tp, weight_format=self.weight_format,
                       kv_format=self.kv_format, prefill_chunks=prefill, decode_contexts=decode,
                       bandwidth_fraction=self.bandwidth_fraction,
                       flops_fraction=self.flops_fraction)
        prefill_s = 0.0
        if prefill and self.prefill_factor != 1.0:
            # The prefill's share: the step's time less that of its decodes alone.
            alone = step_time(self.model, self.gpu, tp=self.tp, weight_format=self.weight_format,
                              kv_format=self.kv_format, decode_contexts=decode,
                              bandwidth_fraction=self.bandwidth_fraction,
                              flops_fraction=self.flops_fraction).seconds
            prefill_s = (self.prefill_factor - 1.0) * (bd.seconds - alone)
        # A slow link stretches only the step's TP all-reduces (comm_s is 0 at tp=1).
        # The step's inputs go up and its sampled tokens come down before the next step can
        # be built: serial with the compute. A link trained low adds its slower transfer.
        pcie_s = self.device.extra_transfer_s(pcie_bytes) if self.device is not None else 0.0
        draft_s = self.draft_s if self.draft_s and any(w.num_draft_tokens for w in batch.seqs) else 0.0
        lora_s, adapters = self.lora.step_seconds(batch) if self.lora is not None else (0.0, 0)
        # A step's GEMMs do not hide all of their weight stream's time and their math's in one another.
        exposed = exposed_overlap_s(bd.memory_s, bd.compute_s)
        device = (bd.seconds + (self.collective_factor - 1.0) * bd.comm_s + launch
                  + self.kernel_floor_s + exposed + pcie_s + draft_s + prefill_s + lora_s)
        # What the step was made of, for the synthetic profiler trace (profiling.py).
        self.last_parts = {"breakdown": bd, "launch_s": launch, "device_s": device,
                           "exposed_overlap_s": exposed,
                           "graph": bool(decode and not prefill and launch != self.eager_s),
                           "padded_rows": len(decode) - sum(1 for w in batch.seqs if w.is_decode),
                           "pcie_s": pcie_s, "pcie_bytes": pcie_bytes, "draft_s": draft_s,
                           "lora_s": lora_s, "lora_adapters": adapters}
        plain = max(device, self.overhead_s) if self.async_scheduling else device + self.overhead_s
        return self._with_grammar_mask(plain, device, batch.grammar_mask_s)

    def _with_grammar_mask(self, plain: float, device: float, mask: float) -> float:
        # The grammar masks are host work: overlapped, they run beside the device's forward
        # pass (with async scheduling, beside it together with the rest of the host's work);
        # blocking, the step waits for them first (structured_output.py).
        if mask <= 0.0:
            return plain
        if not self.grammar_mask_overlap:
            total = plain + mask
        elif self.async_scheduling:
            total = max(device, self.overhead_s + mask)
        else:
            total = max(device, mask) + self.overhead_s
        self.last_parts["grammar_mask_exposed_s"] = total - plain
        return total

    def execute(self, batch: StepBatch) -> dict[int, int]:
        predicted = self.predict(batch)
        self.last_prediction_s = predicted
        out = self._sample(batch) if self.copy_probability or any(
            w.num_draft_tokens for w in batch.seqs) else {
            w.seq_id: self._token(w.seq_id, w.params.seed, w.params.temperature,
                                  w.start_pos + len(w.token_ids), w.num_output_tokens,
                                  w.params.ignore_eos)
            for w in batch.seqs if w.sample}
        start = batch.start_time or time.monotonic()
        # The device's clock, not the host's: lateness at the last deadline is owed time.
        deadline = start + predicted - self.carry_s
        # Sleep to just before the deadline, then yield until it: a plain sleep wakes ~0.1 ms
        # late, which would bias every short step by a percent or more.
        while (left := deadline - time.monotonic()) > _SPIN_S:
            time.sleep(left - _SPIN_S)
        while (now := time.monotonic()) < deadline:
            time.sleep(0)  # releases the GIL, so the server threads keep running
        late = now - deadline
        self.last_late_s = late
        self.carry_s = late if late < MAX_CATCH_UP_S else 0.0
        return out  # type: ignore[return-value]  # a work with drafts gets a list, as Executor.execute says

    def _sample(self, batch: StepBatch) -> dict[int, int | list[int]]:
        # Copying from the context and verifying drafts: each token is the one greedy
        # decoding would give at its position, drafts before it taken as its context.
        out: dict[int, int | list[int]] = {}
        for w in batch.seqs:
            if not w.sample:
                continue
            p = w.params
            drafts = w.token_ids[len(w.token_ids) - w.num_draft_tokens:] if w.num_draft_tokens else []
            pos = w.start_pos + len(w.token_ids) - len(drafts)
            text = (self.texts.text(w.seq_id, w.context, pos)
                    if self.copy_probability and w.context is not None else None)
            tokens = [self._token(w.seq_id, p.seed, p.temperature, pos + j, w.num_output_tokens + j,
                                  p.ignore_eos, None if text is None else text + as_text(drafts[:j]))
                      for j in range(len(drafts) + 1)]
            out[w.seq_id] = tokens if w.num_draft_tokens else tokens[0]
        self.texts.end_step()
        return out

    def idle(self) -> None:
        """The engine had nothing to run: an idle device owes nothing to the next step."""
        self.carry_s = 0.0

    def natural_output_len(self, stream: int, prompt_len: int) -> int | None:
        """Tokens this sequence answers with before EOS; None when the sim never stops early."""
        if self.output_median <= 0:
            return None
        u = _mix(stream ^ _mix(prompt_len ^ 0x0E05))
        # Two uniforms -> one standard normal (Box-Muller); deterministic per stream and prompt.
        u1 = ((u >> 11) + 1) / ((1 << 53) + 1)
        u2 = (_mix(u) >> 11) / (1 << 53)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return max(_MIN_NATURAL_OUTPUT, round(self.output_median * math.exp(self.output_sigma * z)))

    def stream(self, seq_id: int, seed: int | None, temperature: float) -> int:
        # Greedy requests and seeded ones get the same tokens every time; unseeded sampled
        # requests differ per sequence. Only the stream's identity and position matter.
        if seed is not None:
            return _mix(seed ^ 0x5EED)
        if temperature == 0.0:
            return _mix(self.seed)
        return _mix(self.seed ^ (seq_id << 20))

    def _token(self, seq_id: int, seed: int | None, temperature: float, position: int,
               num_output: int = 0, ignore_eos: bool = False, text: str | None = None) -> int:
        stream = self.stream(seq_id, seed, temperature)
        # With ignore_eos a model keeps writing ordinary text past where it would have stopped.
        natural = None if ignore_eos else self.natural_output_len(stream, position - num_output)
        if natural is not None and num_output >= natural:
            return EOS_ID
        r = _mix(stream ^ position)
        if self.eos_probability and (r >> 11) / (1 << 53) < self.eos_probability:
            return EOS_ID
        if text is not None and (_mix(r ^ 0xC0DE) >> 11) / (1 << 53) < self.copy_probability:
            copied = copied_token(text, position)
            if copied is not None:
                return copied
        return _PRINTABLE_FIRST + r % _PRINTABLE_COUNT

    def memory_report(self) -> dict[str, int]:
        p = self.plan
        return {
            "weights": int(p.weights_bytes),
            "kv_pool": int(self.num_blocks * p.bytes_per_block),
            # What the engine reserves besides weights and KV: peak activations, non-torch
            # allocations (NCCL, allocator), CUDA graphs.
            "other": int(p.activation_bytes + p.non_torch_bytes + p.cuda_graph_bytes),
        }
