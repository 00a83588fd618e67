"""One rank's share of the model: the torch executor's step, on a tensor-parallel shard.

The step preparation (flattening a batch, block tables to cache slots) is the torch
executor's, so every rank turns the same `StepBatch` into the same flat batch; only the
weights and the KV cache (this rank's KV heads) are narrower, and the model all-reduces its
row-parallel outputs through the communicator. Rank 0 samples (`execute`); the other ranks
only compute (`forward`).
"""

from __future__ import annotations

import torch

from reference_engine.executor import StepBatch
from reference_engine.model import PagedKVCache, TinyLlamaConfig
from reference_engine.parallel.communicator import Communicator
from reference_engine.parallel.sharding import shard_model
from reference_engine.torch_executor import TorchExecutor


class ShardExecutor(TorchExecutor):
    def __init__(self, model_config: TinyLlamaConfig, rank: int, world: int,
                 comm: Communicator, *, block_size: int, num_blocks: int | None,
                 gpu_memory_utilization: float = 0.9, seed: int = 0, device: str = "cpu",
                 dtype: torch.dtype | None = None) -> None:
        # The whole model is built from the seed first (one block of cache: the real pool is
        # sized for the shard below), then narrowed to this rank's shard.
        super().__init__(model_config, block_size=block_size, num_blocks=1, seed=seed,
                         device=device, dtype=dtype)
        self.rank, self.world = rank, world
        shard_model(self.model, rank, world, comm.all_reduce)
        self.num_blocks = self._decide_num_blocks(num_blocks, None, gpu_memory_utilization)
        self.cache = PagedKVCache(model_config, self.num_blocks, block_size, self.device,
                                  self.dtype, num_kv_heads=self.model.num_kv_heads)

    def forward(self, batch: StepBatch) -> None:
        """Compute this rank's share of the step (its collectives included); no sampling."""
        if not batch.seqs:
            return
        with torch.inference_mode():
            flat = self._flatten(batch.seqs)
            self.model.forward_paged(flat.token_ids, flat.positions, flat.plan, self.cache)
