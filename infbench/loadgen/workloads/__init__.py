"""Workloads: what to send (prompts, lengths, conversations), seeded and reproducible."""

from infbench.loadgen.workloads.base import RequestSpec, Session, Workload
from infbench.loadgen.workloads.multiturn import MultiTurn
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.sharegpt import ShareGPT
from infbench.loadgen.workloads.synthetic import SharedPrefix, Structured, Synthetic
from infbench.loadgen.workloads.trace import Trace, read_trace

WORKLOADS = ("synthetic", "prefix", "multiturn", "sharegpt", "trace", "structured")

__all__ = [
    "WORKLOADS",
    "MultiTurn",
    "RequestSpec",
    "Session",
    "ShareGPT",
    "SharedPrefix",
    "Structured",
    "Synthetic",
    "TokenModel",
    "Trace",
    "Workload",
    "read_trace",
]
