"""A gate between an infbench run and another tool's imported run of the same workload.

For each tool: import its real file, export its requests as a trace (`infbench export
--format trace`), replay them with `infbench run --workload trace` against the bundled engine (the same lengths, in the same order, on the
tool's schedule where its file has one), and gate the two: the gate pairs them request by
request. The same replay with one request's output length changed is refused (exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import infbench
from tests.unit.imports.support import FIXTURES

pytestmark = pytest.mark.e2e

FILES = {
    "vllm-bench": FIXTURES / "vllm-bench" / "vllm-bench-serve.json",
    "guidellm": FIXTURES / "guidellm" / "benchmarks.json",
    "aiperf": FIXTURES / "aiperf",
    "sglang-bench": FIXTURES / "sglang-bench" / "sglang-bench-serving.jsonl",
    "inference-perf": FIXTURES / "inference-perf",
}


def _replay_trace(db: Path, run_id: str, out: Path, *, bump: int | None = None) -> None:
    """What `infbench export --format trace` writes, with a token added to request `bump`'s
    output (the same workload but for one request)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT coalesce(intended_send_ns, send_ns) / 1e9, prompt_tokens, output_tokens "
            "FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
    finally:
        con.close()
    t0 = min(r[0] for r in rows)
    with out.open("w") as f:
        for i, (t, n_in, n_out) in enumerate(rows):
            n_out += 1 if i == bump else 0
            f.write(json.dumps({"timestamp": t - t0, "input_tokens": n_in, "output_tokens": n_out}) + "\n")


def _infbench_run(tmp_path: Path, db: Path, trace: Path) -> str:
    r = infbench("run", "--workload", "trace", "--trace", str(trace), "--endpoint", "completions",
                 "--warmup", "0", "--cooldown", "0", "--db", str(db), "--quiet", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run_id = re.search(r"as run (\S+)", r.stdout + r.stderr)
    assert run_id, r.stdout[-1000:]
    return run_id.group(1)


@pytest.mark.parametrize("tool", sorted(FILES))
def test_gate_pairs_an_infbench_run_with_the_imported_run(tool: str, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("import", "--from", tool, str(FILES[tool]), "--db", str(db))
    assert r.returncode == 0, r.stderr
    imported = re.search(r"imported run (\S+)", r.stdout).group(1)  # type: ignore[union-attr]
    r = infbench("export", imported, "--db", str(db), "--format", "trace", "--out", str(tmp_path / "replay"))
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "replay" / "trace.jsonl"), r.stderr
    ours = _infbench_run(tmp_path, db, tmp_path / "replay" / "trace.jsonl")

    r = infbench("gate", "--baseline", ours, "--candidate", imported, "--db", str(db), "--json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["paired"] is True and doc["paired_requests"] == 40, doc
    r = infbench("compare", ours, imported, "--db", str(db))
    assert r.returncode == 0, r.stderr

    _replay_trace(db, imported, tmp_path / "other.jsonl", bump=5)
    other = _infbench_run(tmp_path, db, tmp_path / "other.jsonl")
    r = infbench("gate", "--baseline", other, "--candidate", imported, "--db", str(db))
    assert r.returncode == 2
    assert re.search(r"different workloads \(output tokens differ in 1 of 40 requests \(request 5: "
                     r"(\d+) -> (\d+)\)\)", r.stderr), r.stderr
