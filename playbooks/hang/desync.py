"""Mismatched collectives found in the store: SQL narrows half a million entries to the few
sequence ids where the ranks' calls differ, then `matching.judge` checks only those.

A sequence id is a candidate when, among the ranks that hold it (at least two, inside the
window every rank's ring buffer still holds), the calls are not all the same (op, sizes,
dtypes), or a call breaks its op's own rules (all_reduce input = output; all_gather output =
input x group size; reduce_scatter input = output x group size; input dtypes = output
dtypes). Every other sequence id passes `judge` by construction, so the result is the same
as `matching.find_mismatches` over every entry, at SQL speed.
"""

from __future__ import annotations

import duckdb

from playbooks.hang.load import entries_at
from playbooks.hang.matching import Mismatch, judge
from playbooks.sql import fetch

CANDIDATES_SQL = """
WITH e AS (
  SELECT rank, collective_seq_id AS seq, op, input_sizes, output_sizes, input_dtypes,
         output_dtypes, input_numel, output_numel
  FROM hang_fr_entries
  WHERE capture_id = $capture_id AND pg_name = $pg_name AND NOT coalesce(is_p2p, false)
), w AS (
  SELECT max(first_seq) AS start FROM (SELECT min(seq) AS first_seq FROM e GROUP BY rank)
)
SELECT seq FROM e, w WHERE seq >= w.start GROUP BY seq
HAVING count(*) >= 2 AND (
  count(DISTINCT (op, input_sizes, output_sizes, input_dtypes, output_dtypes)) > 1
  OR bool_or(op IN ('all_reduce', 'allreduce_coalesced') AND input_sizes <> output_sizes)
  OR bool_or(op IN ('all_gather', '_all_gather_base', 'all_gather_into_tensor_coalesced')
             AND output_numel <> input_numel * $group_size)
  OR bool_or(op IN ('reduce_scatter', '_reduce_scatter_base', 'reduce_scatter_tensor_coalesced')
             AND input_numel <> output_numel * $group_size)
  OR bool_or(op NOT IN ('scatter', 'gather', 'broadcast') AND input_dtypes <> output_dtypes))
ORDER BY seq
"""

# The group's calls before a sequence id, as the lowest rank holding each made them: the
# rhythm the culprit is judged against (matching._culprits).
PAST_SQL = """
WITH e AS (
  SELECT rank, collective_seq_id AS seq, op, input_sizes, output_sizes, input_dtypes,
         output_dtypes
  FROM hang_fr_entries
  WHERE capture_id = $capture_id AND pg_name = $pg_name AND NOT coalesce(is_p2p, false)
), w AS (
  SELECT max(first_seq) AS start FROM (SELECT min(seq) AS first_seq FROM e GROUP BY rank)
)
SELECT arg_min((op, input_sizes, output_sizes, input_dtypes, output_dtypes), rank) AS call
FROM e, w WHERE seq >= w.start AND seq < $seq
GROUP BY seq HAVING count(*) >= 2 ORDER BY seq
"""

GROUPS_SQL = """
SELECT DISTINCT pg_name FROM hang_fr_entries
WHERE capture_id = $capture_id AND NOT coalesce(is_p2p, false) ORDER BY pg_name
"""


def find_mismatches_in_store(con: duckdb.DuckDBPyConnection, capture_id: str,
                             members: dict[str, list[int]]) -> list[Mismatch]:
    """The first mismatched collective of each process group (see matching.find_mismatches)."""
    out = []
    _, groups = fetch(con, GROUPS_SQL, capture_id=capture_id)
    for (pg,) in groups:
        size = len(members.get(pg) or []) or 1
        _, cands = fetch(con, CANDIDATES_SQL, capture_id=capture_id, pg_name=pg, group_size=size)
        for (seq,) in cands:
            at = {e.rank: e for e in entries_at(con, capture_id, pg, int(seq))}
            _, past_rows = fetch(con, PAST_SQL, capture_id=capture_id, pg_name=pg, seq=int(seq))
            past = [tuple(r[0].values()) if isinstance(r[0], dict) else tuple(r[0])
                    for r in past_rows]
            m = judge(at, past, size)
            if m is not None:
                out.append(m)
                break
    return out
