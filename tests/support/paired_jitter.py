"""How far apart two runs of one schedule read their mean TTFT by chance, from the runs
themselves: a re-run (`infbench diagnose dilution`'s, or any replay) against its stored twin.

On a real-time engine two runs of one schedule differ in which requests of a burst each step
took in: sub-millisecond timing decides it, and the queue multiplies it, so the runs' mean TTFTs
differ though nothing else does. A burst's requests move together (a step that took one more of
them in delays all behind it); separate busy periods of the engine do not. `jitter_se` pairs the
two runs' requests by schedule position, sums their TTFT differences per busy period of the
twin, and returns the standard error of the mean difference from those cluster sums.
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.support.store_rows import store_rows

# A run's requests in the order of their intended send offsets, and the busy period of the
# engine each was served in: a step that starts more than 1 ms after the previous one ended
# opens a period, and a request sent in the idle gap before it (the one that woke the engine)
# belongs to it, as does one sent while it lasts.
PAIRED_TTFT_SQL = """
WITH t0 AS (SELECT t0_monotonic_ns AS t0 FROM runs WHERE run_id = $run_id),
st AS (SELECT start_s, lag(end_s) OVER (ORDER BY step_id) AS prev_end FROM engine_steps WHERE run_id = $run_id),
opens AS (SELECT CAST(round(prev_end * 1e9) AS BIGINT) - (SELECT t0 FROM t0) AS s_ns FROM st
          WHERE start_s - prev_end > 0.001),
q AS (SELECT coalesce(intended_send_ns, send_ns) - min(coalesce(intended_send_ns, send_ns)) OVER () AS at_ns,
             send_ns, (first_content_ns - send_ns) / 1e6 AS ttft_ms
      FROM requests WHERE run_id = $run_id AND phase = 'measure' AND error_class IS NULL
        AND first_content_ns IS NOT NULL)
SELECT at_ns, ttft_ms, (SELECT count(*) FROM opens WHERE opens.s_ns <= q.send_ns) AS period
FROM q ORDER BY at_ns
"""


def paired_ttft_sql(run_id: str) -> str:
    return PAIRED_TTFT_SQL.replace("$run_id", "'" + run_id.replace("'", "''") + "'")


def jitter_se(db: Path, twin: str, rerun: str) -> float:
    """The standard error of the re-run's mean TTFT less its twin's, from the two runs' paired
    requests (same schedule position), clustered by the twin's busy periods: a burst's requests
    move together (one step taking one more of them in delays all behind it), bursts do not.
    One busy period leaves no spread to estimate from: 0. ValueError when the two runs are
    not one schedule (counts differ, or an offset by a microsecond or more)."""
    a = store_rows(db, paired_ttft_sql(twin))
    b = store_rows(db, paired_ttft_sql(rerun))
    if not a or len(a) != len(b):
        raise ValueError(f"{rerun} answered {len(b)} requests, its twin {twin} {len(a)}")
    # offsets are stored in seconds by the re-run's recipe: equal to the microsecond
    worst = max(abs(int(x[0]) - int(y[0])) for x, y in zip(a, b, strict=True))
    if worst >= 1_000:
        raise ValueError(f"{rerun} did not send {twin}'s schedule: an offset {worst / 1e6:.3f} ms apart")
    diffs: dict[int, list[float]] = {}
    for (_, ta, period), (_, tb, _) in zip(a, b, strict=True):
        diffs.setdefault(int(period), []).append(float(tb) - float(ta))
    n = len(a)
    mean = math.fsum(float(y[1]) - float(x[1]) for x, y in zip(a, b, strict=True)) / n
    c = len(diffs)
    if c < 2:
        return 0.0
    spread = math.fsum((math.fsum(v) - len(v) * mean) ** 2 for v in diffs.values())
    return math.sqrt(spread * c / (c - 1)) / n
