"""Generate the committed dashboard JSON from the code (grafana-foundation-sdk builders).

    python -m dashboards.build            # rewrite dashboards/json/*.json
    python -m dashboards.build --check    # exit 1 if the committed JSON differs from the code

The JSON is what users import into Grafana (or provision with
dashboards/provisioning/dashboards.yaml); the code is what is maintained. A test fails when
the two differ, so the JSON never drifts from its source.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dashboards import engine, gpu, infbench_run
from dashboards.common import Spec, Variable, to_json

JSON_DIR = Path(__file__).resolve().parent / "json"

# file name -> (builder, the Specs and Variables the tests check against Prometheus)
DASHBOARDS: dict[str, tuple[Callable[[], Any], list[Spec], list[Variable]]] = {
    "engine-overview.json": (engine.dashboard, engine.LATENCY + engine.LOAD + engine.CACHE,
                             engine.VARIABLES),
    "gpu.json": (gpu.dashboard, gpu.CLOCKS + gpu.ACTIVITY, gpu.VARIABLES),
    "infbench-run.json": (infbench_run.dashboard,
                          infbench_run.LATENCY + infbench_run.LOAD + infbench_run.CLIENT,
                          infbench_run.VARIABLES),
}


def generate() -> dict[str, str]:
    return {name: to_json(build()) for name, (build, _, _) in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dashboards.build", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare, do not write")
    args = p.parse_args(argv)
    stale = []
    for name, text in generate().items():
        path = JSON_DIR / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python -m dashboards.build): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
