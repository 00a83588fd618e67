"""`parse_startup_log`: a start-up log's memory figures per rank, in order, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from probes.startup_log import patterns
from probes.startup_log.records import Record, split_records

PHASES = ("weights", "profile", "cuda_graphs", "kv_cache", "ready")


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

    @property
    def ranks(self) -> list[str]:
        ranks = {e.rank for e in self.events if e.phase != "ready"}
        return sorted(ranks | ({self.failure_rank} if self.failure_rank else set()))

    def check_invariants(self) -> None:
        assert [e.seq for e in self.events] == list(range(len(self.events)))
        assert self.outcome in ("started", "failed", "incomplete")
        assert (self.outcome == "failed") == (self.failure_kind is not None)


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


def parse_startup_log(text: str, name: str = "log") -> StartupLog:
    recs = split_records(text)
    events: list[Event] = []
    engines: set[str] = set()
    settings: dict[str, str] = {}
    version = None
    last_phase: dict[str, str] = {}
    fail: tuple[patterns.Failure, Record, int] | None = None
    after_failure = 0
    for i, r in enumerate(recs):
        version = version or patterns.version(r.message)
        for k, v in patterns.settings(r.message).items():
            settings.setdefault(k, v)
        f = patterns.failure(r.message)
        if f is not None:
            if fail is None:
                fail = (f, r, i)
            for fig in f.figures:
                events.append(Event(len(events), r.line_no, r.rank, fig.phase, fig.key, fig.value,
                                    fig.unit, r.raw))
            continue
        engine, figs = patterns.figures(r.message)
        if engine is None:
            continue
        engines.add(engine)
        if fail is not None:
            after_failure += 1
        for fig in figs:
            events.append(Event(len(events), r.line_no, r.rank, fig.phase, fig.key, fig.value,
                                fig.unit, r.raw))
            last_phase[r.rank] = last_phase["*"] = fig.phase
    if not events and fail is None:
        if any("Traceback" in r.message or "exception" in r.message.lower() for r in recs):
            raise StartupLogError(f"{name}: the log stops inside an error before any start-up "
                                  "memory line: neither the phases nor the cause are in it")
        raise StartupLogError(f"{name}: no start-up memory lines of vLLM or SGLang found "
                              f"({len(text.splitlines())} lines read)")
    engine = "sglang" if "sglang" in engines or (fail and fail[0].kind == "not_enough_memory"
                                                 and not engines) else "vllm"
    if version and version.startswith("reference"):
        engine = "reference"
    log = StartupLog(engine=engine, log_format=_format(engine, text), version=version,
                     lines=len(text.splitlines()), events=events, settings=settings,
                     outcome="started")
    keys = {e.key for e in events}
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
    elif not keys & {"available_kv_bytes", "kv_tokens", "num_gpu_blocks"}:
        log.outcome = "incomplete"
        last = max(events, key=lambda e: e.seq)
        log.notes.append(f"the log ends in the {last.phase} phase (line {last.line_no}) before "
                         "the KV pool was sized")
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
