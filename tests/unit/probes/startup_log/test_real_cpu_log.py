"""Issue 24: a real vLLM 0.32.0 CPU server's log read as the server that started, its copies
cut at many lines, and its lines in wordings and prefixes the patterns never saw: readiness
counts, and what was not recognised is said from the line it starts at, never guessed into
"the log ends early"."""

from __future__ import annotations

import pytest

from probes.startup_log import parse_startup_log, representative
from tests.unit.probes.startup_log.real_cpu_log import (
    API_SERVER_LINE,
    CONFIG_LINE,
    FIRST_REQUEST,
    KV_BYTES_LINE,
    KV_REWORDED,
    KV_TOKENS_LINE,
    STARTUP_COMPLETE,
    WEIGHTS_LAST,
    cut,
    join,
    readiness_reworded,
    real_lines,
    reworded,
)

GIB = 1 << 30


def _not_recognised(log) -> list[str]:  # noqa: ANN001
    return [n for n in log.notes if "not recognised from line" in n]


def test_the_real_cpu_log_started_with_its_pool_as_evidence() -> None:
    log = parse_startup_log(join(real_lines()), "cpu.log")
    assert (log.outcome, log.failure_kind, log.engine, log.version) == ("started", None, "vllm", "0.32.0")
    assert log.ready_line == API_SERVER_LINE and log.settings["device"] == "cpu"
    f = representative(log)
    assert f["kv_tokens"] == 524288
    assert f["available_kv_bytes"] == pytest.approx(1.0 * GIB)
    assert f["node_memory_bytes"] == pytest.approx(11.09 * GIB)
    assert (f["max_concurrency_tokens"], f["max_concurrency"]) == (4096, 128.0)
    assert f["kv_space_explicit"] == 1.0
    # The figures sit on the lines `grep -n` shows (the banner's and tqdm's "\r" split no line).
    at = {e.key: e.line_no for e in log.events}
    assert (at["available_kv_bytes"], at["kv_tokens"]) == (KV_BYTES_LINE, KV_TOKENS_LINE)
    assert "CPU KV cache size: 524,288 tokens" in real_lines()[at["kv_tokens"] - 1]
    assert at["ready"] == STARTUP_COMPLETE and at["serving"] == FIRST_REQUEST
    assert not _not_recognised(log) and log.not_recognised_from is None
    # One row per readiness kind, not one per route listed.
    assert sum(e.key == "routes_listed" for e in log.events) == 1


@pytest.mark.parametrize(("n", "outcome", "from_line"), [
    (30, "incomplete", CONFIG_LINE + 1),        # EngineCore's OpenMP lines follow the config line
    (WEIGHTS_LAST, "incomplete", None),          # cut right on the weights line
    (50, "incomplete", WEIGHTS_LAST + 1),
    (52, "incomplete", WEIGHTS_LAST + 1),
    (KV_BYTES_LINE, "incomplete", None),         # the pool's bytes, not yet its tokens
    (KV_TOKENS_LINE, "incomplete", None),
    (58, "incomplete", KV_TOKENS_LINE + 1),
    (API_SERVER_LINE - 1, "incomplete", KV_TOKENS_LINE + 1),
    (API_SERVER_LINE, "started", None),
    (66, "started", None),
    (STARTUP_COMPLETE - 1, "started", None),
    (STARTUP_COMPLETE, "started", None),
    (150, "started", None),
])
def test_a_copy_cut_at_line_n(n: int, outcome: str, from_line: int | None) -> None:
    log = parse_startup_log(cut(n), "cut.log")
    assert log.outcome == outcome and log.failure_kind is None
    assert log.not_recognised_from == from_line
    sized = "kv_tokens" in representative(log) or "available_kv_bytes" in representative(log)
    assert sized == (n >= KV_BYTES_LINE)
    if outcome == "incomplete":
        (note,) = [x for x in log.notes if x.startswith("the log ends")]
        if sized:
            assert "after the KV pool was sized, before the server said it was ready" in note
        elif from_line is None:
            assert note == f"the log ends in the weights phase (line {n}) before the KV pool was sized"
        if from_line is not None:
            assert f"not recognised from line {from_line} to its end (line {n})" in note
    else:
        assert log.ready_line == API_SERVER_LINE and not _not_recognised(log)


def test_cut_after_the_kv_lines_is_not_started() -> None:
    # The pool was sized, but the API server's own lines are in the log and it never said it
    # was ready: warm-up or the server could still have failed.
    log = parse_startup_log(cut(60), "cut.log")
    assert log.server_front_end and log.outcome == "incomplete"
    assert representative(log)["kv_tokens"] == 524288


def test_kv_lines_in_a_new_wording_on_a_server_that_started() -> None:
    log = parse_startup_log(join(reworded(KV_REWORDED)), "new.log")
    assert log.outcome == "started" and log.ready_line == API_SERVER_LINE
    assert log.not_recognised_from == WEIGHTS_LAST + 1
    (note,) = _not_recognised(log)
    assert note.startswith(f"not recognised from line {WEIGHTS_LAST + 1}: the server was ready "
                           f"(line {API_SERVER_LINE}) but no KV pool line was recognised after "
                           f"the weights phase (line {WEIGHTS_LAST})")
    assert not any(k in representative(log) for k in ("kv_tokens", "available_kv_bytes"))


def test_only_the_token_line_reworded_still_sizes_the_pool_from_its_bytes() -> None:
    log = parse_startup_log(join(reworded({KV_TOKENS_LINE: KV_REWORDED[KV_TOKENS_LINE]})))
    assert log.outcome == "started" and not _not_recognised(log)
    assert representative(log)["available_kv_bytes"] == pytest.approx(GIB)


@pytest.mark.parametrize("n", [48, 55, 60, API_SERVER_LINE - 1])
def test_kv_lines_in_a_new_wording_in_a_copy_cut_before_readiness(n: int) -> None:
    log = parse_startup_log(cut(n, reworded(KV_REWORDED)), "new.log")
    assert log.outcome == "incomplete" and log.not_recognised_from == WEIGHTS_LAST + 1
    (note,) = _not_recognised(log)
    assert "before the KV pool was sized" not in note
    assert f"not recognised from line {WEIGHTS_LAST + 1} to its end (line {n})" in note


def test_readiness_in_a_new_wording() -> None:
    lines = readiness_reworded()
    served = parse_startup_log(join(lines), "new.log")
    # The requests it answered say it was up.
    assert served.outcome == "started" and served.ready_line == FIRST_REQUEST
    assert not _not_recognised(served)
    for n in (STARTUP_COMPLETE, 90):
        log = parse_startup_log(cut(n, lines), "new.log")
        assert log.outcome == "incomplete" and log.not_recognised_from == KV_TOKENS_LINE + 1
        assert (f"not recognised from line {KV_TOKENS_LINE + 1} to its end (line {n}): a "
                "readiness line in a wording never seen would be there") in log.notes[0]


@pytest.mark.parametrize("stamp", ["vllm-cpu-1  | ", "2025-12-02T00:26:41.123456789Z stderr F ",
                                   "[pod/vllm-0/vllm] "])
def test_a_stamp_in_front_of_every_line_reads_the_same(stamp: str) -> None:
    plain = parse_startup_log(join(real_lines()))
    log = parse_startup_log(join([stamp + ln for ln in real_lines()]))
    assert (log.outcome, log.ready_line, log.settings, log.ranks) == (
        plain.outcome, plain.ready_line, plain.settings, plain.ranks)
    assert [(e.line_no, e.rank, e.key, e.value) for e in log.events] == [
        (e.line_no, e.rank, e.key, e.value) for e in plain.events]
    # ... and cut before readiness it is incomplete from the same line.
    assert parse_startup_log(cut(60, [stamp + ln for ln in real_lines()])).not_recognised_from == 55


def test_an_error_after_readiness_is_not_a_start_up_failure() -> None:
    lines = real_lines()
    oom = ("(APIServer pid=6489) ERROR 12-02 00:27:30 [serving.py:1] torch.OutOfMemoryError: "
           "CUDA out of memory. Tried to allocate 2.00 GiB")
    after = parse_startup_log(join([*lines[:110], oom, *lines[110:]]))
    assert (after.outcome, after.failure_kind) == ("started", None)
    assert any("line 111 (oom) came after the server was ready (line 63)" in n for n in after.notes)
    before = parse_startup_log(join([*lines[:50], oom, *lines[50:]]))
    assert (before.outcome, before.failure_kind, before.failure_line) == ("failed", "oom", 51)


def test_sglang_readiness_counts() -> None:
    head = "[2025-11-30 12:50:10] KV Cache is allocated. #tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB\n"
    ready = ("[2025-11-30 12:50:31] INFO:     Started server process [99]\n"
             "[2025-11-30 12:50:40] The server is fired up and ready to roll!\n")
    log = parse_startup_log(head + ready)
    assert (log.engine, log.outcome, log.ready_line) == ("sglang", "started", 2)
    new = parse_startup_log("[2025-11-30 12:50:10] KV pool ready: 2243474 tokens\n" + ready)
    assert new.outcome == "started" and new.not_recognised_from == 1


def test_readiness_alone_is_no_start_up_log() -> None:
    from probes.startup_log import StartupLogError
    with pytest.raises(StartupLogError, match="no start-up memory lines"):
        parse_startup_log("INFO:     Started server process [1]\nINFO:     Application startup complete.\n")


def test_auto_sized_cpu_pool_and_the_older_gpu_wording_on_cpu() -> None:
    text = ("(Worker pid=19850) INFO 06-13 20:03:57 [cpu_worker.py:235] Auto set (1.48/18.0) GiB for "
            "KV cache on node 0, with 5.4 GiB requested memory for the worker. 3.92 GiB memory was "
            "consumed by non-kv usages.\n"
            "(EngineCore pid=19838) INFO 06-13 20:03:57 [kv_cache_utils.py:1879] GPU KV cache size: "
            "29,056 tokens, Maximum concurrency for 2,048 tokens per request: 14.19x\n")
    log = parse_startup_log(text)
    f = representative(log)
    assert log.outcome == "started" and log.settings["device"] == "cpu"
    assert f["available_kv_bytes"] == pytest.approx(1.48 * GIB) and f["kv_space_explicit"] == 0.0
    assert f["non_kv_bytes"] == pytest.approx(3.92 * GIB)
    assert (f["kv_tokens"], f["max_concurrency"]) == (29056, 14.19)


def test_not_recognised_from_the_first_logger_line_not_a_progress_bar() -> None:
    # The weights line in a new wording, with a progress bar right after the checkpoint line:
    # recognition stopped at line 41; the bar (42-44) and the blank line are no logger's
    # output, so the reader is sent to line 46.
    lines = reworded({WEIGHTS_LAST: "Weights in place after 0.05 s"})
    lines[41] = "Loading safetensors checkpoint shards:  50% Completed | 0/1 [00:00<?, ?it/s]"
    log = parse_startup_log(cut(50, lines))
    assert log.outcome == "incomplete" and log.not_recognised_from == WEIGHTS_LAST
    assert "in the weights phase as far as it was recognised (line 41)" in log.notes[0]
