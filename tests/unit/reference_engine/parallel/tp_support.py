"""Drive an in-process engine (rank 0 here, other ranks as real processes) to completion."""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reference_engine.config import EngineConfig
from reference_engine.engine import Engine
from reference_engine.request import SamplingParams

# Varied lengths: a prompt longer than the token budget is chunked across steps.
PROMPTS = [[1, 2, 3, 4, 5], [7] * 20, list(range(30, 75)), [200, 13, 99]]


def tp_config(tp: int, **kw: object) -> EngineConfig:
    base: dict[str, object] = dict(executor="torch", tensor_parallel_size=tp, num_gpu_blocks=64,
                                   max_model_len=256, max_num_batched_tokens=32, max_num_seqs=8)
    return EngineConfig(**{**base, **kw})  # type: ignore[arg-type]


@contextlib.contextmanager
def engine(config: EngineConfig) -> Iterator[Engine]:
    eng = Engine(config)
    try:
        yield eng
    finally:
        eng.stop()


def generate(eng: Engine, prompts: list[list[int]], max_tokens: int = 10,
             params: SamplingParams | None = None, timeout_s: float = 120.0,
             ) -> dict[int, list[int]]:
    """Greedy outputs per prompt, stepping the engine in this thread."""
    outs: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    for i, prompt in enumerate(prompts):
        eng.add_request(f"r{i}", prompt, params or SamplingParams(
            max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
            lambda o, i=i: outs[i].extend(o.new_token_ids))
    deadline = time.monotonic() + timeout_s
    while eng.scheduler.has_work() or eng._inbox:
        assert time.monotonic() < deadline, "generation did not finish in time"
        eng.step()
    return outs


class PlainOnly(pickle.Unpickler):
    """What a careful reader does: a dump may name no class at all."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"dump refers to {module}.{name}")


def load_dump(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return PlainOnly(f).load()
