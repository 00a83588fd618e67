"""The workload fingerprint: which requests a run asked for, in which order, and when.

Two runs with the same fingerprint sent the same requests: request k of one is request k of
the other, with the same intended send time, input-length target and max_tokens. The gate
uses it to pair runs request by request; runs whose fingerprints differ are compared unpaired
(with a warning), and refused only when their configuration says they should have matched.

What goes in, per request, ordered by its key:

- the key: `(session, turn)` — for single requests `(request_idx, 0)` (the runner sends
  sessions in the order the workload yields them, so the index is the session's position);
  for conversations `(conversation_id, turn)`, because turns of different conversations
  interleave in an order the server's timing decides;
- the intended send offset in ns from the run's start, where there is a schedule (open loop
  and trace: every single request and every first turn); None for closed loops and for later
  turns, which are sent when a slot or the previous reply frees up;
- `target_input_tokens` (None where the workload has no target, e.g. ShareGPT) and
  `max_tokens`; for conversation turns the target less the target's own template tokens
  (`config.token_model.template`: `first + turn * per_turn`), which the recorded target
  includes, so one seed gives one fingerprint on targets whose chat templates differ;
- the label (shared-prefix group, JSON schema, turn, workload name), and with `--tenants` or
  `--adapters` the request's tenant and adapter after it (`label|tenant|adapter`), so runs
  without them keep the fingerprints they had;
- and once per run: the loop kind and, for a closed loop (no schedule), its concurrency.

Not in it: the prompt text and the per-run salt (a salted repeat of a run has the same
fingerprint), the target, the model, the stop condition beyond the requests it cut off.
A run stopped by time in a closed loop sends a timing-dependent number of requests, so its
fingerprint changes with the count; `intended_requests` gives the keyed rows for pairing
the requests two such runs have in common.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import duckdb

FINGERPRINT_VERSION = 1


@dataclass(frozen=True, slots=True)
class IntendedRequest:
    key: tuple[int, int]  # (session, turn): see the module docstring
    offset_ns: int | None
    input_tokens: int | None
    max_tokens: int
    label: str


def workload_fingerprint(requests: Iterable[IntendedRequest], *,
                         closed_loop_concurrency: int | None = None) -> str:
    """`wf1-` and 32 hex digits of a SHA-256 over the header and the requests in key order.

    `closed_loop_concurrency` is the slot count of a closed loop (whose requests carry no
    offsets); None for an open loop or a trace replay."""
    if closed_loop_concurrency is not None and closed_loop_concurrency < 1:
        raise ValueError(f"closed_loop_concurrency: {closed_loop_concurrency} must be >= 1")
    rows = sorted(requests, key=lambda r: r.key)
    keys = [r.key for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError("requests: two requests share one (session, turn) key")
    header = {"v": FINGERPRINT_VERSION,
              "loop": "open" if closed_loop_concurrency is None else "closed",
              "concurrency": closed_loop_concurrency}
    body = [[*r.key, r.offset_ns, r.input_tokens, r.max_tokens, r.label] for r in rows]
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(json.dumps(body, separators=(",", ":")).encode())
    return f"wf{FINGERPRINT_VERSION}-{h.hexdigest()[:32]}"


def _config(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise ValueError(f"run {run_id!r}: no such run")
    return json.loads(row[0]) if row[0] else {}


def closed_loop_concurrency(config: dict[str, Any]) -> int | None:
    arrivals = config.get("arrivals") or {}
    if arrivals.get("kind") != "closed":
        return None
    return int(arrivals.get("concurrency") or 0) or None


def intended_requests(con: duckdb.DuckDBPyConnection, run_id: str) -> list[IntendedRequest]:
    """The run's requests as the fingerprint sees them, from the store, in key order."""
    config = _config(con, run_id)
    closed = closed_loop_concurrency(config) is not None
    template = (config.get("token_model") or {}).get("template") or {}
    first, per_turn = int(template.get("first") or 0), int(template.get("per_turn") or 0)
    rows = con.execute(
        "SELECT request_idx, conversation_id, turn, intended_send_ns, target_input_tokens, "
        "max_tokens, label, tenant, adapter FROM requests WHERE run_id = ? ORDER BY request_idx",
        [run_id]).fetchall()
    out = []
    for idx, conv, turn, intended, n_in, n_out, label, tenant, adapter in rows:
        if tenant is not None or adapter is not None:
            label = f"{label}|{tenant or ''}|{adapter or ''}"
        key = (int(conv), int(turn or 0)) if conv is not None else (int(idx), 0)
        scheduled = not closed and key[1] == 0  # later turns follow the previous reply
        if n_in is not None and conv is not None:
            n_in = int(n_in) - first - key[1] * per_turn  # the content the workload planned
        out.append(IntendedRequest(key, int(intended) if scheduled else None,
                                   None if n_in is None else int(n_in), int(n_out), str(label)))
    out.sort(key=lambda r: r.key)
    return out


def run_fingerprint(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The fingerprint of a stored run, computed from its requests and config."""
    return workload_fingerprint(intended_requests(con, run_id),
                                closed_loop_concurrency=closed_loop_concurrency(_config(con, run_id)))


def store_fingerprint(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """Compute the run's fingerprint and write it to `runs.workload_fingerprint`."""
    fp = run_fingerprint(con, run_id)
    con.execute("UPDATE runs SET workload_fingerprint = ? WHERE run_id = ?", [fp, run_id])
    return fp
