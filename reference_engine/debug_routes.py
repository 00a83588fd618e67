"""Debug endpoints and health of a multi-rank engine (reference_engine/parallel/).

`GET /debug/ranks` -> `{"tensor_parallel_size": N, "ranks": [{"rank": R, "pid": PID,
"dump": PATH|null, "stacks": PATH|null}, ...]}`: N is the number of rank processes (1 for
the sim executor, whose tensor parallelism is modelled, and for TP=1); `dump` is where rank
R writes its Flight Recorder pickle (`--dump-dir DIR` -> `DIR/rank_<R>`), `stacks` where it
appends its Python stacks on SIGUSR2.

`POST /debug/flight_recorder/dump` makes every rank write its dump now and answers once all
have (or after 20 s): `{"complete": bool, "dumps": [{"rank", "path", "written"}]}`; 400 with
the reason when the engine has no ranks to dump or no `--dump-dir`.

`/health` is 503 with `{"status": "unhealthy", "reason": ...}` once a collective has run past
`--collective-timeout-s` on any rank, or a rank has failed; 200 otherwise.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aiohttp import web

from reference_engine.metrics import escape_label_value
from reference_engine.protocol import invalid


def health_response(engine: Any) -> web.Response:
    reason = engine.health()
    if reason:
        return web.json_response({"status": "unhealthy", "reason": reason}, status=503)
    return web.Response(status=200)


def ranks_body(engine: Any) -> dict[str, Any]:
    ranks = getattr(engine.executor, "ranks", None)
    listed = ranks() if ranks is not None else [
        {"rank": 0, "pid": os.getpid(), "dump": None, "stacks": None}]
    return {"tensor_parallel_size": len(listed), "ranks": listed}


async def debug_ranks(request: web.Request, engine: Any) -> web.Response:
    return web.json_response(ranks_body(engine))


async def flight_recorder_dump(request: web.Request, engine: Any) -> web.Response:
    request_dump = getattr(engine.executor, "request_dump", None)
    if request_dump is None:
        raise invalid(None, "no collective log to dump: this engine runs one process "
                            "(--executor torch with --tensor-parallel-size >= 2 has ranks)")
    try:
        # Blocks until every rank has written (they answer through the rendezvous store).
        dumps = await asyncio.get_running_loop().run_in_executor(None, request_dump)
    except ValueError as exc:
        raise invalid(None, str(exc)) from None
    return web.json_response({"complete": all(d["written"] for d in dumps), "dumps": dumps})


def metrics_lines(engine: Any, model_name: str) -> str:
    """The collective watchdog's series, where the executor has ranks; else nothing."""
    metrics = getattr(engine.executor, "metrics", None)
    if metrics is None:
        return ""
    m = metrics()
    labels = f'model_name="{escape_label_value(model_name)}"'
    lines = [
        "# HELP reference_engine:collective_timeouts_total Collectives that ran past "
        "--collective-timeout-s, on any rank.",
        "# TYPE reference_engine:collective_timeouts_total counter",
        f"reference_engine:collective_timeouts_total{{{labels}}} {m['collective_timeouts_total']}",
        "# HELP reference_engine:healthy 1 while every rank is healthy, 0 after a collective "
        "timeout or a failed rank.",
        "# TYPE reference_engine:healthy gauge",
        f"reference_engine:healthy{{{labels}}} {m['healthy']}",
        "# HELP reference_engine:collective_last_completed_seq Rank 0's last completed "
        "collective sequence id.",
        "# TYPE reference_engine:collective_last_completed_seq gauge",
        f'reference_engine:collective_last_completed_seq{{{labels},rank="0"}} '
        f"{m['rank0_last_completed_collective']}",
    ]
    return "\n".join(lines) + "\n"


def add_routes(app: web.Application, engine: Any) -> None:
    app.router.add_get("/debug/ranks", lambda r: debug_ranks(r, engine))
    app.router.add_post("/debug/flight_recorder/dump", lambda r: flight_recorder_dump(r, engine))
