"""Tensor parallelism for the torch executor: N ranks joined by torch.distributed.

Rank 0 (`tp_executor.TPExecutor`) lives in the engine process and drives every step; ranks
1..N-1 are `worker` processes. Each rank holds its shard (`sharding`), computes through
`shard_executor`, issues every collective through `communicator` into its `collective_log`,
and runs a `watchdog` that dumps the log in Flight Recorder's format (`flight_recorder`).
The interface other tools rely on (`--dump-dir`, `/debug/ranks`, the dump format, the
faults) is in docs/interfaces.md, "Tensor parallel".
"""
