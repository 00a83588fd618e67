"""What the gate reads from a store: a request whose stream carried no text has no TTFT (NULL
in the store), never a TTFT of 0 ms. DuckDB hands NULLs back masked and a plain float
conversion reads them as 0: on a real vLLM (random weights, whose answers can be all special
tokens), two identical runs through the default gate came out inconclusive for it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from infbench.gate.samples import load_samples
from infbench.store import BatchWriter, create_run, get_run
from tests.support.stores import new_store

COLS = ("request_idx", "phase", "send_ns", "headers_ns", "first_chunk_ns", "first_content_ns",
        "last_content_ns", "last_chunk_ns", "end_ns", "status_code", "output_tokens",
        "max_tokens", "prompt_tokens", "target_input_tokens", "label")


@pytest.mark.parametrize("silent", [[3], [0, 17, 18]])
def test_a_request_without_text_has_no_ttft_not_zero(tmp_path: Path, silent: list[int]) -> None:
    con = new_store(tmp_path / "g.duckdb")
    create_run(con, run_id="a", config={}, target_url="u", model="m", endpoint="completions",
               t0_monotonic_ns=0)
    rng = np.random.default_rng(len(silent))
    rows = []
    for i in range(24):
        send = i * 50_000_000
        first = send + int(rng.uniform(20e6, 60e6))
        last = first + 30_000_000
        text = i not in silent
        rows.append((i, "measure", send, send + 1_000_000, first, first if text else None,
                     last if text else None, last, last + 1_000_000, 200, 16, 16, 100, 100,
                     "synthetic"))
    w = BatchWriter(con, "a")
    w.put("requests", {c: [r[k] for r in rows] for k, c in enumerate(COLS)})
    w.close()
    s = load_samples(con, get_run(con, "a"), "baseline")
    ttft = s.per_request["ttft"]
    assert ttft.size == 24
    assert all(math.isnan(ttft[i]) for i in silent)
    assert np.isfinite(np.delete(ttft, silent)).all() and np.nanmin(ttft) >= 20.0
    con.close()
