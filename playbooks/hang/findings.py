"""The hang playbook's findings: each names a cause, the ranks, the collective and the frames,
with the SQL behind every number."""

from __future__ import annotations

from playbooks.findings import Evidence, Finding
from playbooks.hang.load import Entry, RankInfo
from playbooks.hang.matching import ANALYZER_NAME, DTYPE, SIZE, TYPE, Mismatch
from playbooks.hang.progress import GroupProgress
from playbooks.hang.waits import Wait

KIND_WORDS = {TYPE: "a different collective", SIZE: "different sizes",
              DTYPE: "different dtypes"}

STUCK_SQL = """
SELECT rank, collective_seq_id, profiling_name, input_sizes, output_sizes, input_dtypes,
       output_dtypes, state, retired, time_created_ns, thread_id
FROM hang_fr_entries
WHERE capture_id = $capture_id AND pg_name = $pg_name AND collective_seq_id = $seq
ORDER BY rank
"""

HISTORY_SQL = """
SELECT rank, profiling_name, input_sizes, output_sizes, input_dtypes, count(*) AS times
FROM hang_fr_entries
WHERE capture_id = $capture_id AND pg_name = $pg_name AND collective_seq_id < $seq
GROUP BY ALL ORDER BY rank, times DESC
"""


def ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _pg(g_name: str, desc: str) -> str:
    return f"{g_name} ({desc})" if desc and desc != g_name else g_name


def _wait_line(r: int, waits: dict[int, Wait]) -> str:
    w = waits.get(r)
    if w is None:
        return f"Rank {r}: no stacks"
    return f"Rank {r} {w.describe()}"


def wait_evidence(waits: dict[int, Wait], ranks: list[int], sql: str) -> Evidence:
    values: dict[str, str | bool | None] = {}
    for r in ranks:
        w = waits.get(r)
        if w is None:
            values[f"rank{r}"] = None
            continue
        values[f"rank{r}_waits_in"] = w.innermost
        values[f"rank{r}_called_from"] = w.meaningful
        values[f"rank{r}_in_collective"] = w.in_collective
        values[f"rank{r}_thread"] = f"{w.thread_name} ({w.chosen_by})"
    return Evidence("where_each_rank_waits", values, sql,
                    "the thread that issues the rank's collectives (Flight Recorder's thread_id), "
                    "its innermost frame and the innermost frame outside the standard library "
                    "and torch")


def entries_evidence(name: str, entries: dict[int, Entry], sql: str) -> Evidence:
    values: dict[str, str | None] = {}
    for r, e in sorted(entries.items()):
        values[f"rank{r}"] = (f"{e.profiling_name} in {e.input_sizes} {','.join(e.input_dtypes)} "
                              f"out {e.output_sizes} {','.join(e.output_dtypes)} state {e.state}"
                              + (" retired" if e.retired else ""))
    return Evidence(name, values, sql, "one Flight Recorder entry per rank at this sequence id")


def behind_finding(g: GroupProgress, waits: dict[int, Wait], progress_sql: str,
                   stuck_sql: str, stacks_sql: str, ranks: dict[int, RankInfo]) -> Finding:
    seq = g.stuck_seq
    ref = g.stuck_entries[g.waiting[0]] if g.waiting and g.waiting[0] in g.stuck_entries else None
    what = f"#{seq}" + (f" ({ref.describe()})" if ref else "")
    wait = g.max_wait_s
    last = {r: g.ranks[r].last_enqueued for r in g.behind}
    have = "has" if len(g.waiting) == 1 else "have"
    summary = (f"On process group {_pg(g.pg_name, g.pg_desc)}, {ranks_text(g.behind)} never "
               f"entered collective {what}: "
               + ("its last is" if len(g.behind) == 1 else "the last they entered is")
               + f" #{max(last.values())}. {ranks_text(g.waiting).capitalize()} entered it and "
               + (f"{have} waited {wait:.1f} s." if wait is not None else "wait%s." % (
                   "s" if len(g.waiting) == 1 else ""))
               + "".join(f" {_wait_line(r, waits)}." for r in g.behind + g.waiting if r in waits))
    pids = [ranks[r].pid for r in g.behind if r in ranks and ranks[r].pid]
    return Finding(
        "rank_behind", f"{ranks_text(g.behind).capitalize()} is behind: collective #{seq} "
        "waits for it", 0.9 if waits else 0.8, "critical", summary,
        [Evidence("progress_per_rank", g.values(), progress_sql,
                  "last collective sequence id each rank enqueued and completed "
                  "(pg_status, else its entries); stuck = min(last completed) + 1"),
         entries_evidence("stuck_collective", g.stuck_entries, stuck_sql),
         *([wait_evidence(waits, g.behind + g.waiting, stacks_sql)] if waits else [])],
        [("Read " if any(r in waits for r in g.behind) else "Capture (py-spy) and read ")
         + f"{ranks_text(g.behind)}'s stack: why it did not reach collective #{seq} "
         "(a queue or lock it waits on, a branch only it takes that skips a collective, an "
         "exception caught on that rank, slow input on that rank).",
         ("py-spy dump --native --pid " + ",".join(map(str, pids)) if pids else
          "py-spy dump --native --pid PID of that rank")
         + " for the native frames (a CUDA synchronize, a kernel that does not finish).",
         "Restart all ranks: a collective cannot be resumed. Keep a collective timeout and "
         "Flight Recorder on (TORCH_FR_BUFFER_SIZE=2000, dump on timeout) so the next hang "
         "fails fast with these dumps."])


def mismatch_finding(m: Mismatch, g: GroupProgress | None, waits: dict[int, Wait],
                     stuck_sql: str, history_sql: str, stacks_sql: str) -> Finding:
    words = KIND_WORDS.get(m.kind, m.kind)
    ref_e = m.entries[m.reference[0]] if m.reference else None
    bad_e = m.entries[m.culprits[0]]
    ref_seen = m.seen_before.get(m.reference[0], 0) if m.reference else 0
    how = {"majority": "the other ranks agree with each other",
           "novelty": (f"{ranks_text(m.culprits)}'s call never occurred before in this group "
                       f"while the others' occurred {ref_seen} times"),
           "novelty_after_1": (f"{ranks_text(m.culprits)}'s call never followed the previous "
                               f"collective before, while the others' did {ref_seen} times"),
           "novelty_after_2": (f"{ranks_text(m.culprits)}'s call never followed the previous "
                               f"two collectives before, while the others' did {ref_seen} times"),
           "reference_rank": ("a tie: both calls are familiar, so the lowest rank is taken as "
                              "the reference, as PyTorch's analyzer does"),
           "all_ranks": "every rank made the same call, which breaks the op's own size rules"}
    stuck = g is not None and g.stuck_seq == m.seq
    summary = (f"Collective #{m.seq} on process group {_pg(m.pg_name, m.pg_desc)} does not match "
               f"across ranks: {ranks_text(m.culprits)} issued {words} "
               f"({bad_e.describe()}"
               + (f" where {ranks_text(m.reference)} issued {ref_e.describe()}" if ref_e else "")
               + f"). {ANALYZER_NAME[m.kind]}: {m.detail}. Named by {m.how_named}: "
               f"{how[m.how_named]}."
               + (" It is the collective the group is stuck on"
                  + (f" (waited {g.max_wait_s:.1f} s)." if g and g.max_wait_s is not None else ".")
                  if stuck else ""))
    involved = sorted(m.entries)
    return Finding(
        "collective_mismatch",
        f"Collective #{m.seq} mismatched: {words} on {ranks_text(m.culprits)}",
        0.9 if m.how_named == "majority" or m.how_named.startswith("novelty") else 0.6,
        "critical", summary,
        [entries_evidence("mismatched_collective", m.entries, stuck_sql),
         Evidence("culprit", {"mismatch": m.kind, "analyzer_name": ANALYZER_NAME[m.kind],
                              "culprit_ranks": ",".join(map(str, m.culprits)),
                              "reference_ranks": ",".join(map(str, m.reference)) or None,
                              "named_by": m.how_named,
                              **{f"rank{r}_signature_seen_before": n
                                 for r, n in sorted(m.seen_before.items())}},
                  history_sql, "each rank's earlier collectives in this group and how often "
                  "each call occurred; the odd call is the one that never followed the calls "
                  "before it (or never occurred)"),
         *([wait_evidence(waits, involved, stacks_sql)] if waits else [])],
        [f"Find the code path on {ranks_text(m.culprits)} that issues {bad_e.op}: the frames "
         "in its Flight Recorder entry and its stack point at the call (a shape computed from "
         "rank-local data, a branch taken on one rank, a dtype cast on one side).",
         "Every rank must issue the same collectives in the same order with the same shapes "
         "and dtypes; check the inputs that decide them (batch size, padding) come from rank 0.",
         "NCCL may hang or corrupt data on a mismatch instead of failing; gloo aborts a rank "
         "when the byte counts differ: a missing rank after a mismatch is that abort."])


def all_ranks_stuck_finding(g: GroupProgress, waits: dict[int, Wait], progress_sql: str,
                            stuck_sql: str, stacks_sql: str) -> Finding:
    ref = g.stuck_entries.get(g.waiting[0], None)
    summary = (f"Every rank of process group {_pg(g.pg_name, g.pg_desc)} entered collective "
               f"#{g.stuck_seq}" + (f" ({ref.describe()})" if ref else "")
               + f" and the calls match, but {ranks_text(g.waiting)} "
               + (f"have not completed it after {g.max_wait_s:.1f} s" if g.max_wait_s is not None
                  else "have not completed it")
               + (f" ({ranks_text(g.finished)} did)" if g.finished else "")
               + ": no rank stayed away; the collective itself does not progress (its transport, "
               "a link or a peer's device).")
    return Finding(
        "collective_stuck_all_ranks", f"All ranks inside collective #{g.stuck_seq}, none done",
        0.7, "critical", summary,
        [Evidence("progress_per_rank", g.values(), progress_sql,
                  "every member enqueued the stuck sequence id"),
         entries_evidence("stuck_collective", g.stuck_entries, stuck_sql),
         *([wait_evidence(waits, g.waiting + g.finished, stacks_sql)] if waits else [])],
        ["Measure the links: `infbench probe links` (a slow or dead link between two ranks).",
         "NCCL_DEBUG=INFO on a restart shows the transport chosen and errors; check the "
         "network or NVLink (`nvidia-smi nvlink -s`) and the GPUs (`nvidia-smi`: 100% with no "
         "progress is a kernel spinning).",
         "py-spy dump --native on each rank: native frames show where the collective waits."])


def missing_rank_finding(g: GroupProgress, ranks: dict[int, RankInfo], ranks_sql: str) -> Finding:
    gone = [r for r in g.undumped if r in ranks and ranks[r].alive is False]
    lines = []
    for r in g.undumped:
        info = ranks.get(r)
        state = ("its process is gone" if info and info.alive is False else
                 "its process is alive but wrote no dump" if info and info.alive else
                 "nothing is known of its process")
        reason = f" ({info.dump_error})" if info and info.dump_error else ""
        lines.append(f"rank {r}: {state}{reason}")
    pending = (f" The others wait at collective #{g.stuck_seq}." if g.stuck_seq is not None else "")
    return Finding(
        "rank_died" if gone else "rank_dump_missing",
        (f"{ranks_text(gone).capitalize()} died" if gone
         else f"No dump from {ranks_text(g.undumped)}"),
        0.85 if gone else 0.5, "critical" if gone or g.stuck_seq is not None else "warning",
        f"Process group {_pg(g.pg_name, g.pg_desc)} has members without a Flight Recorder dump: "
        + "; ".join(lines) + "." + pending,
        [Evidence("ranks_captured", {f"rank{r}": (f"{ranks[r].dump_status}, pid {ranks[r].pid}, "
                                                 f"alive {ranks[r].alive}") if r in ranks else None
                                     for r in g.members}, ranks_sql,
                  "what was captured of each member rank")],
        ["A dead rank: read its log and exit status (an abort, an OOM kill in `dmesg`, a "
         "gloo 'Received data size doesn't match' is a collective mismatch).",
         "A live rank without a dump: its dumping thread is blocked too; `py-spy dump --pid` it."])


def stacks_only_finding(waits: dict[int, Wait], stacks_sql: str) -> Finding | None:
    """No dumps: judge from the stacks alone (which ranks are inside a collective)."""
    inside = sorted(r for r, w in waits.items() if w.in_collective)
    outside = sorted(r for r, w in waits.items() if not w.in_collective)
    if not inside:
        return None
    if outside:
        return Finding(
            "rank_outside_collective",
            f"{ranks_text(outside).capitalize()} not in the collective the others wait in",
            0.6, "warning",
            f"{ranks_text(inside).capitalize()} wait inside a collective "
            f"({waits[inside[0]].describe()}) while {ranks_text(outside)} "
            + ("is" if len(outside) == 1 else "are") + " elsewhere: "
            + "; ".join(_wait_line(r, waits) for r in outside)
            + ". With no Flight Recorder dumps the sequence ids are unknown; a snapshot of "
            "stacks can also catch a healthy rank between collectives, so take a second one.",
            [wait_evidence(waits, inside + outside, stacks_sql)],
            ["Capture again with the dumps (`--url` of an engine with --dump-dir, or "
             "TORCH_FR_BUFFER_SIZE=2000 and a dump on timeout) to get the sequence ids.",
             f"If a second capture shows the same frames, read {ranks_text(outside)}'s stack: "
             "why it does not reach the collective."])
    return None
