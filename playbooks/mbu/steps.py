"""The decode steps of a run and the context each decoding sequence read in them.

The engine's step log says how long each step took, how many sequences decoded and how many
prompt tokens were prefilled, but not their context lengths. Those follow from the client's
record: a request's first token comes out of the step that ended just before the client got
it, and from then on the request gains one token per step until its last (continuous batching
runs every running sequence in every step). So in the j-th step after its first token, a
request decodes with a context of prompt + j tokens (the new token attends to itself and all
before it). `matched` counts the sequences found this way; against the step log's
`decode_seqs` it says how complete the reconstruction is (requests that failed, or that the
client sent before the log started, are missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from playbooks.mbu.setup import ByteModel
from playbooks.sql import fetch_numpy

STEPS_SQL = """
WITH s AS (
  SELECT step_id, end_s - start_s AS dur_s, prefill_tokens, decode_seqs, preemptions,
         CAST(round(end_s * 1e9) AS BIGINT) - $t0_ns AS end_ns
  FROM engine_steps WHERE run_id = $run_id
), r AS (
  SELECT request_idx, prompt_tokens, output_tokens, first_content_ns
  FROM requests
  WHERE run_id = $run_id AND error_class IS NULL AND output_tokens > 1
    AND prompt_tokens IS NOT NULL AND first_content_ns IS NOT NULL
), f AS (
  -- the step that produced the first token: the last one that ended before it arrived
  SELECT r.*, s.step_id AS first_step FROM r ASOF JOIN s ON r.first_content_ns >= s.end_ns
), seqs AS (
  SELECT s.step_id, f.prompt_tokens + (s.step_id - f.first_step) AS ctx
  FROM s JOIN f ON s.step_id > f.first_step AND s.step_id < f.first_step + f.output_tokens
)
SELECT s.step_id, s.dur_s, s.prefill_tokens, s.decode_seqs, s.preemptions,
       count(seqs.ctx) AS matched, coalesce(sum(seqs.ctx), 0) AS ctx_sum,
       coalesce(sum($kv_layer_tokens), 0) AS kv_layer_tokens
FROM s LEFT JOIN seqs USING (step_id)
GROUP BY ALL ORDER BY s.step_id
"""


@dataclass
class DecodeSteps:
    sql: str
    step_id: np.ndarray
    dur_s: np.ndarray
    batch: np.ndarray           # decoding sequences (step log)
    ctx_sum: np.ndarray         # sum of their contexts (reconstructed, scaled to `batch`)
    kv_bytes: np.ndarray        # KV read by those contexts, per GPU
    weight_bytes: np.ndarray    # weights read, per GPU
    matched: int                # decoding sequences the reconstruction found
    logged: int                 # decoding sequences the step log counts
    all_steps: int
    mixed_steps: int            # steps that also prefilled (not decode steps)
    mixed_dur_s: float
    preemptions: int

    @property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.kv_bytes

    @property
    def n(self) -> int:
        return len(self.dur_s)

    @property
    def coverage(self) -> float:
        return self.matched / self.logged if self.logged else 0.0


def load_steps(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int,
               bm: ByteModel) -> DecodeSteps:
    sql, cols = fetch_numpy(con, STEPS_SQL.replace("$kv_layer_tokens", bm.kv_layer_tokens_sql("seqs.ctx")),
                            run_id=run_id, t0_ns=int(t0_ns))
    c: dict[str, Any] = {k: np.asarray(v) for k, v in cols.items()}
    prefill = c["prefill_tokens"].astype(float)
    batch = c["decode_seqs"].astype(float)
    decode = (prefill == 0) & (batch > 0)
    mixed = (prefill > 0) & (batch > 0)
    matched = c["matched"].astype(float)[decode]
    b = batch[decode]
    ctx = c["ctx_sum"].astype(float)[decode]
    kvt = c["kv_layer_tokens"].astype(float)[decode]
    # A step where the reconstruction missed some sequences: the missing ones are taken to
    # read what the found ones did on average; where it found none, the run's average.
    per_seq_ctx = ctx.sum() / matched.sum() if matched.sum() else 0.0
    per_seq_kvt = kvt.sum() / matched.sum() if matched.sum() else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(matched > 0, b / np.maximum(matched, 1), 0.0)
    ctx = np.where(matched > 0, ctx * scale, b * per_seq_ctx)
    kvt = np.where(matched > 0, kvt * scale, b * per_seq_kvt)
    return DecodeSteps(
        sql=sql, step_id=c["step_id"][decode], dur_s=c["dur_s"].astype(float)[decode], batch=b,
        ctx_sum=ctx, kv_bytes=kvt * bm.kv_bytes_per_layer_token, weight_bytes=bm.weights(b),
        matched=int(np.minimum(matched, b).sum()), logged=int(b.sum()),
        all_steps=len(prefill), mixed_steps=int(mixed.sum()),
        mixed_dur_s=float(c["dur_s"].astype(float)[mixed].sum()),
        preemptions=int(c["preemptions"].astype(float).sum()))
