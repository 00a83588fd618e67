"""The store's two views, `request_latency` and `itl`, as each schema version created them.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` runs them
(version 1 created both, version 4 replaced both).
"""

from __future__ import annotations

# The views as schema version 1 created them; version 4 replaced both (VIEWS_V4).
VIEWS_V1 = [
    """
CREATE OR REPLACE VIEW request_latency AS
SELECT run_id, request_idx, label, phase, error_class,
       (first_content_ns - send_ns) / 1e6 AS ttft_ms,
       (first_content_ns - intended_send_ns) / 1e6 AS ttft_intended_ms,
       (last_chunk_ns - send_ns) / 1e6 AS e2e_ms,
       (last_chunk_ns - intended_send_ns) / 1e6 AS e2e_intended_ms,
       CASE WHEN output_tokens > 1
            THEN (last_chunk_ns - first_content_ns) / 1e6 / (output_tokens - 1) END AS tpot_ms,
       (send_ns - intended_send_ns) / 1e6 AS schedule_lag_ms,
       prompt_tokens, output_tokens
FROM requests
""",
    """
CREATE OR REPLACE VIEW itl AS
SELECT run_id, request_idx, seq, t_ns, coalesced,
       (t_ns - lag(t_ns) OVER (PARTITION BY run_id, request_idx ORDER BY seq)) / 1e6 AS itl_ms
FROM chunks
WHERE content
""",
]


# e2e ends at the last event that carries `choices` (vLLM's `bench serve` does the same), not
# at the usage event or `[DONE]`, which a server may send long after the last token; stores
# from before version 4 have no last_choices_ns and fall back to the last content chunk.
_E2E_END = "coalesce(last_choices_ns, last_content_ns)"

VIEWS_V4 = [
    f"""
CREATE OR REPLACE VIEW request_latency AS
SELECT run_id, request_idx, label, phase, error_class,
       (first_content_ns - send_ns) / 1e6 AS ttft_ms,
       (first_content_ns - intended_send_ns) / 1e6 AS ttft_intended_ms,
       ({_E2E_END} - send_ns) / 1e6 AS e2e_ms,
       ({_E2E_END} - intended_send_ns) / 1e6 AS e2e_intended_ms,
       CASE WHEN output_tokens > 1
            THEN ({_E2E_END} - first_content_ns) / 1e6 / (output_tokens - 1) END AS tpot_ms,
       (send_ns - intended_send_ns) / 1e6 AS schedule_lag_ms,
       -- greatest() skips NULLs: NULL only when the stream had neither (or an older store)
       (greatest(usage_ns, done_ns) - {_E2E_END}) / 1e6 AS trailing_ms,
       prompt_tokens, output_tokens
FROM requests
""",
    # ITL: a read that delivered n content events after a gap g since the previous content
    # read gives each of its events g / n, so the distribution follows the server's token
    # schedule even when a busy client reads several events at once. Events that came in the
    # same read as the first content event have no measurable gap (itl_ms NULL, like the
    # first). raw_itl_ms is the per-event gap (0 ms inside a read), as vLLM's bench reports.
    """
CREATE OR REPLACE VIEW itl AS
WITH c AS (
  SELECT run_id, request_idx, seq, t_ns, read_idx, coalesced,
         t_ns - lag(t_ns) OVER (PARTITION BY run_id, request_idx ORDER BY seq) AS raw_gap_ns,
         count(*) OVER (PARTITION BY run_id, request_idx, read_idx) AS events_in_read,
         min(read_idx) OVER (PARTITION BY run_id, request_idx) AS first_read
  FROM chunks
  WHERE content
)
SELECT run_id, request_idx, seq, t_ns, read_idx, coalesced, events_in_read,
       CASE WHEN read_idx > first_read
            THEN max(raw_gap_ns) OVER (PARTITION BY run_id, request_idx, read_idx)
                 / events_in_read / 1e6 END AS itl_ms,
       raw_gap_ns / 1e6 AS raw_itl_ms
FROM c
""",
]


# Version 18: request_latency carries the request's tenant and adapter (the itl view is as
# version 4 made it).
VIEWS_V18 = [
    f"""
CREATE OR REPLACE VIEW request_latency AS
SELECT run_id, request_idx, label, phase, error_class,
       (first_content_ns - send_ns) / 1e6 AS ttft_ms,
       (first_content_ns - intended_send_ns) / 1e6 AS ttft_intended_ms,
       ({_E2E_END} - send_ns) / 1e6 AS e2e_ms,
       ({_E2E_END} - intended_send_ns) / 1e6 AS e2e_intended_ms,
       CASE WHEN output_tokens > 1
            THEN ({_E2E_END} - first_content_ns) / 1e6 / (output_tokens - 1) END AS tpot_ms,
       (send_ns - intended_send_ns) / 1e6 AS schedule_lag_ms,
       -- greatest() skips NULLs: NULL only when the stream had neither (or an older store)
       (greatest(usage_ns, done_ns) - {_E2E_END}) / 1e6 AS trailing_ms,
       prompt_tokens, output_tokens, tenant, adapter
FROM requests
""",
]
