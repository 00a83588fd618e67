"""Tokens per decode step as the clients saw them, from the streams.

With speculation an engine step hands a request 1..K+1 tokens at once, and a streaming
server sends them as one event; after the first event (the prefill's token), a request's
events are its decode steps. So a request's tokens per step is (output tokens - 1) /
(content events - 1).

End of sequence is settled before that division: the step that produced EOS is cut there
(the drafts accepted past it are dropped, and whether EOS itself is in the usage count is
the server's choice), so a request that stopped at EOS has a last step shorter than the
steps before it. Such requests are left out of the estimate and counted; a request that
stopped at its length limit never had a step cut (drafts are capped by the tokens left).
The estimate is the counters' mean accepted length diluted by the steps that carried no
draft (no n-gram matched): it is the speed a user saw, the counters are what the drafter
did.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.sql import fetch_one

STREAMS_SQL = """
SELECT count(*) FILTER (WHERE finish_reason = 'length' AND num_content_chunks >= 2) AS used,
       sum(output_tokens - 1) FILTER (WHERE finish_reason = 'length' AND num_content_chunks >= 2)
           AS decode_tokens,
       sum(num_content_chunks - 1) FILTER (WHERE finish_reason = 'length' AND num_content_chunks >= 2)
           AS decode_events,
       count(*) FILTER (WHERE finish_reason = 'stop') AS stopped_at_eos,
       count(*) AS finished
FROM requests
WHERE run_id = $run_id AND error_class IS NULL AND output_tokens IS NOT NULL
"""


@dataclass
class ClientSteps:
    used: int
    decode_tokens: int
    decode_events: int
    stopped_at_eos: int
    finished: int
    sql: str

    @property
    def tokens_per_step(self) -> float | None:
        return self.decode_tokens / self.decode_events if self.decode_events > 0 else None


def client_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> ClientSteps:
    sql, row = fetch_one(con, STREAMS_SQL, run_id=run_id)
    used, tokens, events, eos, finished = (int(v or 0) for v in row)
    return ClientSteps(used, tokens, events, eos, finished, sql)
