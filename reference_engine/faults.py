"""Fault injection: each fault leaves the signature the real incident leaves.

A spec is `kind:field=value,field=value` (the `--fault` flag, repeatable):

| kind | fields | signature |
| --- | --- | --- |
| `periodic-stall` | `every_steps=N` or `every_s=S`, `duration_ms=D` | every N steps (or S seconds, on a fixed schedule from the first step: the first step at or after each due time) one step lasts D ms longer, shared by every running request at the same wall time; those steps carry `fault="periodic-stall"` in the step log |
| `slow-device` | `factor=F` (> 1) | HBM bandwidth derated F times: every memory-bound step is slower by the roofline (sim), or every step stretched F times (other executors) |
| `memory-growth` | `bytes_per_request=B` | B bytes retained (really allocated and touched) per finished request: the process's RSS (`process_resident_memory_bytes` on /metrics) grows by B per finished request while the executor's components stay fixed; `/engine/memory`'s `retained` is the truth tests check against |
| `hang` | `at_step=N`, optional `rank=R` | without `rank`: the step loop stops before step N and never returns; HTTP, /health and /metrics keep answering, the step log stops at N-1. With `rank` (torch executor, tensor_parallel_size > R): rank R takes step N's work and then enters no collective, so the other ranks block inside one (the collective watchdog fires; the dumps show rank R's last collective behind the others') |
| `slow-link` | `rank=R`, `factor=F` (>= 1) | rank R's collective traffic is F times slower: each collective it takes part in lasts F times what the transfer took (torch executor, tensor_parallel_size > R) |
| `mismatch` | `rank=R`, `at_step=N` | at step N rank R issues an all-gather where the others issue the step's first all-reduce: op and output size differ at one collective sequence id, and the ranks block there (torch executor, tensor_parallel_size > R) |
| `throttle` | `reason=` thermal, power or sw, `sm_clock_mhz=N` | the simulated GPUs' SM clock is N MHz instead of their maximum (clock-event reason SwThermalSlowdown, SwPowerCap or ApplicationsClocksSetting): compute-bound work (prefill, the kernel floor) runs max/N times slower, HBM-bound decode much less; /metrics shows the clock, the reason, and heat or power at the cap (reference_engine/device.py) |
| `pcie` | `gen=G` and/or `width=W` | the host<->device link trained at Gen G xW below the board's maximum: each step's host<->device copies take their bytes at that bandwidth; /metrics shows the current vs maximum link |
| `xid` | `code=N`, optional `at_s=T` | T s after start (default 0) the GPU raises XID N: 63, 64, 92 only count ECC errors; any other code loses the device (requests in flight and after are aborted); /metrics shows the XID |
| `slow-collective` | `factor=F` (> 1), optional `bytes_per_token=` | each step adds (F-1) x the ideal tensor-parallel all-reduce time of its tokens (ring all-reduce over the GPU's interconnect); needs tensor_parallel_size > 1 |

One label is no injected fault: `host-late` marks a step that ended `HOST_LATE_S` or more
after it was due (the sim executor's deadline, then any injected sleep): the host did not run
the engine in time (a busy neighbour, a descheduled process). Such a pause is real and the
stall playbook rightly finds it; the label is the lab's truth that nobody injected it, so a
test can tell the host's stalls from the one it injected.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reference_engine.device import PCIE_LANE_GBPS, PCIE_WIDTHS, THROTTLE_BITS, GpuFaultConfig

THROTTLE_REASONS = tuple(THROTTLE_BITS)
# Past this lateness a step is the host's doing: a sleep wakes ~0.1 ms late and a busy
# 2-vCPU host adds a few ms, while the least stall the playbook counts is 50 ms.
HOST_LATE_S = 0.020

# kind -> {field: type}; `required` lists fields that must be given.
_FIELDS: dict[str, dict[str, type]] = {
    "periodic-stall": {"every_steps": int, "every_s": float, "duration_ms": float},
    "slow-device": {"factor": float},
    "memory-growth": {"bytes_per_request": int},
    "hang": {"at_step": int, "rank": int},
    "slow-collective": {"factor": float},
    "throttle": {"reason": str, "sm_clock_mhz": float},
    "pcie": {"gen": int, "width": int},
    "xid": {"code": int, "at_s": float},
    "slow-link": {"rank": int, "factor": float},
    "mismatch": {"rank": int, "at_step": int},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "periodic-stall": ("duration_ms",),
    "slow-device": ("factor",),
    "memory-growth": ("bytes_per_request",),
    "hang": ("at_step",),
    "slow-collective": ("factor",),
    "throttle": ("reason", "sm_clock_mhz"),
    "pcie": (),
    "xid": ("code",),
    "slow-link": ("rank", "factor"),
    "mismatch": ("rank", "at_step"),
}
# Faults that act on one tensor-parallel rank: they need the torch executor at TP > 1.
RANK_FAULT_KINDS = ("slow-link", "mismatch")
FAULT_KINDS = tuple(_FIELDS)

# One working spec per kind: `--help` prints them and a test parses every one, so the help
# can never again show an example the parser rejects.
FAULT_EXAMPLES: tuple[str, ...] = (
    "periodic-stall:every_steps=50,duration_ms=200",
    "periodic-stall:every_s=2.5,duration_ms=150",
    "slow-device:factor=1.1",
    "memory-growth:bytes_per_request=1048576",
    "hang:at_step=300",
    "hang:rank=1,at_step=20",
    "slow-collective:factor=4",
    "throttle:reason=thermal,sm_clock_mhz=1410",
    "throttle:reason=power,sm_clock_mhz=1600",
    "pcie:gen=3,width=8",
    "xid:code=79,at_s=30",
    "slow-link:rank=1,factor=4",
    "mismatch:rank=1,at_step=10",
)


class FaultSpecError(ValueError):
    """A `--fault` spec is malformed; the message names the field."""


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    params: dict[str, float]

    def __str__(self) -> str:
        fields = ",".join(f"{k}={v}" if isinstance(v, str) else f"{k}={v:g}"
                          for k, v in self.params.items())
        return f"{self.kind}:{fields}"


def parse_fault(spec: str) -> FaultSpec:
    """Parse `kind:field=value,...`; raise FaultSpecError naming what is wrong."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip()
    if kind not in _FIELDS:
        raise FaultSpecError(f"fault kind {kind!r} is unknown (expected one of {', '.join(FAULT_KINDS)})")
    fields = _FIELDS[kind]
    params: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        name, eq, raw = item.partition("=")
        name = name.strip()
        if not eq:
            raise FaultSpecError(f"fault {kind}: {item!r} is not field=value")
        if name not in fields:
            raise FaultSpecError(f"fault {kind}: unknown field {name!r} (expected {', '.join(fields)})")
        try:
            value = fields[name](raw.strip())
        except ValueError:
            raise FaultSpecError(
                f"fault {kind}: field {name} must be {fields[name].__name__}, got {raw.strip()!r}"
            ) from None
        if not isinstance(value, str) and not value >= 0:
            raise FaultSpecError(f"fault {kind}: field {name} must be >= 0, got {raw.strip()}")
        params[name] = value
    for name in _REQUIRED[kind]:
        if name not in params:
            raise FaultSpecError(f"fault {kind}: field {name} is required")
    _check(kind, params)
    return FaultSpec(kind, params)


def _check(kind: str, p: dict[str, float]) -> None:
    if kind == "periodic-stall":
        if ("every_steps" in p) == ("every_s" in p):
            raise FaultSpecError("fault periodic-stall: give exactly one of every_steps, every_s")
        if p.get("every_steps", 1) < 1 or p.get("every_s", 1.0) <= 0:
            raise FaultSpecError("fault periodic-stall: field every_steps/every_s must be > 0")
    if kind in ("slow-device", "slow-collective", "slow-link") and p["factor"] < 1.0:
        raise FaultSpecError(f"fault {kind}: field factor must be >= 1, got {p['factor']:g}")
    if kind in ("hang", "mismatch") and p["at_step"] < 1:
        raise FaultSpecError(f"fault {kind}: field at_step must be >= 1")
    _check_gpu(kind, p)


def _check_gpu(kind: str, p: dict[str, Any]) -> None:
    """The GPU faults (reference_engine/device.py); the board's own limits are checked there."""
    if kind == "throttle":
        if p["reason"] not in THROTTLE_REASONS:
            raise FaultSpecError(f"fault throttle: field reason must be one of "
                                 f"{', '.join(THROTTLE_REASONS)}, got {p['reason']!r}")
        if p["sm_clock_mhz"] <= 0:
            raise FaultSpecError("fault throttle: field sm_clock_mhz must be > 0")
    if kind == "pcie":
        if not p:
            raise FaultSpecError("fault pcie: give gen, width or both")
        if "gen" in p and p["gen"] not in PCIE_LANE_GBPS:
            raise FaultSpecError(f"fault pcie: field gen must be 1..{max(PCIE_LANE_GBPS)}, got {p['gen']}")
        if "width" in p and p["width"] not in PCIE_WIDTHS:
            raise FaultSpecError(f"fault pcie: field width must be one of "
                                 f"{', '.join(map(str, PCIE_WIDTHS))}, got {p['width']}")
    if kind == "xid" and p["code"] < 1:
        raise FaultSpecError("fault xid: field code must be >= 1")


def gpu_fault_config(specs: Iterable[FaultSpec]) -> GpuFaultConfig:
    by = {s.kind: s.params for s in specs}
    throttle, pcie, xid = by.get("throttle", {}), by.get("pcie", {}), by.get("xid", {})
    reason = throttle.get("reason")  # a str field, though params are typed by their numbers
    return GpuFaultConfig(
        throttle_reason=None if reason is None else str(reason),
        sm_clock_mhz=throttle.get("sm_clock_mhz"),
        pcie_gen=_whole(pcie.get("gen")), pcie_width=_whole(pcie.get("width")),
        xid_code=_whole(xid.get("code")), xid_at_s=float(xid.get("at_s", 0.0)))


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


class Faults:
    """The active faults of one engine and the state they keep (stall clock, retained bytes).

    Called from the engine thread, except `retained_bytes` which any thread may read.
    """

    def __init__(self, specs: Iterable[str | FaultSpec] = ()) -> None:
        self.specs = [s if isinstance(s, FaultSpec) else parse_fault(s) for s in specs]
        kinds = [s.kind for s in self.specs]
        dup = {k for k in kinds if kinds.count(k) > 1}
        if dup:
            raise FaultSpecError(f"fault {sorted(dup)[0]} given more than once")
        by = {s.kind: s.params for s in self.specs}
        self.device_factor = by.get("slow-device", {}).get("factor", 1.0)
        self.collective_factor = by.get("slow-collective", {}).get("factor", 1.0)
        hang = by.get("hang", {})
        # A hang with a rank is the tensor-parallel one (parallel/rank_faults.py); only a
        # hang without one stops the engine's own step loop.
        self.hang_at_step = int(hang["at_step"]) if hang and "rank" not in hang else None
        self.gpu = gpu_fault_config(self.specs)
        stall = by.get("periodic-stall")
        self._stall_every_steps = int(stall["every_steps"]) if stall and "every_steps" in stall else None
        self._stall_every_s = stall.get("every_s") if stall else None
        self._stall_s = stall["duration_ms"] / 1e3 if stall else 0.0
        self._next_stall_at: float | None = None
        self._bytes_per_request = int(by.get("memory-growth", {}).get("bytes_per_request", 0))
        self._retained: list[bytearray] = []
        self._retained_bytes = 0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.specs)

    @property
    def rank_specs(self) -> list[FaultSpec]:
        """The faults that act on one tensor-parallel rank (hang with a rank, slow-link,
        mismatch)."""
        return [s for s in self.specs
                if s.kind in RANK_FAULT_KINDS or (s.kind == "hang" and "rank" in s.params)]

    def should_hang(self, step_id: int) -> bool:
        return self.hang_at_step is not None and step_id >= self.hang_at_step

    def stall_seconds(self, step_id: int, now: float) -> float:
        """Extra host time to spend in this step (periodic-stall), 0 when none is due."""
        if self._stall_every_steps is not None:
            return self._stall_s if step_id % self._stall_every_steps == 0 else 0.0
        if self._stall_every_s is not None:
            if self._next_stall_at is None:
                self._next_stall_at = now + self._stall_every_s
            if now >= self._next_stall_at:
                # A fixed schedule, like a timer thread: the next stall is due a period after
                # this one was due, not after it happened, so a stall that comes late (the
                # loop was busy) does not shift every later one; due times that passed while
                # the engine was idle are skipped, not replayed.
                late = int((now - self._next_stall_at) // self._stall_every_s)
                self._next_stall_at += (late + 1) * self._stall_every_s
                return self._stall_s
        return 0.0

    def on_request_finished(self) -> None:
        # Really allocate and touch the bytes, so RSS and allocator probes see the growth too.
        if self._bytes_per_request:
            buf = bytearray(b"\x01") * self._bytes_per_request
            with self._lock:
                self._retained.append(buf)
                self._retained_bytes += len(buf)

    @property
    def retained_bytes(self) -> int:
        with self._lock:
            return self._retained_bytes

    def step_label(self, stalled: bool, host_late: bool = False) -> str | None:
        """The `fault` field of a step record: which faults shaped this step (and `host-late`
        when the host, not a fault, made it end late: module docstring)."""
        labels = []
        if self.device_factor > 1.0:
            labels.append("slow-device")
        if self.collective_factor > 1.0:
            labels.append("slow-collective")
        if self.gpu.sm_clock_mhz is not None:
            labels.append("throttle")
        if self.gpu.pcie_gen is not None or self.gpu.pcie_width is not None:
            labels.append("pcie")
        if stalled:
            labels.append("periodic-stall")
        if host_late:
            labels.append("host-late")
        return "+".join(labels) or None
