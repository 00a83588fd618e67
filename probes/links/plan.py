"""What one link probe measures: ranks, ops, sizes, iterations, the verdicts asked for.

`ProbeConfig` is checked here, before any process starts, so bad input is one line and no
rank is ever launched for it. It travels to the ranks as a plain dict (`as_dict`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from probes.links.busbw import PROBE_OPS, canonical_op
from probes.links.errors import LinkProbeError
from probes.links.inject import SlowLink

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024 ** 2, "MB": 1024 ** 2,
          "MIB": 1024 ** 2, "G": 1024 ** 3, "GB": 1024 ** 3, "GIB": 1024 ** 3}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
MAX_BYTES = 1024 ** 3
DTYPES = ("float32", "float16", "bfloat16", "float64")


def parse_size(text: str) -> int:
    """`65536`, `64K`, `1M`, `1.5MiB` -> bytes (K = 1024, as nccl-tests' -b/-e)."""
    m = _SIZE.match(text)
    if not m or m.group(2).upper() not in _UNITS:
        raise LinkProbeError(f"size {text.strip()!r} is not a size (e.g. 4096, 64K, 1M)")
    n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if not 1 <= n <= MAX_BYTES:
        raise LinkProbeError(f"size {text.strip()!r} must be between 1 B and 1G")
    return n


def parse_sizes(text: str) -> list[int]:
    """A list `4K,64K,1M`, or a sweep `MIN:MAX[:FACTOR]` (nccl-tests' -b/-e/-f, factor 2)."""
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise LinkProbeError(f"--sizes {text!r}: a sweep is MIN:MAX or MIN:MAX:FACTOR")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        try:
            f = int(parts[2]) if len(parts) == 3 else 2
        except ValueError:
            raise LinkProbeError(f"--sizes {text!r}: FACTOR must be a whole number >= 2") from None
        if f < 2 or hi < lo:
            raise LinkProbeError(f"--sizes {text!r}: needs MIN <= MAX and FACTOR >= 2")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= f
        return out
    sizes = [parse_size(p) for p in text.split(",") if p.strip()]
    if not sizes:
        raise LinkProbeError("--sizes is empty")
    return sorted(set(sizes))


def parse_ops(text: str) -> list[str]:
    if text.strip().lower() == "all":
        return list(PROBE_OPS)
    ops = []
    for p in filter(None, (x.strip() for x in text.split(","))):
        op = canonical_op(p)
        if op not in PROBE_OPS:
            raise LinkProbeError(f"--ops: {p!r} is not one of {', '.join(PROBE_OPS)} (or 'all')")
        if op not in ops:
            ops.append(op)
    if not ops:
        raise LinkProbeError("--ops is empty")
    return ops


@dataclass
class ProbeConfig:
    ranks: int = 4
    ops: list[str] = field(default_factory=lambda: list(PROBE_OPS))
    sizes: list[int] = field(default_factory=lambda: [4096 * 4 ** i for i in range(6)])  # 4K..4M
    dtype: str = "float32"
    warmup: int = 3
    iters: int = 10
    repeats: int = 3
    pairwise: bool = False
    pair_size: int = 1024 ** 2
    bisect: bool = True
    bisect_size: int = 1024 ** 2
    threshold: float = 1.5
    verdict_iters: int = 20        # timed calls per verdict measurement (their 20th percentile kept)
    verdict_repeats: int = 5       # first batch of repeats for a bisection step / the pair matrix
    max_repeats: int = 15          # most repeats before the verdict says it cannot tell
    inject: SlowLink | None = None
    backend: str = "auto"          # auto | gloo | nccl
    timeout_s: float = 300.0       # the whole probe; a rank that hangs is killed after it

    def check(self) -> None:
        if not 2 <= self.ranks <= 64:
            raise LinkProbeError(f"--ranks must be between 2 and 64, got {self.ranks}")
        if self.dtype not in DTYPES:
            raise LinkProbeError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("warmup", "iters", "repeats", "verdict_iters", "verdict_repeats", "max_repeats"):
            v = getattr(self, name)
            if v < (0 if name == "warmup" else 1) or v > 10000:
                raise LinkProbeError(f"--{name.replace('_', '-')} must be between "
                                     f"{0 if name == 'warmup' else 1} and 10000, got {v}")
        if not 1.05 <= self.threshold <= 100:
            raise LinkProbeError(f"--slow-ratio must be between 1.05 and 100, got {self.threshold:g}")
        if self.backend not in ("auto", "gloo", "nccl"):
            raise LinkProbeError(f"--backend must be auto, gloo or nccl, got {self.backend!r}")
        if self.timeout_s <= 0:
            raise LinkProbeError("--timeout must be > 0")
        if self.inject is not None and not 0 <= self.inject.rank < self.ranks:
            raise LinkProbeError(f"--inject: rank {self.inject.rank} is not one of the {self.ranks} ranks")

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["inject"] = asdict(self.inject) if self.inject else None
        return d
