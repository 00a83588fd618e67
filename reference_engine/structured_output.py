"""Structured output in the engine: a compile per schema, cached, and a token mask per step.

Modelled on vLLM v1's `StructuredOutputManager` (vllm/v1/structured_output/) and SGLang's
grammar backends, with their semantics:

- **Compile is asynchronous and blocks only its own requests.** vLLM submits each new
  grammar to a `ThreadPoolExecutor` and leaves the request in the scheduler's waiting queue
  with status `WAITING_FOR_FSM`, skipped by `schedule()` until its grammar is ready; every
  other request keeps stepping. SGLang does the same with its `grammar_queue`. Here a
  request whose schema is not compiled is held out of the scheduler, its compile runs on a
  pool of `grammar_compile_workers` threads, and when it is done the request joins the
  waiting queue at its arrival position (as vLLM's skipped requests keep theirs).
  Requests that arrive while their schema is compiling wait on the same compile.
- **Compiled grammars are cached by the schema's hash.** vLLM hands the schema to the
  backend as `json.dumps(schema)`, and xgrammar's `GrammarCompiler` caches by that text
  (bounded by `VLLM_XGRAMMAR_CACHE_MB`, 512 MB by default); the key here is a hash of the
  same text (key order as sent), so a schema sent again hits and one with its keys
  reordered misses, as there. The bound is `grammar_cache_size` compiled grammars, least
  recently used evicted, evictions counted; 0 turns the cache off (every request compiles,
  but one that arrives while its schema is compiling waits on that compile).
- **A cold compile costs more for a larger schema:** `grammar_compile_base_ms` +
  `grammar_compile_ms_per_kib` x the schema text's KiB, waited out in the compile thread.
- **The mask is built every step for every structured sequence that samples** (a bitmap
  over the vocabulary, `json_grammar.Matcher.bitmap`), priced at
  `grammar_mask_us_per_seq` each. Whether it overlaps the forward pass is
  `grammar_mask_overlap`: vLLM's `EngineCore.step` calls
  `scheduler.get_grammar_bitmask()` between `execute_model(..., non_block=True)` and
  `sample_tokens(grammar_output)`, so the bitmask is filled while the forward runs (on by
  default here, as there); earlier vLLM v1 releases built it inside `schedule()`, before
  the forward, and SGLang serialises it with `--disable-overlap-schedule`: the step then
  pays the mask on top of the forward. The sim executor prices either (sim_executor.py);
  for the torch executor the engine waits out the same arithmetic after the real step.

Threads: the engine thread calls everything except `_compile`, which runs on the compile
pool; the two meet under `_lock` (the cache, the in-flight compiles, the ready list, the
compile counters and histogram). `/metrics` reads the other counters from the server
thread without the lock (single int/float reads).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reference_engine.block_pool import InvariantError
from reference_engine.json_grammar import Matcher, Piece, compile_schema, pick
from reference_engine.metrics import TTFT_BUCKETS, Histogram, escape_label_value
from reference_engine.request import Sequence, SequenceStatus
from reference_engine.tokenizer import EOS_ID, VOCAB_SIZE

COMPILE_BUCKETS = TTFT_BUCKETS


def schema_text(schema: Any) -> str:
    """The text a compile is keyed on: `json.dumps` of the schema as sent (vLLM's)."""
    return json.dumps(schema)


def schema_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compile_cost_s(text: str, base_ms: float, ms_per_kib: float) -> float:
    return (base_ms + ms_per_kib * len(text.encode()) / 1024.0) / 1e3


class StructuredOutputs:
    """Owns: the grammar cache, the compiles in flight, the requests waiting on them and
    the matchers of structured sequences the scheduler holds."""

    def __init__(self, config: Any, wake: Callable[[], None] = lambda: None) -> None:
        self.base_ms = config.grammar_compile_base_ms
        self.ms_per_kib = config.grammar_compile_ms_per_kib
        self.cache_size = config.grammar_cache_size
        self.mask_s_per_seq = config.grammar_mask_us_per_seq / 1e6
        self.overlap = config.grammar_mask_overlap
        self._workers = config.grammar_compile_workers
        self._pool: ThreadPoolExecutor | None = None  # started on the first cold schema
        self._wake = wake
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[Piece, ...]] = OrderedDict()
        self._inflight: dict[str, list[Sequence]] = {}   # key -> requests waiting on it
        # compiled, not yet queued; the engine thread makes their matchers (the compile
        # threads never touch `matchers`, which the engine thread iterates every step)
        self._ready: list[tuple[Sequence, tuple[Piece, ...]]] = []
        self._done_ms: list[float] = []                   # compiles finished since the last step
        self.matchers: dict[int, tuple[Sequence, Matcher]] = {}
        self.compile_seconds = Histogram(
            "reference_engine_grammar_compile_seconds",
            "Seconds each grammar compile took (a cold schema).", COMPILE_BUCKETS)
        self.hits = self.misses = self.evictions = self.compiles = 0
        self.mask_seconds = self.mask_exposed_seconds = 0.0
        self.masked_tokens = 0
        self._step = {"hits": 0, "misses": 0}
        self._mask_s = 0.0
        self._exposed_s = 0.0
        self._masks: dict[int, int] = {}  # seq_id -> this step's bitmap

    # ---- admission (engine thread) ---------------------------------------------------------
    def admit(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences the scheduler may queue now; the rest wait for their compile."""
        now: list[Sequence] = []
        for seq in seqs:
            spec = seq.params.structured_outputs
            if spec is None:
                now.append(seq)
                continue
            text = schema_text(spec["json"])
            key = schema_key(text)
            with self._lock:
                pieces = self._cache.get(key)
                if pieces is not None:
                    self._cache.move_to_end(key)
                    self.hits += 1
                    self._step["hits"] += 1
                else:
                    self.misses += 1
                    self._step["misses"] += 1
                    waiting = self._inflight.get(key)
                    if waiting is None:
                        self._inflight[key] = [seq]
                        self._submit(key, text, spec["json"])
                    else:
                        waiting.append(seq)
            if pieces is not None:
                self.matchers[seq.seq_id] = (seq, Matcher(pieces))
                now.append(seq)
        return now

    def _submit(self, key: str, text: str, schema: Any) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="grammar-compile")
        self._pool.submit(self._compile, key, text, schema)

    def _compile(self, key: str, text: str, schema: Any) -> None:
        # Compile pool thread. The real compile is quick; the rest of the priced cost is
        # waited out, as a CPU-bound compile would hold this worker.
        t0 = time.monotonic()
        pieces = compile_schema(schema)  # validated by the server already: cannot fail here
        left = t0 + compile_cost_s(text, self.base_ms, self.ms_per_kib) - time.monotonic()
        if left > 0:
            time.sleep(left)
        took = time.monotonic() - t0
        with self._lock:
            self.compiles += 1
            self.compile_seconds.observe(took)
            self._done_ms.append(took * 1e3)
            if self.cache_size > 0:
                self._cache[key] = pieces
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
                    self.evictions += 1
            for seq in self._inflight.pop(key):
                if not seq.aborted and seq.status is SequenceStatus.WAITING:
                    self._ready.append((seq, pieces))
        self._wake()

    def take_ready(self) -> list[Sequence]:
        """Requests whose grammar finished compiling, in arrival order."""
        with self._lock:
            ready, self._ready = self._ready, []
        for seq, pieces in ready:
            self.matchers[seq.seq_id] = (seq, Matcher(pieces))
        return sorted((seq for seq, _ in ready), key=lambda s: s.seq_id)

    def has_ready(self) -> bool:
        return bool(self._ready)

    @property
    def num_waiting(self) -> int:
        """Requests waiting on a compile (vLLM counts its WAITING_FOR_FSM as waiting)."""
        with self._lock:
            return sum(len(v) for v in self._inflight.values()) + len(self._ready)

    def abort(self, seq: Sequence) -> bool:
        """Cancel a request held for its compile; False if it is not held here."""
        with self._lock:
            ready = [r for r in self._ready if r[0] is seq]
            held = bool(ready) or any(seq in v for v in self._inflight.values())
            if not held:
                return False
            for r in ready:
                self._ready.remove(r)
            for waiting in self._inflight.values():
                if seq in waiting:
                    waiting.remove(seq)
        self.matchers.pop(seq.seq_id, None)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "abort"
        return True

    # ---- one step (engine thread) ----------------------------------------------------------
    def prepare(self, batch: Any) -> None:
        """Fill this step's bitmaps for the structured sequences that sample, and price them
        on the batch (`grammar_mask_s`) for the executor."""
        self._drop_finished()
        self._masks = {}
        for w in batch.seqs:
            entry = self.matchers.get(w.seq_id) if w.sample else None
            if entry is not None:
                seq, matcher = entry
                self._masks[w.seq_id] = matcher.bitmap(VOCAB_SIZE, EOS_ID, seq.params.ignore_eos)
        self._mask_s = len(self._masks) * self.mask_s_per_seq
        self._exposed_s = self._mask_s if not self.overlap else 0.0
        batch.grammar_mask_s = self._mask_s

    def apply(self, sampled: dict[int, Any]) -> dict[int, Any]:
        """Each masked sequence's token under its bitmap; its matcher advances by it. A
        structured sequence samples one token a step: speculative decoding does not draft
        for it (spec_decode.py), so its value here is never a verified list."""
        for seq_id, bits in self._masks.items():
            if seq_id in sampled:
                tok = pick(bits, sampled[seq_id])
                self.matchers[seq_id][1].accept(tok)
                sampled[seq_id] = tok
        self.masked_tokens += len(self._masks)
        return sampled

    def host_extra_s(self, exec_s: float) -> float:
        """For an executor without a clock of its own (torch): the mask time the step still
        owes after computing for exec_s, all of it when blocking, the rest when overlapping."""
        extra = self._mask_s if not self.overlap else max(0.0, self._mask_s - exec_s)
        self._exposed_s = extra
        return extra

    def step_fields(self, parts: dict[str, Any]) -> dict[str, Any]:
        """This step's fields of the step log; resets the per-step counts."""
        exposed = parts.get("grammar_mask_exposed_s", self._exposed_s)
        self.mask_seconds += self._mask_s
        self.mask_exposed_seconds += exposed
        with self._lock:
            done, self._done_ms = self._done_ms, []
            waiting = sum(len(v) for v in self._inflight.values()) + len(self._ready)
        fields = {
            "structured_seqs": len(self._masks), "grammar_mask_ms": self._mask_s * 1e3,
            "grammar_mask_exposed_ms": exposed * 1e3, "grammar_mask_blocking": not self.overlap,
            "grammar_waiting": waiting, "grammar_compiles": len(done),
            "grammar_compile_ms": sum(done), "grammar_cache_hits": self._step["hits"],
            "grammar_cache_misses": self._step["misses"]}
        self._step = {"hits": 0, "misses": 0}
        self._masks = {}
        self._mask_s = self._exposed_s = 0.0
        return fields

    def _drop_finished(self) -> None:
        gone = [i for i, (s, _) in self.matchers.items()
                if s.status is SequenceStatus.FINISHED or s.aborted]
        for i in gone:
            del self.matchers[i]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- checking and exposition -----------------------------------------------------------
    def check_invariants(self, queued: list[Sequence]) -> None:
        """Between steps: the cache within its bound and every compile either held or
        evicted, no schema both cached and compiling, no request waiting on two compiles or
        both held for a compile and queued, every matcher's sequence a structured one."""
        with self._lock:
            if len(self._cache) > max(self.cache_size, 0):
                raise InvariantError(f"grammar cache holds {len(self._cache)} > "
                                     f"grammar_cache_size {self.cache_size}")
            if self.cache_size > 0 and len(self._cache) + self.evictions != self.compiles:
                raise InvariantError(f"grammar cache: {len(self._cache)} held + {self.evictions} "
                                     f"evicted != {self.compiles} compiled")
            if set(self._cache) & set(self._inflight):
                raise InvariantError("a schema is both cached and compiling")
            held = [s.seq_id for v in self._inflight.values() for s in v]
            held += [s.seq_id for s, _ in self._ready]
        if len(held) != len(set(held)):
            raise InvariantError("a request waits on two compiles")
        if set(held) & {s.seq_id for s in queued}:
            raise InvariantError("a request is queued while waiting on its compile")
        for seq, _ in self.matchers.values():
            if seq.status is SequenceStatus.FINISHED and not seq.aborted:
                continue  # dropped at the next step's prepare
            if seq.params.structured_outputs is None:
                raise InvariantError(f"{seq} has a matcher but no schema")

    def metrics_lines(self, model_name: str) -> str:
        labels = f'model_name="{escape_label_value(model_name)}"'
        counters = [
            ("grammar_cache_hits", "Structured requests whose schema was compiled already.",
             self.hits),
            ("grammar_cache_misses", "Structured requests that waited for a compile.",
             self.misses),
            ("grammar_cache_evictions", "Compiled grammars evicted from the cache.",
             self.evictions),
            ("grammar_compiles", "Grammar compiles finished.", self.compiles),
            ("grammar_masked_tokens", "Tokens sampled under a grammar mask.", self.masked_tokens),
            ("grammar_mask_seconds", "Seconds spent filling token masks.", self.mask_seconds),
            ("grammar_mask_exposed_seconds", "Mask seconds the steps paid beyond the forward "
             "pass (all of them when the mask blocks).", self.mask_exposed_seconds)]
        lines: list[str] = []
        for name, doc, value in counters:
            full = f"reference_engine_{name}_total"
            lines += [f"# HELP {full} {doc}", f"# TYPE {full} counter",
                      f"{full}{{{labels}}} {value}"]
        gauge = "reference_engine_num_requests_waiting_for_grammar"
        lines += [f"# HELP {gauge} Requests waiting for their grammar to compile.",
                  f"# TYPE {gauge} gauge", f"{gauge}{{{labels}}} {self.num_waiting}"]
        with self._lock:  # a compile thread may be observing into it
            lines += self.compile_seconds.render([("model_name", model_name)])
        return "\n".join(lines) + "\n"


def requeue(scheduler: Any, seqs: list[Sequence]) -> None:
    """Compiled requests join the waiting queue where their arrival puts them (fcfs: before
    every later arrival; vLLM's skipped WAITING_FOR_FSM requests keep their place), or by
    priority under the priority policy."""
    if scheduler.policy == "priority":
        scheduler.enqueue(seqs)
        return
    waiting = scheduler.waiting
    for seq in seqs:
        at = len(waiting)
        while at > 0 and waiting[at - 1].seq_id > seq.seq_id and waiting[at - 1].num_preemptions == 0:
            at -= 1
        waiting.insert(at, seq)
