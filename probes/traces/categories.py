"""Kineto's GPU event categories and the `kind` the store gives each (trace_gpu_ops.kind).

Shared by the store import (SQL) and the in-memory timeline (numpy); a module of its own so
that the in-memory path imports none of the importer's DuckDB.
"""

GPU_CATEGORIES = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy",
                  "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset",
                  "cuda_sync": "sync", "mtia_ccp_events": "kernel"}
