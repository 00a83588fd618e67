"""What one capture holds before it is stored: per rank, its dump and its stacks."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from probes.hang.frdump import FrDump
from probes.hang.stacks import Stacks, stacks_rows

DUMP_STATUSES = ("ok", "missing", "refused", "not_requested")
STACK_STATUSES = ("ok", "permission_denied", "failed", "process_gone", "not_requested")
SOURCES = ("url", "pids", "dumps")


def new_capture_id() -> str:
    return "hg-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


@dataclass
class RankCapture:
    rank: int
    pid: int | None = None
    alive: bool | None = None
    dump_path: str | None = None
    dump_status: str = "not_requested"
    dump_error: str | None = None
    dumped_at_ns: int | None = None
    dump: FrDump | None = None
    stacks: Stacks = field(default_factory=lambda: Stacks("not_requested"))

    def stack_rows(self) -> list[dict[str, Any]]:
        return stacks_rows(self.stacks.threads) if self.stacks.status == "ok" else []


@dataclass
class Capture:
    # Owns: the per-rank results of one capture until `writer.write_capture` stores them.
    capture_id: str
    source: str
    target: str
    ranks: list[RankCapture]
    world_size: int | None = None
    run_id: str | None = None
    hostname: str | None = None
    notes: list[str] = field(default_factory=list)

    def check_invariants(self) -> None:
        assert self.source in SOURCES, self.source
        seen = [r.rank for r in self.ranks]
        assert len(seen) == len(set(seen)), f"duplicate ranks {seen}"
        for r in self.ranks:
            assert r.dump_status in DUMP_STATUSES, r.dump_status
            assert r.stacks.status in STACK_STATUSES, r.stacks.status
            assert (r.dump is not None) == (r.dump_status == "ok"), r.rank
            assert r.dump_status == "ok" or r.dump_status == "not_requested" or r.dump_error

    def summary_lines(self) -> list[str]:
        """One line per rank: what was captured, or why not."""
        out = []
        for r in sorted(self.ranks, key=lambda r: r.rank):
            dump = (f"dump {len(r.dump.entries)} entries" if r.dump is not None
                    else f"dump {r.dump_status}" + (f" ({r.dump_error})" if r.dump_error else ""))
            st = (f"stacks {len(r.stacks.threads)} threads ({r.stacks.source})"
                  if r.stacks.status == "ok" else f"stacks {r.stacks.status}"
                  + (f" ({r.stacks.error})" if r.stacks.error else ""))
            out.append(f"rank {r.rank}" + (f" pid {r.pid}" if r.pid else "") + f": {dump}; {st}")
        return out
