"""Preflight of a fleet: every replica answers, serves the model and counts tokens alike.

The first replica is checked and calibrated as one target would be (its token model sizes
the prompts); each other replica goes through the same checks for the same model, and its
/metrics and step log are found. A replica that counts prompt tokens differently from the
first gets a warning: prompts are sized for the first.
"""

from __future__ import annotations

from infbench.loadgen.fleet.replicas import Replica
from infbench.loadgen.preflight import PreflightError, Target, preflight


async def preflight_fleet(replicas: list[Replica], endpoint: str, model: str | None,
                          api_key: str | None) -> tuple[Target, list[str]]:
    """The first replica's Target (the run's) and warnings; fills each replica's URLs."""
    first: Target | None = None
    warnings: list[str] = []
    for r in replicas:
        try:
            t = await preflight(r.url, endpoint, model if first is None else first.model, api_key)
        except PreflightError as exc:
            raise PreflightError(f"replica {r.name}: {exc}") from None
        r.url, r.metrics_url, r.steps_url, r.steps_after = t.url, t.metrics_url, t.steps_url, t.steps_after
        if first is None:
            first = t
            continue
        if t.tokens.describe() != first.tokens.describe():
            warnings.append(f"replica {r.name} counts prompt tokens differently from "
                            f"{replicas[0].name}; prompts are sized for {replicas[0].name}")
    assert first is not None
    return first, warnings
