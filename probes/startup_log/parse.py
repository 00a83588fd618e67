"""`parse_startup_log`: a start-up log's memory figures per rank, in order, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from infbench.specs.tuning import needs_continuation, read_tuning_lines
from probes.startup_log import patterns
from probes.startup_log.outcome import Seen, decide_outcome
from probes.startup_log.records import Record, lines_of, split_records

PHASES = ("weights", "profile", "cuda_graphs", "kv_cache", "ready")
# Kernel tuning tables found or missing (`infbench.specs.tuning`): rows of their own, in no
# memory phase, so they move neither the phases, nor the ranks, nor where recognition stopped.
TUNING = "tuning"


class StartupLogError(Exception):
    """A file that is not a start-up log infbench can read; the message is one line."""


@dataclass(frozen=True)
class Event:
    seq: int
    line_no: int
    rank: str
    phase: str
    key: str
    value: float | None
    unit: str | None
    text: str


@dataclass
class StartupLog:
    engine: str                   # vllm | sglang | reference
    log_format: str               # vllm_v0 | vllm_v1 | sglang
    version: str | None
    lines: int
    events: list[Event]
    settings: dict[str, str]
    outcome: str                  # started | failed | incomplete
    failure_kind: str | None = None
    failure_phase: str | None = None
    failure_line: int | None = None
    failure_text: str | None = None
    failure_rank: str | None = None
    notes: list[str] = field(default_factory=list)
    ready_line: int | None = None          # the first line saying the server is up
    not_recognised_from: int | None = None  # where recognition stopped, when it matters
    server_front_end: bool = False          # the API server's own lines are in the log

    @property
    def ranks(self) -> list[str]:
        ranks = {e.rank for e in self.events if e.phase not in ("ready", TUNING)}
        return sorted(ranks | ({self.failure_rank} if self.failure_rank else set()))

    def check_invariants(self) -> None:
        assert [e.seq for e in self.events] == list(range(len(self.events)))
        assert self.outcome in ("started", "failed", "incomplete")
        assert (self.outcome == "failed") == (self.failure_kind is not None)


def line_count(text: str) -> int:
    return len(lines_of(text))


_V1_HINTS = ("To serve at least one request", "Model loading took", "Available KV cache memory", "GPU KV cache size",
             "V1 LLM engine", "EngineCore", "Worker_TP", "VllmWorker rank=")
_V0_HINTS = ("model weights take", "Memory profiling results", "# GPU blocks", "VllmWorkerProcess",
             "can use total_gpu_memory", "GPU blocks:")


def _format(engine: str, text: str) -> str:
    if engine == "sglang":
        return "sglang"
    if "Loading model weights took" in text and "# GPU blocks: " in text and "CPU blocks" not in text:
        return "vllm_v1"  # early V1 (0.7) kept V0's wording for weights and blocks
    if any(h in text for h in _V0_HINTS):
        return "vllm_v0"
    return "vllm_v1" if any(h in text for h in _V1_HINTS) else "vllm_v0"


def _failure_phase(kind: str, phase: str | None, recs: list[Record], at: int,
                   last_phase: dict[str, str], rank: str) -> str | None:
    if phase is not None:
        return phase
    # An OOM: the traceback lines of that rank before the error say where, else the phase
    # that rank (or the log) was in when it stopped.
    for r in reversed(recs[max(0, at - 40):at]):
        if r.rank == rank and (p := patterns.traceback_phase(r.message)):
            return p
    return last_phase.get(rank) or last_phase.get("*")


def _tuning(recs: list[Record], i: int, events: list[Event], seen: Seen) -> None:
    """Rows for the tuning tables record i names (its file name finished on the next line
    where a paste broke it there); the engine they name counts as the log's."""
    r = recs[i]
    text = r.raw
    nxt = recs[i + 1] if i + 1 < len(recs) else None
    if needs_continuation(text) and nxt is not None and not nxt.structured:
        text += nxt.raw
    for t in read_tuning_lines(text):
        seen.other.add(r.line_no)
        if t.engine in ("vllm", "sglang"):
            seen.engines.add(t.engine)
        events.append(Event(len(events), r.line_no, r.rank, TUNING, f"tuning_table_{t.outcome}",
                            None, None, text))


def parse_startup_log(text: str, name: str = "log") -> StartupLog:
    recs = split_records(text)
    events: list[Event] = []
    engines: set[str] = set()
    settings: dict[str, str] = {}
    version = None
    last_phase: dict[str, str] = {}
    fail: tuple[patterns.Failure, Record, int] | None = None
    after_failure = 0
    seen = Seen()
    for i, r in enumerate(recs):
        v = patterns.version(r.message)
        found = patterns.settings(r.message)
        if v or found:
            seen.identity(r, v)
        version = version or v
        for k, val in found.items():
            settings.setdefault(k, val)
        if r.proc.startswith("APIServer") or "vLLM API server version" in r.message:
            seen.front_end = True
        _tuning(recs, i, events, seen)
        f = patterns.failure(r.message)
        if f is not None:
            seen.hit(r.line_no, "failure")
            if fail is None:
                fail = (f, r, i)
            for fig in f.figures:
                events.append(Event(len(events), r.line_no, r.rank, fig.phase, fig.key, fig.value,
                                    fig.unit, r.raw))
            continue
        engine, figs = patterns.figures(r.message)
        if engine is None:
            continue
        seen.hit(r.line_no, figs[0].phase)
        if engine != "any":
            engines.add(engine)
        if fail is not None:
            after_failure += 1
        for fig in figs:
            if fig.phase == "ready" and not seen.first_ready(fig.key):
                continue  # one row per readiness kind: the route list alone is dozens of lines
            events.append(Event(len(events), r.line_no, r.rank, fig.phase, fig.key, fig.value,
                                fig.unit, r.raw))
            last_phase[r.rank] = last_phase["*"] = fig.phase
    memory = [e for e in events if e.phase not in ("ready", TUNING)]
    if not memory and fail is None and not (engines or seen.engines):
        if any("Traceback" in r.message or "exception" in r.message.lower() for r in recs):
            raise StartupLogError(f"{name}: the log stops inside an error before any start-up "
                                  "memory line: neither the phases nor the cause are in it")
        raise StartupLogError(f"{name}: no start-up memory lines of vLLM or SGLang found "
                              f"({line_count(text)} lines read)")
    engines = engines or seen.engines
    engine = "sglang" if "sglang" in engines or (fail and fail[0].kind == "not_enough_memory"
                                                 and not engines) else "vllm"
    if version and version.startswith("reference"):
        engine = "reference"
    if settings.get("device", "").lower() == "cpu" or any(e.key == "node_memory_bytes" for e in events):
        settings["device"] = "cpu"
    log = StartupLog(engine=engine, log_format=_format(engine, text), version=version,
                     lines=line_count(text), events=events, settings=settings,
                     outcome="started")
    log.ready_line = min((e.line_no for e in events if e.phase == "ready"), default=None)
    log.server_front_end = seen.front_end or log.ready_line is not None
    if fail is not None and log.ready_line is not None and fail[1].line_no > log.ready_line:
        log.notes.append(f"the error at line {fail[1].line_no} ({fail[0].kind}) came after the "
                         f"server was ready (line {log.ready_line}): not a start-up failure")
        fail = None
    if fail is not None:
        f, r, at = fail
        log.outcome = "failed"
        log.failure_kind = "cuda_graph_oom" if f.kind == "oom" and _failure_phase(
            f.kind, f.phase, recs, at, last_phase, r.rank) == "cuda_graphs" else f.kind
        log.failure_phase = _failure_phase(f.kind, f.phase, recs, at, last_phase, r.rank)
        log.failure_line, log.failure_text, log.failure_rank = r.line_no, r.message, r.rank
        if after_failure:
            log.notes.append(f"{after_failure} memory line(s) after the error (other ranks "
                             "or a restart)")
    elif any(e.key == "kv_tokens" and (e.value or 0) <= 0 for e in events):
        # SGLang goes on with a negative profiled pool; it fails at the first allocation.
        bad = next(e for e in events if e.key == "kv_tokens" and (e.value or 0) <= 0)
        log.outcome, log.failure_kind, log.failure_phase = "failed", "not_enough_memory", "kv_cache"
        log.failure_line, log.failure_text = bad.line_no, bad.text
    else:
        decide_outcome(log, recs, seen)
    _note_disagreements(log)
    log.check_invariants()
    return log


def _note_disagreements(log: StartupLog) -> None:
    by_key: dict[str, dict[str, float]] = {}
    for e in log.events:
        if e.value is not None and e.unit == "bytes":
            by_key.setdefault(e.key, {})[e.rank] = e.value
    for key, per_rank in by_key.items():
        vals = list(per_rank.values())
        if len(vals) > 1 and max(vals) - min(vals) > 0.02 * max(abs(v) for v in vals) + 2**24:
            lo = min(per_rank, key=per_rank.__getitem__)
            log.notes.append(f"ranks disagree on {key}: {min(vals) / 2**30:.2f} GiB ({lo}) to "
                             f"{max(vals) / 2**30:.2f} GiB; the smallest KV / largest other term "
                             "decides whether the engine starts")


def representative(log: StartupLog) -> dict[str, float]:
    """One figure per key for the whole engine: the worst rank's (the largest non-KV term,
    the smallest KV figure), since the engine starts only if every rank fits."""
    out: dict[str, float] = {}
    for e in log.events:
        if e.value is None:
            continue
        if e.key not in out:
            out[e.key] = e.value
        elif e.phase == "kv_cache" or e.key in ("gpu_memory_utilization",):
            out[e.key] = min(out[e.key], e.value)
        else:
            out[e.key] = max(out[e.key], e.value)
    return out
