"""The torch executor: runs each scheduled step through the tiny Llama on CPU or CUDA.

Every step is one forward pass over the tokens of all its sequences together (prefill
chunks and decodes mixed), which is what continuous batching buys: the weights are
read once per step, not once per sequence. The KV pool lives here as tensors; which
block belongs to whom is decided by the block pool, and arrives as block tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_engine.config import EngineConfig
from reference_engine.executor import SeqWork, StepBatch
from reference_engine.model import (
    MODEL_PRESETS,
    PagedAttentionPlan,
    PagedKVCache,
    TinyLlama,
    TinyLlamaConfig,
)
from reference_engine.sampler import sample_batch, seeded_generator
from reference_engine.tokenizer import EOS_ID

# Without --num-gpu-blocks, a CPU run gets this much KV pool (host RAM has no
# "utilisation" knob worth copying); 128 MiB is ~130k tokens of the default tiny model.
DEFAULT_CPU_KV_BYTES = 128 << 20
# On CUDA, kept free beyond weights and KV for activations and the allocator's slack;
# the tiny model's largest step needs far less.
CUDA_ACTIVATION_RESERVE_BYTES = 512 << 20
# Ceiling for a pool sized from a memory budget (not for an explicit num_blocks). The tiny
# model's KV is a few KiB per block, so 90% of a large GPU would mean tens of millions of
# blocks, each with bookkeeping in the Python block pool; 2**20 blocks is 16M tokens at
# block size 16, more than any realistic load on this engine can occupy.
MAX_BUDGETED_BLOCKS = 1 << 20
CUDA_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class _FlatBatch:
    token_ids: torch.Tensor
    positions: torch.Tensor
    plan: PagedAttentionPlan
    sample_rows: list[int]
    sample_works: list[SeqWork]


class TorchExecutor:
    name = "torch"
    eos_token_id = EOS_ID

    def __init__(
        self,
        model_config: TinyLlamaConfig = MODEL_PRESETS["tiny-llama"],
        *,
        block_size: int = 16,
        num_blocks: int | None = None,
        kv_cache_bytes: int | None = None,
        gpu_memory_utilization: float = 0.9,
        seed: int = 0,
        device: str = "auto",
        dtype: torch.dtype | None = None,
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {block_size}")
        self.device = resolve_device(device)
        self.dtype = dtype or torch.float32
        self.block_size = block_size
        self.model = TinyLlama(model_config, seed=seed, device=self.device, dtype=self.dtype)
        self.num_blocks = self._decide_num_blocks(num_blocks, kv_cache_bytes, gpu_memory_utilization)
        self.cache = PagedKVCache(model_config, self.num_blocks, block_size, self.device, self.dtype)
        # Unseeded requests share one stream; seeded ones derive theirs from (seed, position).
        self._rng = torch.Generator(device="cpu").manual_seed(seed)

    @classmethod
    def from_config(cls, config: EngineConfig) -> TorchExecutor:
        model_config = MODEL_PRESETS.get(config.model)
        if model_config is None:
            raise ValueError(f"model: the torch executor runs a built-in random-weight model "
                             f"({', '.join(MODEL_PRESETS)}), got {config.model!r}")
        device = resolve_device(config.device)
        dtype = torch.float32
        if device.type == "cuda":
            dtype = CUDA_DTYPES.get(config.dtype)
            if dtype is None:
                raise ValueError(f"dtype: the torch executor supports {', '.join(CUDA_DTYPES)}, "
                                 f"got {config.dtype!r}")
        return cls(model_config, block_size=config.block_size, num_blocks=config.num_gpu_blocks,
                   gpu_memory_utilization=config.gpu_memory_utilization, seed=config.seed,
                   device=str(device), dtype=dtype)

    def _decide_num_blocks(self, num_blocks: int | None, kv_cache_bytes: int | None,
                           utilization: float) -> int:
        per_block = PagedKVCache.bytes_per_block(self.model.config, self.block_size, self.dtype,
                                                 self.model.num_kv_heads)
        if num_blocks is None:
            if kv_cache_bytes is None:
                kv_cache_bytes = (self._cuda_kv_budget(utilization) if self.device.type == "cuda"
                                  else DEFAULT_CPU_KV_BYTES)
            num_blocks = min(kv_cache_bytes // per_block, MAX_BUDGETED_BLOCKS)
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive (one block is {per_block} bytes), "
                             f"got {num_blocks}")
        return int(num_blocks)

    def _cuda_kv_budget(self, utilization: float) -> int:
        # vLLM's rule: utilisation x total memory, minus what is already allocated
        # (weights), minus room for activations.
        total = torch.cuda.get_device_properties(self.device).total_memory
        used = torch.cuda.memory_allocated(self.device)
        return int(total * utilization) - used - CUDA_ACTIVATION_RESERVE_BYTES

    # -- the Executor protocol --------------------------------------------------------

    def execute(self, batch: StepBatch) -> dict[int, int]:
        """Run one step; writes K/V of every token into the cache at its block-table slot."""
        if not batch.seqs:
            return {}
        with torch.inference_mode():
            flat = self._flatten(batch.seqs)
            hidden = self.model.forward_paged(flat.token_ids, flat.positions, flat.plan, self.cache)
            if not flat.sample_rows:
                return {}
            logits = self.model.logits(hidden[flat.sample_rows])
            generators = [
                seeded_generator(w.params.seed, w.num_output_tokens)
                if w.params.seed is not None else self._rng
                for w in flat.sample_works
            ]
            tokens = sample_batch(logits, [w.params for w in flat.sample_works], generators)
        out: dict[int, int | list[int]] = {}
        for w, t in zip(flat.sample_works, tokens, strict=True):
            if w.num_draft_tokens:  # one greedy row per position of a verified draft
                out.setdefault(w.seq_id, []).append(t)  # type: ignore[union-attr]  # a draft's work has only lists
            else:
                out[w.seq_id] = t
        return out  # type: ignore[return-value]  # a work with drafts gets a list, as Executor.execute says

    def memory_report(self) -> dict[str, int]:
        weights, kv_pool = self.model.weight_bytes(), self.cache.nbytes()
        other = 0
        if self.device.type == "cuda":
            # Peak activations and workspace: what the allocator saw beyond the fixed parts.
            other = max(0, torch.cuda.max_memory_allocated(self.device) - weights - kv_pool)
        # On the CPU, activations are freed after each step and torch exposes no
        # allocator counter, so nothing persistent is reported beyond weights and KV.
        return {"weights": weights, "kv_pool": kv_pool, "other": other}

    def allocator_stats(self) -> dict[str, int]:
        """The CUDA caching allocator's counters (bytes in live tensors, bytes held from the
        device): their gap is what fragmentation costs. The CPU has no caching allocator,
        so nothing is reported there."""
        if self.device.type != "cuda":
            return {}
        return {"allocated": int(torch.cuda.memory_allocated(self.device)),
                "reserved": int(torch.cuda.memory_reserved(self.device))}

    # -- step preparation -------------------------------------------------------------

    def _flatten(self, works: list[SeqWork]) -> _FlatBatch:
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []
        sample_rows: list[int] = []
        sample_works: list[SeqWork] = []
        for work in works:
            n, start = len(work.token_ids), work.start_pos
            self._check(work)
            first = len(ids)
            ids += work.token_ids
            positions += range(start, start + n)
            ctx = start + n
            if n == 1:
                # A decode's keys are gathered later for all decodes at once.
                slots.append(work.block_table[start // bs] * bs + start % bs)
                decode_rows.append(first)
                decode_tables.append(work.block_table)
                decode_lens.append(ctx)
            else:
                key_pos = torch.arange(ctx)
                table = torch.tensor(work.block_table, dtype=torch.long)
                key_slots = table[key_pos // bs] * bs + key_pos % bs
                slots += key_slots[start:].tolist()
                query_pos = torch.arange(start, ctx)
                mask = key_pos[None, :] <= query_pos[:, None]
                prefills.append((first, first + n, key_slots.to(self.device), mask.to(self.device)))
            if work.sample:
                # A draft's verification needs the logits after each of its K+1 tokens.
                for row in range(first + n - 1 - work.num_draft_tokens, first + n):
                    sample_rows.append(row)
                    sample_works.append(work)
        plan = PagedAttentionPlan(torch.tensor(slots, device=self.device), None, None, None, prefills)
        if decode_rows:
            plan.decode_rows = torch.tensor(decode_rows, device=self.device)
            plan.decode_key_slots, plan.decode_key_mask = self._decode_keys(decode_tables,
                                                                            decode_lens)
        return _FlatBatch(torch.tensor(ids, device=self.device),
                          torch.tensor(positions, device=self.device),
                          plan, sample_rows, sample_works)

    def _decode_keys(self, tables: list[list[int]],
                     lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        # Pad every decode's context to the longest one; padding reads slot 0 of block 0
        # and is masked out, so one batched attention call serves all decodes.
        bs, longest = self.block_size, max(lens)
        width = -(-longest // bs)
        padded = torch.tensor([t[:width] + [0] * (width - min(len(t), width)) for t in tables],
                              dtype=torch.long)
        key_pos = torch.arange(longest)
        slots = padded[:, key_pos // bs] * bs + key_pos % bs
        mask = key_pos[None, :] < torch.tensor(lens)[:, None]
        return slots.to(self.device), mask[:, None, None, :].to(self.device)

    def _check(self, work: SeqWork) -> None:
        end = work.start_pos + len(work.token_ids)
        if not work.token_ids or work.start_pos < 0:
            raise ValueError(f"seq {work.seq_id}: token_ids must be non-empty and start_pos >= 0")
        if len(work.block_table) * self.block_size < end:
            raise ValueError(f"seq {work.seq_id}: block_table has {len(work.block_table)} blocks, "
                             f"too few for {end} positions at block_size {self.block_size}")
        if min(work.block_table) < 0 or max(work.block_table) >= self.num_blocks:
            raise ValueError(f"seq {work.seq_id}: block_table holds a block outside "
                             f"[0, {self.num_blocks})")
        if min(work.token_ids) < 0 or max(work.token_ids) >= self.model.config.vocab_size:
            raise ValueError(f"seq {work.seq_id}: token_ids outside the vocabulary")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} requested but CUDA is not available")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    return resolved
