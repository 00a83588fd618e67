"""Link probe: measure collectives and point-to-point links between N ranks, find the slow one.

`run_probe(ProbeConfig(...))` starts N local ranks joined by torch.distributed (gloo on CPU,
NCCL with one GPU per rank), sweeps message sizes for all-reduce, all-gather,
reduce-scatter, all-to-all and broadcast, optionally measures every pair's send/recv, and
bisects the ranks to name the one whose links are slow (`bisect`, `pairwise`). Sizes,
algbw and busbw follow nccl-tests (`busbw`), whose text output `nccl_tests.parse_nccl_tests`
reads into the same `collectives` table (`storage`). `--inject slow-link:rank=R,factor=F`
is the lab's fault (`inject`).

torch is imported only by the rank processes (`worker`, `ops`) and, inside `run_probe`, to
pick the backend: reading nccl-tests output needs no torch. `run_probe` lives in
`probes.links.launcher`.
"""

from probes.links.errors import LinkProbeError
from probes.links.inject import SlowLink, parse_inject
from probes.links.plan import ProbeConfig, parse_ops, parse_sizes

__all__ = ["LinkProbeError", "ProbeConfig", "SlowLink", "parse_inject", "parse_ops", "parse_sizes"]
