"""The workload sent is the workload asked, end to end: prompts of the target length as the
server counts them (exact against the reference engine, which has /tokenize; within 2% on
average against the mock without it), conversations that run all their turns past the end
of --duration with each turn's recorded length equal to the server's count, and workload
files checked before anything is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.engine_process import MODEL, EngineProcess
from tests.support.cli import infbench
from tests.support.process import sse_server
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with sse_server("--ttft-ms", "2", "--itl-ms", "1") as url:
        yield url


@pytest.fixture(scope="module")
def slow_mock() -> Iterator[str]:
    """Turns of some 0.3 s, so conversations outlast a short --duration."""
    with sse_server("--ttft-ms", "5", "--itl-ms", "5", "--tokenize") as url:
        yield url


def _run(url: str, db: Path, *args: str, code: int = 0) -> dict[str, Any]:
    r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", *args, timeout=180)
    assert r.returncode == code, r.stderr
    return json.loads(r.stdout)


def _last(db: Path) -> tuple[str, dict[str, Any]]:
    run_id, config = store_rows(db, "SELECT run_id, config FROM runs ORDER BY created_at DESC, run_id DESC LIMIT 1")[0]
    return run_id, json.loads(config)


def _lengths(db: Path, run_id: str) -> list[tuple[int, int]]:
    return store_rows(db, "SELECT target_input_tokens, prompt_tokens FROM requests "
                     f"WHERE run_id = '{run_id}' AND error_class IS NULL ORDER BY request_idx")


def test_engine_tokenize_counts_what_the_completion_counts(engine: EngineProcess) -> None:
    msgs = [{"role": "user", "content": "three short words"}, {"role": "assistant", "content": "ok é"},
            {"role": "user", "content": "again"}]
    for path, body, tok in (("/v1/completions", {"prompt": "some text é"}, {"prompt": "some text é"}),
                            ("/v1/chat/completions", {"messages": msgs}, {"messages": msgs})):
        _, _, done = engine.post_json(path, {"model": MODEL, "max_tokens": 1, **body})
        status, _, counted = engine.post_json("/tokenize", {"model": MODEL, **tok})
        assert status == 200 and counted["count"] == done["usage"]["prompt_tokens"] == len(counted["tokens"])
        assert counted["max_model_len"] == 4096
    status, _, err = engine.post_json("/tokenize", {"model": "nope", "prompt": "x"})
    # vLLM's answer to a model it does not serve, on /tokenize as on the completions: a 404
    assert status == 404 and err["error"]["param"] == "model" and "does not exist" in err["error"]["message"]
    status, _, err = engine.post_json("/tokenize", {"model": MODEL, "messages": [{"role": "x", "content": "y"}]})
    assert status == 400 and err["error"]["param"] == "messages[0].role"


@pytest.mark.parametrize(("endpoint", "workload", "lengths"), [
    ("completions", "synthetic", "512"),
    ("completions", "synthetic", "lognormal:300:0.8"),
    ("chat", "synthetic", "uniform:120:3000"),
    ("chat", "structured", "200"),
    ("completions", "prefix", "uniform:16:700"),
])
def test_every_prompt_is_exact_against_the_engine(engine: EngineProcess, tmp_path: Path, endpoint: str,
                                                  workload: str, lengths: str) -> None:
    db = tmp_path / "e.duckdb"
    s = _run(engine.url, db, "--endpoint", endpoint, "--workload", workload, "--input-tokens", lengths,
             "--arrival", "closed", "--concurrency", "4", "--num-requests", "24", "--output-tokens", "2",
             "--prefix-tokens", "300")
    run_id, config = _last(db)
    assert config["token_model"]["source"] == "tokenize" and config["token_model"]["exact"] is True
    got = _lengths(db, run_id)
    assert len(got) == 24 and all(t == n for t, n in got), got
    il = s["input_length"]
    assert (il["exact"], il["requests"], il["mean_error_pct"], il["sized_by"]) == (24, 24, 0.0, "tokenize")
    assert s["input_sizing"]["counted"] == 0  # an exact model needs no per-request count
    assert not [w for w in s["warnings"] if "prompts averaged" in w]


@pytest.mark.parametrize(("endpoint", "lengths"), [("completions", "128"), ("completions", "uniform:50:2000"),
                                                   ("chat", "lognormal:700:0.5")])
def test_without_tokenize_the_mean_is_within_two_percent(mock: str, tmp_path: Path, endpoint: str,
                                                          lengths: str) -> None:
    db = tmp_path / "m.duckdb"
    s = _run(mock, db, "--endpoint", endpoint, "--input-tokens", lengths, "--arrival", "closed",
             "--concurrency", "4", "--num-requests", "40", "--output-tokens", "2")
    run_id, config = _last(db)
    assert config["token_model"]["source"] == "measured" and config["token_model"]["corrections"]
    got = _lengths(db, run_id)
    mean_t, mean_n = (sum(x) / len(got) for x in zip(*got, strict=True))
    assert abs(mean_n / mean_t - 1) <= 0.02
    assert s["input_length"]["mean_error_pct"] == pytest.approx(100 * (mean_n / mean_t - 1))
    assert max(abs(t - n) for t, n in got) <= max(3, 0.01 * max(t for t, _ in got))


@pytest.mark.parametrize(("endpoint", "lengths"), [("completions", "uniform:40:3000"), ("chat", "900")])
def test_a_server_that_counts_but_not_per_word_gets_exact_prompts(slow_mock: str, tmp_path: Path, endpoint: str,
                                                                 lengths: str) -> None:
    """The mock with --tokenize counts a quarter token per byte, rounded down: no word model
    predicts it exactly, so each prompt is counted and adjusted until it lands."""
    db = tmp_path / "k.duckdb"
    s = _run(slow_mock, db, "--endpoint", endpoint, "--input-tokens", lengths, "--arrival", "closed",
             "--concurrency", "4", "--num-requests", "20", "--output-tokens", "2")
    run_id, config = _last(db)
    assert config["token_model"]["source"] == "tokenize" and not config["token_model"]["exact"]
    assert all(t == n for t, n in _lengths(db, run_id))
    assert s["input_sizing"]["off_target"] == 0 and 20 <= s["input_sizing"]["counted"] <= 80


def test_the_summary_says_asked_and_counted(mock: str, tmp_path: Path) -> None:
    r = infbench("run", "--url", mock, "--db", str(tmp_path / "t.duckdb"), "--arrival", "closed",
                 "--num-requests", "8", "--input-tokens", "300", "--output-tokens", "2", COLUMNS="200")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "Input tokens asked / counted" in ln)
    assert "300.0 /" in line


def _conversations(db: Path, run_id: str) -> dict[int, list[tuple[int, int, int, int]]]:
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for conv, turn, target, counted, send in store_rows(
            db, "SELECT conversation_id, turn, target_input_tokens, prompt_tokens, send_ns FROM requests "
                f"WHERE run_id = '{run_id}' ORDER BY conversation_id, turn"):
        out.setdefault(conv, []).append((turn, target, counted, send))
    return out


@pytest.mark.parametrize(("endpoint", "turns", "arrival"), [
    ("chat", 3, ("--arrival", "poisson", "--rate", "6")),
    ("chat", 5, ("--arrival", "closed", "--concurrency", "3")),
    ("completions", 4, ("--arrival", "constant", "--rate", "5")),
])
def test_conversations_run_all_their_turns_with_the_counted_length(engine: EngineProcess, tmp_path: Path,
                                                                   endpoint: str, turns: int,
                                                                   arrival: tuple[str, ...]) -> None:
    db = tmp_path / "c.duckdb"
    # Shorter than one conversation (3-5 turns of 60-160 tokens): whatever the engine's speed,
    # conversations found running at the end must send turns after it.
    duration = 1.2
    s = _run(engine.url, db, "--workload", "multiturn", "--endpoint", endpoint, "--turns", str(turns),
             "--duration", str(duration), "--input-tokens", "uniform:40:200", "--output-tokens", "uniform:60:160",
             *arrival)
    run_id, config = _last(db)
    convs = _conversations(db, run_id)
    assert len(convs) >= 3
    for conv, rows in convs.items():
        assert [r[0] for r in rows] == list(range(turns)), (conv, rows)
        assert all(t == n for _, t, n, _ in rows), (conv, rows)
    # Turns went on after the end: the stop did not cut the conversations it found running.
    assert max(r[3] for rows in convs.values() for r in rows) > duration * 1e9
    assert s["input_length"]["exact"] == s["input_length"]["requests"] == s["completed"] == len(convs) * turns
    template = config["token_model"]["template"]
    first_turns = [rows[0][1] for rows in convs.values()]
    assert min(first_turns) >= 40 + template["first"]  # the template is counted in the target


def test_a_request_count_commits_whole_conversations(slow_mock: str, tmp_path: Path) -> None:
    db = tmp_path / "n.duckdb"
    s = _run(slow_mock, db, "--workload", "multiturn", "--turns", "3", "--endpoint", "chat", "--arrival", "closed",
             "--concurrency", "4", "--num-requests", "7", "--input-tokens", "30", "--output-tokens", "20")
    run_id, _ = _last(db)
    convs = _conversations(db, run_id)
    # 7 asked: a third conversation begins (6 < 7) and runs its three turns; no fourth.
    assert len(convs) == 3 and all(len(rows) == 3 for rows in convs.values())
    assert s["completed"] == 9
    assert all(t == n for rows in convs.values() for _, t, n, _ in rows)


def test_conversations_outlast_the_duration_on_a_slow_server(slow_mock: str, tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    _run(slow_mock, db, "--workload", "multiturn", "--turns", "4", "--endpoint", "chat", "--arrival", "poisson",
         "--rate", "5", "--duration", "1.5", "--input-tokens", "uniform:20:90", "--output-tokens", "60")
    run_id, _ = _last(db)
    convs = _conversations(db, run_id)
    assert len(convs) >= 3 and all(len(rows) == 4 for rows in convs.values())
    assert max(r[3] for rows in convs.values() for r in rows) > 2.0e9  # well past the end


@pytest.mark.parametrize(("name", "content", "msg"), [
    ("neg.csv", "timestamp,input_tokens,output_tokens\n0,-50,5\n", "neg.csv row 1: input_tokens is -50"),
    ("empty.csv", "", "empty.csv has no rows"),
    ("header.csv", "timestamp,input_tokens,output_tokens\n", "has a header but no rows"),
    ("cols.csv", "timestamp,output_tokens\n0,4\n", "cols.csv row 1: no input-token column"),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 1}\n',
     "bad.jsonl row 2: no input-token column"),
])
def test_unsendable_traces_exit_2_with_one_line_and_store_nothing(mock: str, tmp_path: Path, name: str,
                                                                   content: str, msg: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    db = tmp_path / "never.duckdb"
    r = infbench("run", "--url", mock, "--db", str(db), "--workload", "trace", "--trace", str(path))
    assert r.returncode == 2 and msg in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not db.exists()


def test_changed_rows_are_warned_before_the_run_and_in_its_summary(mock: str, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 300, "input_length": 0, "output_length": 2, "hash_ids": []},
        {"timestamp": 100, "input_length": 700, "output_length": 0, "hash_ids": [1, 3, 4]},
        {"timestamp": 200, "input_length": 900, "output_length": 3, "hash_ids": [1, 5]}]))
    db = tmp_path / "w.duckdb"
    r = infbench("run", "--url", mock, "--db", str(db), "--json", "--workload", "trace", "--trace", str(path))
    assert r.returncode == 0, r.stderr
    before = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: trace: t.jsonl")]
    assert len(before) == 4  # out of order, no input, no output, hash_ids disagreement
    s = json.loads(r.stdout)
    assert all(w.removeprefix("warning: ") in s["warnings"] for w in before)
    rows = s["workload_rows"]
    assert (rows["rows_read"], rows["rows_used"], rows["first_row_used"], rows["last_row_used"]) == (4, 3, 1, 4)
    run_id, config = _last(db)
    assert config["workload"]["rows"] == rows and config["workload_warnings"] == [w for w in s["warnings"]
                                                                                if w.startswith("trace:")]
    sent = store_rows(db, f"SELECT intended_send_ns, max_tokens, target_input_tokens FROM requests "
                     f"WHERE run_id = '{run_id}' ORDER BY request_idx")
    assert [(round(t / 1e6), m, n) for t, m, n in sent] == [(0, 2, 600), (100, 1, 700), (200, 3, 900)]


def test_skipped_sharegpt_records_are_counted(mock: str, tmp_path: Path) -> None:
    ok = [{"from": "human", "value": "a question here"}, {"from": "gpt", "value": "an answer of words"}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": ok}, {"conversations": ok[:1]},
                                {"conversations": [{"from": "system", "value": "sys"}, *ok]},
                                {"conversations": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}]))
    s = _run(mock, tmp_path / "s.duckdb", "--workload", "sharegpt", "--dataset", str(path), "--arrival", "closed",
             "--num-requests", "6")
    assert s["completed"] == 6 and s["workload_rows"]["records_used"] == 3
    assert any("1 of 4 records have a single turn" in w for w in s["warnings"])
    assert any("1 of 4 records begin with a system turn" in w for w in s["warnings"])
