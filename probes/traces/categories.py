"""Kineto's event categories: the GPU ones and the `kind` the store gives each
(trace_gpu_ops.kind), the CPU operators' (trace_cpu_ops) and the annotations' a step can be.

Shared by the store import (SQL) and the in-memory timeline (numpy); a module of its own so
that the in-memory path imports none of the importer's DuckDB.
"""

GPU_CATEGORIES = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy",
                  "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset",
                  "cuda_sync": "sync", "mtia_ccp_events": "kernel"}

# Host-side operator events (the store's trace_cpu_ops): torch ops under either spelling
# Kineto has used, and Python stack frames (with_stack).
CPU_OP_CATEGORIES = ("cpu_op", "Operator", "python_function")
# What a step may be marked with besides an operator: record_function ranges, host and GPU.
ANNOTATION_CATEGORIES = ("user_annotation", "gpu_user_annotation")


def sql_list(cats: tuple[str, ...]) -> str:
    """`'a', 'b'` for an SQL `IN (...)` (the names are constants of this module)."""
    return ", ".join(f"'{c}'" for c in cats)
