"""What a gate compares: one run's per-request samples, ITL gaps, engine steps and
completions, read once from the store into numpy arrays, with each request's keys for
pairing (`request_idx`, or conversation and turn)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from infbench.store import RunRow, StoreError, get_run, open_store

# Columns of the `request_latency` view a rule may name, and what they mean.
REQUEST_METRICS = {
    "ttft": "ttft_ms",
    "ttft_intended": "ttft_intended_ms",
    "tpot": "tpot_ms",
    "e2el": "e2e_ms",
    "e2el_intended": "e2e_intended_ms",
}


@dataclass(frozen=True)
class Gaps:
    """ITL gaps grouped by request: `values[i]` (ms) belongs to request `owner[i]`, an index
    into the run's per-request arrays."""

    values: np.ndarray
    owner: np.ndarray


@dataclass
class RunSamples:
    run: RunRow
    source: str  # how the user named it, for messages
    per_request: dict[str, np.ndarray]  # REQUEST_METRICS name -> ms per good request (NaN: undefined)
    itl: Gaps  # ms gaps between content chunks (the `itl` view's itl_ms)
    step_ms: np.ndarray  # engine decode-only step durations in step order (may be empty)
    send_s: np.ndarray  # send time of each good request, s from the run's start
    done_s: np.ndarray  # when each good request's stream ended, s from the run's start
    output_tokens: np.ndarray
    prompt_tokens: np.ndarray
    window_s: tuple[float, float]  # measured window: first send .. last end, all measured requests
    request_idx: np.ndarray  # each good request's index in the run
    conversation_id: np.ndarray  # -1 for a single request
    turn: np.ndarray  # 0 for a single request
    fingerprint: str | None = None  # runs.workload_fingerprint: equal means the same requests
    # intended send of each good request, s from the run's start (NaN: no schedule)
    scheduled_s: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))

    @property
    def n_requests(self) -> int:
        return int(self.done_s.size)

    def finite(self, metric: str) -> np.ndarray:
        v = self.per_request[metric]
        return v[np.isfinite(v)]

    @property
    def config(self) -> dict[str, Any]:
        return self.run.config

    @property
    def slo_ms(self) -> dict[str, float]:
        return dict(self.run.config.get("slo_ms") or {})


_GOOD = "r.phase = 'measure' AND r.error_class IS NULL"


def _floats(column: object) -> np.ndarray:
    """A fetched column as floats, NULL as NaN: DuckDB hands NULLs back masked, and a plain
    `np.asarray` reads them as 0 (a request whose stream carried no text, as a random-weight
    model's can, had a TTFT of 0 ms, and two identical runs through the default gate came out
    inconclusive for "non-positive values")."""
    return np.ma.filled(np.ma.asarray(column).astype(float), np.nan)


def load_samples(con: duckdb.DuckDBPyConnection, run: RunRow, source: str) -> RunSamples:
    rid = run.run_id
    lat = con.execute(
        f"""SELECT l.request_idx, {', '.join(f'l.{c}' for c in REQUEST_METRICS.values())},
                   coalesce(r.end_ns, r.last_chunk_ns) / 1e9 AS done_s, r.send_ns / 1e9 AS send_s, r.intended_send_ns / 1e9 AS scheduled_s, coalesce(r.output_tokens, 0) AS out_tok,
                   coalesce(r.prompt_tokens, r.target_input_tokens, 0) AS in_tok,
                   coalesce(r.conversation_id, -1) AS conv, coalesce(r.turn, 0) AS turn
            FROM request_latency l JOIN requests r USING (run_id, request_idx)
            WHERE l.run_id = ? AND {_GOOD} AND r.last_chunk_ns IS NOT NULL
            ORDER BY l.request_idx""",
        [rid],
    ).fetchnumpy()
    idx = np.asarray(lat["request_idx"], dtype=np.int64)
    per_request = {}
    for name, col in REQUEST_METRICS.items():
        per_request[name] = _floats(lat[col])
    gaps = con.execute(
        f"""SELECT i.request_idx, i.itl_ms FROM itl i JOIN requests r USING (run_id, request_idx)
            WHERE i.run_id = ? AND {_GOOD} AND i.itl_ms IS NOT NULL""",
        [rid],
    ).fetchnumpy()
    owner = np.searchsorted(idx, np.asarray(gaps["request_idx"], dtype=np.int64))
    itl = Gaps(_floats(gaps["itl_ms"]), owner.astype(np.int64))
    steps = con.execute(
        "SELECT (end_s - start_s) * 1e3 AS ms FROM engine_steps WHERE run_id = ? "
        "AND prefill_tokens = 0 AND decode_seqs > 0 ORDER BY step_id",
        [rid],
    ).fetchnumpy()
    win = con.execute(
        "SELECT min(send_ns) / 1e9, max(end_ns) / 1e9 FROM requests WHERE run_id = ? AND phase = 'measure'",
        [rid],
    ).fetchone()
    lo, hi = (float(win[0]), float(win[1])) if win and win[0] is not None else (0.0, 0.0)
    fingerprint = con.execute("SELECT workload_fingerprint FROM runs WHERE run_id = ?", [rid]).fetchone()
    return RunSamples(
        run=run, source=source, per_request=per_request, itl=itl,
        step_ms=_floats(steps["ms"]),
        send_s=_floats(lat["send_s"]),
        done_s=_floats(lat["done_s"]),
        output_tokens=np.asarray(lat["out_tok"], dtype=float),
        prompt_tokens=np.asarray(lat["in_tok"], dtype=float),
        window_s=(lo, hi),
        request_idx=idx,
        conversation_id=np.asarray(lat["conv"], dtype=np.int64),
        turn=np.asarray(lat["turn"], dtype=np.int64),
        fingerprint=fingerprint[0] if fingerprint else None,
        scheduled_s=_floats(lat["scheduled_s"]),
    )


def resolve(ref: str, db: Path) -> tuple[Path, str]:
    """`RUN` (in --db), `FILE.duckdb` (its latest completed run) or `FILE.duckdb@RUN`."""
    path_part, at, run_part = ref.partition("@")
    p = Path(path_part)
    if p.is_file():
        return p, run_part if at else "last"
    if at:
        raise StoreError(f"{ref}: {path_part} is not a store file")
    return db, ref


def open_samples(ref: str, db: Path) -> RunSamples:
    """Read one run named on the command line. Ownership: opens and closes its connection."""
    path, run_ref = resolve(ref, db)
    con = open_store(path, read_only=True)
    try:
        run = get_run(con, run_ref)
        if run.status == "running":
            raise StoreError(f"run {run.run_id} in {path} is still running (or crashed without finishing)")
        return load_samples(con, run, ref)
    finally:
        con.close()
