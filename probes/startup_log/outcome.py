"""How a start-up log without an error ended: `started`, or `incomplete`, and where the
patterns stopped recognising it.

A log of a version or platform the patterns never saw must not read as a log that stopped
early. So the server's readiness counts whatever the memory lines said (uvicorn's lines,
the route list, the engines' ready lines, a request answered), and where a phase the
outcome rests on was not recognised, the note says from which line: the first line after
the last one recognised that a logger printed (`Record.structured`), where a reader looks.

The playbook (`playbooks/startup`) may not import this package; it reads N back from the
stored note, which therefore starts with `NOT_RECOGNISED` followed by the line number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from probes.startup_log.records import Record

if TYPE_CHECKING:
    from probes.startup_log.parse import StartupLog

NOT_RECOGNISED = "not recognised from line"
KV_SIZED = ("available_kv_bytes", "kv_tokens", "num_gpu_blocks")


@dataclass
class Seen:
    """What the parse recognised, by line: figures, failures, the engine's config lines."""

    lines: dict[int, str] = field(default_factory=dict)   # line -> phase, or "config"
    # Lines recognised that belong to no memory phase (a kernel tuning table found or
    # missing): never "not recognised", and never where a log is said to end.
    other: set[int] = field(default_factory=set)
    engines: set[str] = field(default_factory=set)        # from the config/version lines alone
    front_end: bool = False
    ready_keys: set[str] = field(default_factory=set)

    def hit(self, line_no: int, phase: str) -> None:
        self.lines.setdefault(line_no, phase)

    def identity(self, r: Record, version: str | None) -> None:
        self.hit(r.line_no, "config")
        if "ServerArgs(" in r.message or (version and "sglang" in r.message.lower()):
            self.engines.add("sglang")
        else:
            self.engines.add("vllm")

    def first_ready(self, key: str) -> bool:
        new = key not in self.ready_keys
        self.ready_keys.add(key)
        return new


def _unrecognised(recs: list[Record], seen: Seen, after: int, before: int) -> int | None:
    """The first logger line strictly between two lines that no pattern recognised."""
    for r in recs:
        if (after < r.line_no < before and r.structured and r.line_no not in seen.lines
                and r.line_no not in seen.other):
            return r.line_no
    return None


def _last(seen: Seen, before: int) -> tuple[int, str, str]:
    """The last recognised line before `before` that is not readiness: (line, what it was,
    where a log ending there ends)."""
    lines = [ln for ln, ph in seen.lines.items() if ln < before and ph not in ("ready", "failure")]
    if not lines:
        return 0, "start of the log", "at the start of the log"
    ln = max(lines)
    ph = seen.lines[ln]
    if ph == "config":
        return ln, "engine's config line", "after the engine's config line"
    return ln, f"{ph} phase", f"in the {ph} phase"


def decide_outcome(log: StartupLog, recs: list[Record], seen: Seen) -> None:
    """`started` or `incomplete`, with the note that says why (no error was found)."""
    sized = any(e.key in KV_SIZED for e in log.events)
    end = recs[-1].line_no if recs else 0
    if log.ready_line is not None:
        log.outcome = "started"
        if sized:
            return
        at, what, _ = _last(seen, log.ready_line)
        n = _unrecognised(recs, seen, at, log.ready_line)
        log.not_recognised_from = n
        if n is not None:
            log.notes.append(f"{NOT_RECOGNISED} {n}: the server was ready (line {log.ready_line}) "
                             f"but no KV pool line was recognised after the {what} (line {at}); "
                             "the pool's size is not in what was read")
        else:
            log.notes.append(f"the server was ready (line {log.ready_line}); the log has no KV "
                             "pool line before it")
        return
    if sized and not log.server_front_end:
        # An excerpt of engine lines (what users paste): readiness is not expected in it, and
        # the pool sized without an error is as far as it can say.
        log.notes.append("no readiness line in this excerpt: started means the KV pool was "
                         "sized and no error followed")
        return
    log.outcome = "incomplete"
    at, _, ends = _last(seen, end + 1)
    n = _unrecognised(recs, seen, at, end + 1)
    log.not_recognised_from = n
    tail = f"{NOT_RECOGNISED} {n} to its end (line {end})" if n is not None else ""
    if sized:
        log.notes.append(
            f"the log ends {ends} (line {at}) after the KV pool was sized, before the "
            "server said it was ready" + (f"; {tail}: a readiness line in a wording never seen "
                                         "would be there" if tail else ""))
    elif tail:
        log.notes.append(f"the log ends {ends} as far as it was recognised (line {at}); "
                         f"{tail}: a KV pool or readiness line in a wording never seen would be "
                         "there, or the copy was cut")
    else:
        log.notes.append(f"the log ends {ends} (line {at}) before the KV pool was sized")
