"""The parts of the multi-rank engine that need no second process."""

from __future__ import annotations

import pickle
import time

import pytest
import torch

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import build_executor
from reference_engine.faults import Faults, FaultSpecError, parse_fault
from reference_engine.model import MODEL_PRESETS, TinyLlama
from reference_engine.parallel.collective_log import CollectiveLog
from reference_engine.parallel.flight_recorder import build_dump, write_dump
from reference_engine.parallel.rank_faults import check_rank_faults, for_rank
from reference_engine.parallel.sharding import ShardingError, check_shardable, shard_model


def test_rank_fault_specs_parse_and_name_their_rank() -> None:
    f = Faults(["hang:rank=1,at_step=4", "slow-link:rank=2,factor=3", "mismatch:rank=0,at_step=2"])
    assert f.hang_at_step is None  # a rank hang leaves the step loop alone
    assert for_rank(f, 1).hang_at_step == 4 and for_rank(f, 1).slow_factor == 1.0
    assert for_rank(f, 2).slow_factor == 3.0 and for_rank(f, 2).hang_at_step is None
    assert for_rank(f, 0).mismatch_at_step == 2
    assert Faults(["hang:at_step=4"]).hang_at_step == 4 and not Faults(["hang:at_step=4"]).rank_specs


@pytest.mark.parametrize(("spec", "message"), [
    ("slow-link:rank=1", "field factor is required"),
    ("slow-link:rank=1,factor=0.5", "factor must be >= 1"),
    ("mismatch:rank=1", "field at_step is required"),
    ("mismatch:rank=1,at_step=0", "at_step must be >= 1"),
    ("mismatch:rank=x,at_step=2", "rank must be int"),
])
def test_bad_rank_fault_specs_are_refused_naming_the_field(spec: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message):
        parse_fault(spec)


def test_rank_faults_need_real_ranks() -> None:
    with pytest.raises(FaultSpecError, match="rank 2 is outside 0..1"):
        check_rank_faults(Faults(["slow-link:rank=2,factor=2"]), "torch", 2)
    # The sim models tensor parallelism but has no ranks to hang: one clear line.
    config = EngineConfig(executor="sim", tensor_parallel_size=2, faults=["hang:rank=1,at_step=3"])
    with pytest.raises(ConfigError, match=r"^fault hang:rank=1,at_step=3: needs --executor "
                                          r"torch with --tensor-parallel-size >= 2"):
        build_executor(config, Faults(config.faults))


def test_sharding_refuses_what_does_not_divide() -> None:
    c = MODEL_PRESETS["tiny-llama"]  # 4 heads, 2 KV heads, 352 intermediate
    check_shardable(c, 4)  # KV heads replicated: 4 is a multiple of 2
    with pytest.raises(ShardingError, match="does not divide num_heads"):
        check_shardable(c, 3)
    with pytest.raises(ShardingError, match="does not divide num_heads"):
        check_shardable(c, 8)


@pytest.mark.parametrize("world", [2, 4])
def test_shards_sum_to_the_whole_model(world: int) -> None:
    # The partial outputs of the row-parallel layers, summed over ranks, are the whole
    # model's: run all shards in lockstep threads with a summing "all-reduce".
    import threading

    c = MODEL_PRESETS["tiny-llama"]
    ids, pos = torch.tensor([3, 17, 99, 5, 42]), torch.arange(5)
    whole = TinyLlama(c, seed=7)

    def attend(model: TinyLlama) -> object:
        def f(_: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1)[None], model._expand_kv(k).transpose(0, 1)[None],
                model._expand_kv(v).transpose(0, 1)[None], is_causal=True)[0].transpose(0, 1)
        return f

    expected = whole.hidden_states(ids, pos, attend(whole))
    barrier = threading.Barrier(world)
    parts: list[torch.Tensor | None] = [None] * world
    results: list[torch.Tensor | None] = [None] * world

    def reducer(rank: int) -> object:
        def all_reduce(t: torch.Tensor) -> torch.Tensor:
            parts[rank] = t.clone()
            barrier.wait()
            total = torch.stack([p for p in parts if p is not None]).sum(0)
            barrier.wait()
            return total
        return all_reduce

    def run(rank: int) -> None:
        model = shard_model(TinyLlama(c, seed=7), rank, world, reducer(rank))  # type: ignore[arg-type]
        results[rank] = model.hidden_states(ids, pos, attend(model))  # type: ignore[arg-type]

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in range(world):
        assert results[r] is not None
        torch.testing.assert_close(results[r], expected, rtol=1e-5, atol=1e-5)


def _log_with(n: int) -> CollectiveLog:
    log = CollectiveLog("gloo", [0, 1], timeout_s=2.0)
    t = torch.zeros(4, 8)
    for i in range(n):
        e = log.scheduled("all_reduce", [t], [t], [{"name": "f", "filename": "x.py", "line": i}])
        log.started(e)
        if i < n - 1:
            log.completed(e)
    log.check_invariants()
    return log


def test_collective_log_states_and_status() -> None:
    log = _log_with(3)
    entries = log.entries()
    assert [e["state"] for e in entries] == ["completed", "completed", "started"]
    assert [e["collective_seq_id"] for e in entries] == [1, 2, 3]
    assert entries[0]["input_sizes"] == [[4, 8]] and entries[0]["input_dtypes"] == ["Float"]
    assert log.pg_status()["0"] == {"last_enqueued_collective": 3, "last_started_collective": 3,
                                    "last_completed_collective": 2}
    in_flight = log.in_flight()
    assert in_flight is not None and in_flight[0]["collective_seq_id"] == 3


def _torch_entry(seq: int, name: str = "gloo:all_reduce", sizes: list[list[int]] | None = None,
                 ) -> dict[str, object]:
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "profiling_name": name, "time_created_ns": time.time_ns(),
            "input_sizes": sizes or [[4, 8]], "input_dtypes": ["Float"],
            "output_sizes": sizes or [[4, 8]], "output_dtypes": ["Float"], "state": "scheduled",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": False, "thread_id": "1", "thread_name": "python"}


def test_dump_overlays_states_on_torch_entries_when_they_agree(tmp_path: object) -> None:
    log = _log_with(3)
    trace = {"comm_lib_version": "2.1", "entries": [_torch_entry(s) for s in (1, 2, 3)]}
    dump = build_dump(log, trace)
    assert [e["state"] for e in dump["entries"]] == ["completed", "completed", "started"]
    assert all(e["thread_name"] == "python" and e["frames"] for e in dump["entries"])
    assert dump["comm_lib_version"] == "2.1"
    assert set(dump) == {"version", "pg_config", "pg_status", "entries", "comm_lib_version"}


def test_dump_falls_back_to_the_own_log_when_torch_disagrees() -> None:
    log = _log_with(2)
    trace = {"entries": [_torch_entry(1), _torch_entry(2, sizes=[[9]])]}
    dump = build_dump(log, trace)
    assert [e["input_sizes"] for e in dump["entries"]] == [[[4, 8]], [[4, 8]]]
    assert "thread_name" in dump["entries"][0]


def test_dump_file_holds_plain_types_only(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "rank_0"
    write_dump(build_dump(_log_with(2), None), path)

    class NoClasses(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            raise pickle.UnpicklingError(f"{module}.{name}")

    with path.open("rb") as f:
        dump = NoClasses(f).load()
    assert dump["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    with pytest.raises(TypeError, match="not a plain type"):
        write_dump({"entries": [object()]}, path)
