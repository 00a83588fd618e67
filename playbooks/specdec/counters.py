"""Speculative decoding's counters over a run, from the run's snapshots of them.

vLLM counts drafts (sequence-steps that carried draft tokens), draft tokens, accepted draft
tokens and accepted tokens per draft position, as `vllm:spec_decode_*_total` counters.
infbench keeps every scrape of /metrics (`metric_samples`, source `metrics`) and every
sample a Prometheus pull brought (source `prometheus`); this module turns the snapshots into
increases over the run.

A counter restarts from zero with its engine. An interval between two snapshots in which any
of these counters fell contains a restart: what happened in it cannot be told (the old
process's last increase and the new one's first are both unseen), so the interval is left
out of every sum, for every counter at once, and each such interval is reported. Rates are
computed over the intervals kept, so they do not depend on how much the restart hid. (A
restart followed by more counting than before, all before the next snapshot, cannot be seen
from counters alone; scrape more often than the engine restarts.)
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb

from playbooks.sql import fetch

PREFIX = "vllm:spec_decode_"
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
_NAMES = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)
_POSITION = re.compile(r'(?:^|,)position="(\d+)"')

# Both spellings: prometheus_client's exposition names a counter's sample `..._total`, and a
# Prometheus server stores that name; older exporters wrote the bare name.
SPEC_SQL = """
SELECT source, coalesce(replica, '') AS replica, t_ns,
       regexp_replace(regexp_replace(name, '^vllm:spec_decode_', ''), '_total$', '') AS counter,
       labels, value
FROM metric_samples
WHERE run_id = $run_id AND source = $source
  AND regexp_matches(name, '^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens|accepted_tokens_per_pos)(_total)?$')
ORDER BY replica, t_ns
"""
SOURCES_SQL = """
SELECT source, count(*) AS samples FROM metric_samples
WHERE run_id = $run_id AND name LIKE 'vllm:spec_decode_%'
GROUP BY source ORDER BY source
"""


@dataclass
class Reset:
    replica: str
    start_s: float
    end_s: float
    counter: str
    before: float
    after: float


@dataclass
class SpecTotals:
    """Increases of the counters over the intervals kept (see the module docstring)."""

    source: str
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    intervals: int = 0
    kept_s: float = 0.0
    span_s: float = 0.0
    resets: list[Reset] = field(default_factory=list)
    sql: str = ""

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens per draft token."""
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens a drafted step yields on average: the accepted drafts plus the bonus token
        (vLLM's "mean acceptance length")."""
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def num_speculative_tokens(self) -> int:
        return max(self.per_pos, default=-1) + 1

    def position_rates(self) -> list[float]:
        """Share of drafts whose draft at each position was accepted."""
        if self.drafts <= 0:
            return []
        return [self.per_pos.get(i, 0.0) / self.drafts for i in range(self.num_speculative_tokens)]

    def conditional_rates(self) -> list[float | None]:
        """Acceptance at each position given the one before was accepted: the per-token
        acceptance a geometric model (plan specdec's α) assumes is the same at every position."""
        rates, before = [], self.drafts
        for i in range(self.num_speculative_tokens):
            now = self.per_pos.get(i, 0.0)
            rates.append(now / before if before > 0 else None)
            before = now
        return rates


def pick_source(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str | None, str]:
    """The run's scrapes when it has them, else its Prometheus pulls; None when neither
    carries a speculative-decoding counter."""
    sql, rows = fetch(con, SOURCES_SQL, run_id=run_id)
    sources = {r[0] for r in rows}
    for source in ("metrics", "prometheus"):
        if source in sources:
            return source, sql
    return None, sql


def _key(counter: str, labels: str | None) -> tuple[str, int] | None:
    if counter == PER_POS:
        m = _POSITION.search(labels or "")
        return (counter, int(m.group(1))) if m else None
    return (counter, -1) if counter in _NAMES else None


def spec_totals(con: duckdb.DuckDBPyConnection, run_id: str, source: str) -> SpecTotals:
    sql, rows = fetch(con, SPEC_SQL, run_id=run_id, source=source)
    totals = SpecTotals(source, sql=sql)
    # replica -> t_ns -> series -> value (one snapshot of every series per scrape)
    snaps: dict[str, dict[int, dict[tuple[str, int], float]]] = defaultdict(lambda: defaultdict(dict))
    for _, replica, t_ns, counter, labels, value in rows:
        key = _key(counter, labels)
        if key is not None:
            snaps[replica][int(t_ns)][key] = float(value)
    for replica, by_t in snaps.items():
        times = sorted(by_t)
        if times:
            totals.span_s += (times[-1] - times[0]) / 1e9
        for a, b in zip(times, times[1:], strict=False):
            before, after = by_t[a], by_t[b]
            common = before.keys() & after.keys()
            fell = [k for k in sorted(common) if after[k] < before[k]]
            if fell:
                k = fell[0]
                name = PREFIX + k[0] + "_total" + (f'{{position="{k[1]}"}}' if k[1] >= 0 else "")
                totals.resets.append(Reset(replica, a / 1e9, b / 1e9, name, before[k], after[k]))
                continue
            totals.intervals += 1
            totals.kept_s += (b - a) / 1e9
            for (counter, pos) in common:
                inc = after[(counter, pos)] - before[(counter, pos)]
                if counter == DRAFTS:
                    totals.drafts += inc
                elif counter == DRAFT_TOKENS:
                    totals.draft_tokens += inc
                elif counter == ACCEPTED:
                    totals.accepted += inc
                else:
                    totals.per_pos[pos] = totals.per_pos.get(pos, 0.0) + inc
    return totals
