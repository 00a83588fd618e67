"""Start N rank processes on this host, wait for the probe, always clean them up.

Ranks are `multiprocessing` spawn children (torch.multiprocessing's default for CUDA) that
meet at a TCP rendezvous on 127.0.0.1. The launcher owns them: whatever happens (a rank
fails, the probe runs past `timeout_s`, the user presses Ctrl-C) every child still alive is
killed and reaped before `run_probe` returns or raises, and the scratch folder is removed.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.links.errors import LinkProbeError
from probes.links.plan import ProbeConfig


@dataclass
class ProbeResult:
    config: ProbeConfig
    backend: str
    rows: list[dict[str, Any]]
    bisect: dict[str, Any] | None
    pairwise: dict[str, Any] | None
    hostname: str
    device: str
    torch_version: str
    seconds: float


def resolve_backend(requested: str, ranks: int) -> str:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "nccl" and gpus < ranks:
        raise LinkProbeError(f"--backend nccl needs one GPU per rank: {ranks} ranks, {gpus} GPU(s) visible")
    if requested == "auto":
        return "nccl" if gpus >= ranks else "gloo"
    return requested


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _first_error(out: Path, exitcodes: dict[int, int | None]) -> str:
    for r in sorted(exitcodes):
        f = out / f"error-{r}.txt"
        if f.exists():
            return f"rank {r}: " + f.read_text(encoding="utf-8").splitlines()[0]
    bad = {r: c for r, c in exitcodes.items() if c not in (0, None)}
    return "rank(s) exited with " + ", ".join(f"{r}: {c}" for r, c in sorted(bad.items()))


def run_probe(cfg: ProbeConfig) -> ProbeResult:
    """Run the probe; LinkProbeError (one line) when it cannot, ImportError without torch."""
    cfg.check()
    from probes.links import worker  # torch: only now, so importing the package needs none
    backend = resolve_backend(cfg.backend, cfg.ranks)
    payload = {**cfg.as_dict(), "backend": backend}
    ctx = mp.get_context("spawn")
    out = Path(tempfile.mkdtemp(prefix="infbench-links-"))
    procs: list[Any] = []
    try:
        port = _free_port()
        for r in range(cfg.ranks):
            p = ctx.Process(target=worker.main, args=(r, payload, port, str(out)), daemon=True,
                            name=f"infbench-links-rank{r}")
            p.start()
            procs.append(p)  # only started processes: those are the ones to reap
        deadline = time.monotonic() + cfg.timeout_s
        while any(p.is_alive() for p in procs):
            codes = {r: p.exitcode for r, p in enumerate(procs)}
            if any(c not in (None, 0) for c in codes.values()):
                time.sleep(0.5)  # let the failing rank finish writing its error
                raise LinkProbeError("link probe failed: " + _first_error(out, codes))
            if time.monotonic() > deadline:
                raise LinkProbeError(f"link probe did not finish within {cfg.timeout_s:g} s "
                                     "(a rank stopped answering); all ranks were stopped")
            procs[0].join(0.2)
        codes = {r: p.exitcode for r, p in enumerate(procs)}
        if any(c != 0 for c in codes.values()) or not (out / "result.json").exists():
            raise LinkProbeError("link probe failed: " + _first_error(out, codes))
        res = json.loads((out / "result.json").read_text(encoding="utf-8"))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        shutil.rmtree(out, ignore_errors=True)
    return ProbeResult(cfg, res["backend"], res["rows"], res["bisect"], res["pairwise"], res["hostname"],
                       res["device"], res["torch"], res["seconds"])
