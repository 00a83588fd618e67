"""Throughput per batch size, and speculation's speed-up against a run without it.

Between two scrapes of /metrics the engine generated Δ`vllm:generation_tokens_total` tokens
in Δt, with `vllm:num_requests_running` requests in the batch (the mean of the two ends).
Each interval falls in a batch-size bucket (powers of two: 1, 2-3, 4-7, ...) and a bucket's
throughput is its tokens over its seconds. At the same batch size, a run with speculation
against one without (the same requests, the same load) gives the speed-up speculation buys
there: above one while the step is bound by reading the weights, below one once verifying
K+1 tokens per sequence makes the step compute-bound. The batch size above which
speculation costs throughput is the lower edge of the first bucket where the speed-up falls
below one and stays there.

Left out: an interval in which the generation counter fell (it spans an engine restart);
one with no running request at either end (idle); one that overlaps a prefill, i.e. some
request of the run was between its send and its first token in it, or
`vllm:prompt_tokens_total` grew in it (a step carrying a prefill is not a decode step, and
a long prefill would read as a batch decoding nothing); and one whose two ends lie in
different buckets (the batch changed bucket inside it).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb

from playbooks.sql import fetch

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
MIN_INTERVALS = 3    # a bucket seen in fewer intervals than this on either run is not compared

LOAD_SQL = """
SELECT coalesce(replica, '') AS replica, t_ns, name, value
FROM metric_samples
WHERE run_id = $run_id AND source = $source
  AND name IN ('vllm:num_requests_running', 'vllm:generation_tokens_total',
               'vllm:prompt_tokens_total')
ORDER BY replica, t_ns
"""


PREFILLS_SQL = """
SELECT send_ns, first_content_ns FROM requests
WHERE run_id = $run_id AND send_ns IS NOT NULL AND first_content_ns IS NOT NULL
ORDER BY send_ns
"""


def _prefill_windows(rows: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The union of the requests' [send, first token] windows, as sorted starts and ends."""
    starts: list[int] = []
    ends: list[int] = []
    for send, first in rows:
        if starts and send <= ends[-1]:
            ends[-1] = max(ends[-1], first)
        else:
            starts.append(send)
            ends.append(first)
    return starts, ends


def _overlaps(starts: list[int], ends: list[int], a: int, b: int) -> bool:
    i = bisect.bisect_left(starts, b)  # windows starting before b
    return i > 0 and ends[i - 1] > a


def bucket_of(batch: float) -> int:
    """The power of two at the bottom of the bucket holding this batch size."""
    return 1 << max(0, int(math.floor(math.log2(max(1.0, batch)))))


def bucket_label(b: int) -> str:
    return "1" if b == 1 else f"{b}-{2 * b - 1}"


@dataclass
class Bucket:
    tokens: float = 0.0
    seconds: float = 0.0
    intervals: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Throughput:
    buckets: dict[int, Bucket] = field(default_factory=dict)
    resets: int = 0
    prefill_intervals: int = 0
    sql: str = ""


def throughput_by_batch(con: duckdb.DuckDBPyConnection, run_id: str, source: str) -> Throughput:
    sql, rows = fetch(con, LOAD_SQL, run_id=run_id, source=source)
    prefill_sql, prefills = fetch(con, PREFILLS_SQL, run_id=run_id)
    starts, ends = _prefill_windows([(int(a), int(b)) for a, b in prefills])
    out = Throughput(sql=sql + ";\n" + prefill_sql)
    snaps: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for replica, t_ns, name, value in rows:
        snaps[replica][int(t_ns)][name] = float(value)
    for by_t in snaps.values():
        times = [t for t in sorted(by_t) if RUNNING in by_t[t] and GENERATED in by_t[t]]
        for a, b in zip(times, times[1:], strict=False):
            tokens = by_t[b][GENERATED] - by_t[a][GENERATED]
            if tokens < 0:
                out.resets += 1
                continue
            run_a, run_b = by_t[a][RUNNING], by_t[b][RUNNING]
            if run_a <= 0 and run_b <= 0:
                continue
            if by_t[b].get(PROMPT, 0.0) > by_t[a].get(PROMPT, 0.0) or _overlaps(starts, ends, a, b):
                out.prefill_intervals += 1
                continue
            if bucket_of(run_a) != bucket_of(run_b):
                continue
            bucket = out.buckets.setdefault(bucket_of((run_a + run_b) / 2), Bucket())
            bucket.tokens += tokens
            bucket.seconds += (b - a) / 1e9
            bucket.intervals += 1
    return out


@dataclass
class SpeedUp:
    """Speed-up per bucket compared on both runs, ascending; and the crossover."""

    rows: list[tuple[int, float, float, float]]   # (bucket, spec tok/s, base tok/s, ratio)
    costs_above: int | None                       # batch size above which it costs throughput
    monotonic: bool                               # no bucket above the crossover pays again


def speed_up(spec: Throughput, base: Throughput, min_intervals: int = MIN_INTERVALS) -> SpeedUp:
    rows = []
    for b in sorted(spec.buckets.keys() & base.buckets.keys()):
        s, n = spec.buckets[b], base.buckets[b]
        if s.intervals < min_intervals or n.intervals < min_intervals or n.tokens_per_s <= 0:
            continue
        rows.append((b, s.tokens_per_s, n.tokens_per_s, s.tokens_per_s / n.tokens_per_s))
    costs_above = None
    monotonic = True
    for i, (b, _, _, ratio) in enumerate(rows):
        if ratio < 1.0:
            costs_above = b
            monotonic = all(r[3] < 1.0 for r in rows[i:])
            break
    return SpeedUp(rows, costs_above, monotonic)
