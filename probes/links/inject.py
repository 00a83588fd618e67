"""The lab's link fault: `--inject slow-link:rank=R,factor=F` (the reference engine's syntax).

A link at 1/F of its rate makes every transfer through it F times as long, and a collective
waits for its slowest member. The probe reproduces that on rank R: after each of its
collective or point-to-point calls it sleeps (F - 1) times the fastest that call has been so
far (the transfer itself, without the host's scheduling noise, which a plain "time the call
took" would multiply too), so each call costs R about F transfers and every peer that next
waits for R sees it. Only ops
R takes part in are slowed: a subgroup without R, or a pair without it, runs at full speed,
which is what lets the bisection and the pair matrix find R. `peer=P` narrows the fault to
the one link between R and P (pairs (R, P) only; collectives containing both ranks), for
tests of the pair verdict.

This is a lab feature: it slows the probe's own traffic, never a real link.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from probes.links.errors import LinkProbeError

_FIELDS = {"rank": int, "factor": float, "peer": int}
EXAMPLE = "slow-link:rank=1,factor=3"


@dataclass(frozen=True)
class SlowLink:
    rank: int
    factor: float
    peer: int | None = None

    def __str__(self) -> str:
        peer = f",peer={self.peer}" if self.peer is not None else ""
        return f"slow-link:rank={self.rank},factor={self.factor:g}{peer}"

    def applies(self, rank: int, members: tuple[int, ...]) -> bool:
        """Is `rank`'s call among `members` slowed?"""
        if rank != self.rank or rank not in members:
            return False
        return self.peer is None or self.peer in members

    def delay(self, rank: int, members: tuple[int, ...], elapsed_s: float) -> None:
        if self.applies(rank, members) and elapsed_s > 0:
            time.sleep((self.factor - 1.0) * elapsed_s)


def parse_inject(spec: str, world_size: int) -> SlowLink:
    """Parse `slow-link:rank=R,factor=F[,peer=P]`; LinkProbeError names what is wrong."""
    kind, _, rest = spec.strip().partition(":")
    if kind.strip() != "slow-link":
        raise LinkProbeError(f"--inject: fault kind {kind.strip()!r} is unknown (expected slow-link, "
                             f"e.g. {EXAMPLE})")
    params: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        name, eq, raw = item.partition("=")
        name = name.strip()
        if not eq:
            raise LinkProbeError(f"--inject slow-link: {item!r} is not field=value")
        if name not in _FIELDS:
            raise LinkProbeError(f"--inject slow-link: unknown field {name!r} (expected rank, factor, peer)")
        try:
            params[name] = _FIELDS[name](raw.strip())
        except ValueError:
            raise LinkProbeError(f"--inject slow-link: field {name} must be {_FIELDS[name].__name__}, "
                                 f"got {raw.strip()!r}") from None
    for name in ("rank", "factor"):
        if name not in params:
            raise LinkProbeError(f"--inject slow-link: field {name} is required (e.g. {EXAMPLE})")
    rank, factor = int(params["rank"]), float(params["factor"])
    peer = int(params["peer"]) if "peer" in params else None
    if not 0 <= rank < world_size:
        raise LinkProbeError(f"--inject slow-link: rank {rank} is not one of the {world_size} ranks")
    if peer is not None and (not 0 <= peer < world_size or peer == rank):
        raise LinkProbeError(f"--inject slow-link: peer {peer} must be another of the {world_size} ranks")
    if not factor >= 1.0 or factor > 1000:
        raise LinkProbeError(f"--inject slow-link: field factor must be in [1, 1000], got {factor:g}")
    return SlowLink(rank, factor, peer)
