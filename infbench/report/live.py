"""Live progress while a run goes on: done / in flight / errors, rate, rolling p50 TTFT/ITL.

On a terminal one line is redrawn in place; piped (a CI log) a plain line is printed every
`log_every_s` seconds, so a long run is never silent and a hung target shows as lines whose
"done" stops growing.

The ITL shown is the median over recent requests of each one's mean ITL as the summary defines
it (each read's gap spread over the tokens it brought), so a client that reads several tokens
at once does not show 0 ms here either.
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from infbench.loadgen.run.types import LiveStats, RunSettings


def _line(st: LiveStats, settings: RunSettings) -> Text:
    elapsed = (time.monotonic_ns() - st.started_ns) / 1e9
    goal = []
    if settings.duration_s:
        goal.append(f"{elapsed:5.1f}/{settings.duration_s:.0f}s")
    else:
        goal.append(f"{elapsed:5.1f}s")
    if settings.num_requests:
        goal.append(f"{st.sent}/{settings.num_requests} sent")
    ttft = LiveStats.p50(st.recent_ttft_ms)
    itl = LiveStats.p50(st.recent_itl_ms)
    h = st.last_health
    parts: list[str | tuple[str, str]] = [
        ("  ".join(goal), "bold"),
        f"  done {st.done}  in flight {st.in_flight}  ",
        (f"errors {st.errors}", "red" if st.errors else ""),
        f"  {st.rate():.1f} req/s",
        f"  p50 TTFT {'-' if ttft is None else f'{ttft:.1f}'} ms",
        f"  p50 ITL {'-' if itl is None else f'{itl:.2f}'} ms",
    ]
    if h is not None:
        parts.append((f"  client cpu {h.cpu_percent:.0f}% loop lag {h.loop_lag_ms:.1f} ms",
                      "red" if h.cpu_percent > 90 or h.loop_lag_ms > 50 else "dim"))
    return Text.assemble(*parts)


async def live_progress(st: LiveStats, settings: RunSettings, console: Console | None = None,
                        refresh_s: float = 0.5, log_every_s: float = 5.0) -> None:
    """Redraws from the event loop (no refresh thread competing for the GIL)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        await _log_lines(st, settings, console, log_every_s)
        return
    with Live(_line(st, settings), console=console, auto_refresh=False, transient=False) as live:
        try:
            while True:
                await asyncio.sleep(refresh_s)
                live.update(_line(st, settings), refresh=True)
        finally:
            live.update(_line(st, settings), refresh=True)


async def _log_lines(st: LiveStats, settings: RunSettings, console: Console, every_s: float) -> None:
    try:
        while True:
            await asyncio.sleep(every_s)
            console.print(_line(st, settings).plain, markup=False, highlight=False, soft_wrap=True)
    finally:
        console.print(_line(st, settings).plain, markup=False, highlight=False, soft_wrap=True)
