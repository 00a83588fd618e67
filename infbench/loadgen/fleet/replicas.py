"""Fleet runs: one workload spread over several replicas of the same model.

`infbench run --url A --url B ...` (or `--targets FILE`) names the replicas; `--route` says how
each session is given to one: `round-robin`, `least-outstanding` (the replica with the fewest
requests in flight, ties to the one that has been sent the fewest) or a fixed share
(`share:A=2,B=1`, or `share:2,1,1` in replica order), dealt by smooth weighted round robin so
every stretch of the run has the asked proportions. Routing uses no random stream: the
workload's seed decides the arrival schedule, lengths and text exactly as for one target, and
the router decides only where each session goes. A conversation's turns stay on the replica
its first turn went to (as a sticky load balancer keeps them, for the prefix cache).
"""

from __future__ import annotations

import math
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROUTE_KINDS = ("round-robin", "least-outstanding", "share")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


@dataclass
class Replica:
    """One replica of the fleet. `metrics_url`, `steps_url` and `steps_after` are filled by
    preflight; `gpu_metrics_url` is a dcgm-exporter endpoint given in a targets file."""

    name: str
    url: str
    gpu_metrics_url: str | None = None
    metrics_url: str | None = None
    steps_url: str | None = None
    steps_after: int = -1

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "url": self.url, "metrics_url": self.metrics_url,
                "gpu_metrics_url": self.gpu_metrics_url, "steps_url": self.steps_url}


@dataclass(frozen=True)
class RoutePolicy:
    kind: str                              # one of ROUTE_KINDS
    weights: tuple[float, ...] = ()        # share: one per replica, in replica order

    def describe(self, replicas: list[Replica]) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind}
        if self.kind == "share":
            total = sum(self.weights)
            out["shares"] = {r.name: round(w / total, 6) for r, w in zip(replicas, self.weights, strict=True)}
        return out


def _default_name(url: str, index: int, taken: set[str]) -> str:
    parts = urllib.parse.urlsplit(url)
    name = parts.netloc or f"r{index + 1}"
    return name if name not in taken else f"r{index + 1}"


def parse_replicas(args: list[str]) -> list[Replica]:
    """`--url` values: `URL` or `NAME=URL`. A replica without a name is called by its
    host:port (r1, r2, ... where two share one)."""
    out: list[Replica] = []
    taken: set[str] = set()
    for i, arg in enumerate(args):
        name, eq, url = arg.partition("=")
        if not eq or "://" in name:
            name, url = "", arg
        url = url.strip().rstrip("/")
        if name:
            if not _NAME.match(name):
                raise ValueError(f"url: replica name {name!r} must be letters, digits and ._:- "
                                 "(at most 64, starting with a letter or digit)")
        else:
            name = _default_name(url, i, taken)
        if name in taken:
            raise ValueError(f"url: two replicas are called {name!r}")
        taken.add(name)
        out.append(Replica(name=name, url=url))
    return out


def read_targets(path: Path) -> list[Replica]:
    """A targets file: one replica a line, `[NAME=]URL [dcgm=METRICS_URL]`; `#` starts a
    comment. `dcgm=` names the replica's dcgm-exporter endpoint, scraped beside its /metrics."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"targets: cannot read {path}: {exc.strerror or exc}") from None
    args: list[str] = []
    dcgm: list[str | None] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        extra = None
        for f in fields[1:]:
            key, eq, value = f.partition("=")
            if key != "dcgm" or not eq or not value:
                raise ValueError(f"targets: {path} line {n}: {f!r} is not dcgm=URL")
            extra = value
        args.append(fields[0])
        dcgm.append(extra)
    if not args:
        raise ValueError(f"targets: {path} names no replica")
    replicas = parse_replicas(args)
    for r, d in zip(replicas, dcgm, strict=True):
        r.gpu_metrics_url = d
    return replicas


def parse_route(text: str, replicas: list[Replica]) -> RoutePolicy:
    kind, _, rest = text.strip().partition(":")
    if kind not in ROUTE_KINDS:
        raise ValueError(f"route: {text!r} is not one of round-robin, least-outstanding, "
                         "share:NAME=W,... (or share:W,W,... in replica order)")
    if kind != "share":
        if rest:
            raise ValueError(f"route: {kind} takes no parameters (got {rest!r})")
        return RoutePolicy(kind)
    items = [p.strip() for p in rest.split(",") if p.strip()]
    if not items:
        raise ValueError("route: share needs weights, e.g. share:A=2,B=1")
    names = [r.name for r in replicas]
    weights: dict[str, float] = {}
    for pos, item in enumerate(items):
        name, eq, w = item.rpartition("=")
        if not eq:  # positional: share:2,1,1
            if pos >= len(names):
                raise ValueError(f"route: {len(items)} weights for {len(names)} replicas")
            name = names[pos]
        if name not in names:
            raise ValueError(f"route: no replica called {name!r} (replicas: {', '.join(names)})")
        try:
            value = float(w)
        except ValueError:
            raise ValueError(f"route: weight {w!r} of {name} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"route: weight of {name} must be a number >= 0, got {w}")
        weights[name] = value
    if sum(weights.values()) <= 0:
        raise ValueError("route: at least one share weight must be > 0")
    return RoutePolicy("share", tuple(weights.get(n, 0.0) for n in names))


@dataclass
class Router:
    """Chooses the replica of each session and counts what is in flight on each.

    Ownership: one per run, used only from the runner's event loop; `in_flight[i]` and
    `sent[i]` are changed only through `started`/`finished`.
    """

    policy: RoutePolicy
    n: int
    in_flight: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    _next: int = 0
    _credit: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("router: needs at least one replica")
        if self.policy.kind == "share" and len(self.policy.weights) != self.n:
            raise ValueError("router: one share weight per replica")
        self.in_flight = [0] * self.n
        self.sent = [0] * self.n
        self._credit = [0.0] * self.n

    def pick(self) -> int:
        if self.n == 1:
            return 0
        kind = self.policy.kind
        if kind == "round-robin":
            i = self._next
            self._next = (i + 1) % self.n
            return i
        if kind == "least-outstanding":
            return min(range(self.n), key=lambda j: (self.in_flight[j], self.sent[j], j))
        # Smooth weighted round robin (nginx's): every replica gains its weight, the richest is
        # chosen and pays the total; the shares hold over any window, not only on average.
        w = self.policy.weights
        total = sum(w)
        for j in range(self.n):
            self._credit[j] += w[j]
        i = max(range(self.n), key=lambda j: (self._credit[j], -j))
        self._credit[i] -= total
        return i

    def started(self, i: int) -> int:
        """A request is handed to replica i's socket; returns its concurrency there (itself
        included)."""
        self.in_flight[i] += 1
        self.sent[i] += 1
        return self.in_flight[i]

    def finished(self, i: int) -> None:
        self.in_flight[i] -= 1

    def check_invariants(self) -> None:
        assert all(f >= 0 for f in self.in_flight), self.in_flight
        assert all(s >= f for s, f in zip(self.sent, self.in_flight, strict=True))
