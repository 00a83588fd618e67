"""Read the text nccl-tests' `*_perf` binaries print into `collectives` rows.

The table's layout changed over the years and differs between builds, so the parser sizes
itself from the column header it finds, never from a fixed position:

- newer builds: `size count type redop root` then, per half, `time algbw busbw #wrong`;
- older builds and rccl-tests: an `error` (max error, a float) where newer ones print
  `#wrong`, `root` missing (all-reduce), `redop` missing (broadcast, sendrecv), and a blank
  `redop` in alltoall rows;
- the group line above the header says which half is out-of-place and which in-place;
- either half's `#wrong`/`error` may be `N/A`.

Values are read from the right (four per half), so a number too wide for its column, which
shifts the alignment, still lands in the right field. Everything that is not the table is
skipped but used where it says something: `# nccl-tests version`, `# Collective test
starting: X`, the `nThread ... iters: N` preamble, `#  Rank r ... on HOST device d [bus] NAME`
lines (the rank count), any mention of `X_perf` (a command line) naming the op, mpirun's
`[1,0]<stdout>:` prefixes, and the `# Avg bus bandwidth` footer (checked against the rows).
NCCL's own log lines between header and rows are skipped. A line that starts like a row (a
size) but does not fit the header is an error naming the file and line: nothing is stored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from probes.links.busbw import bus_factor, canonical_op, ranks_from_ratio
from probes.links.errors import LinkProbeError
from probes.links.storage import StoredProbe, save_probe

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_OP_MENTION = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv|reduce|gather|"
                         r"scatter|hypercube)_perf\b")
_VERSION = re.compile(r"^nccl-tests version\s+(\S+)\s*(.*)$")
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)")
_RANK = re.compile(r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)$")
_SETTINGS = {k: re.compile(p) for k, p in {
    "nThread": r"nThread\s+(\d+)", "nGpus": r"nGpus\s+(\d+)", "minBytes": r"minBytes\s+(\d+)",
    "maxBytes": r"maxBytes\s+(\d+)", "warmup_iters": r"warmup iters:\s*(\d+)",
    "iters": r"(?<!warmup )(?<!agg )iters:\s*(\d+)", "agg_iters": r"agg iters:\s*(\d+)",
    "validation": r"validation:\s*(\d+)", "graph": r"graph:\s*(\d+)", "unalign": r"unalign:\s*(\d+)"}.items()}
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)\s*(\S+)")
_LEFT = ("size", "count", "type", "redop", "root")
_WRONG = ("#wrong", "error")
_TIME = ("time", "cputime")
_INT = re.compile(r"^\d+$")


@dataclass
class Parsed:
    op: str | None
    rows: list[dict[str, Any]]
    ranks: int | None
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Header:
    left: list[str]
    halves: list[tuple[bool, str]]  # (in_place, name of the wrong/error column) per half
    line: int


def _op_from_name(path: Path) -> str | None:
    m = _OP_MENTION.search(path.name) or re.search(
        r"(all_reduce|allreduce|all_gather|allgather|reduce_scatter|reducescatter|alltoall|broadcast|sendrecv)",
        path.name.lower())
    return canonical_op(m.group(1)) if m else None


def _float(tok: str, where: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    try:
        v = float(tok)
    except ValueError:
        raise LinkProbeError(f"{where}: {tok!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise LinkProbeError(f"{where}: {tok!r} is not a time or bandwidth")
    return v


def _header(tokens: list[str], order: list[bool], lineno: int, where: str) -> _Header:
    first = next((i for i, t in enumerate(tokens) if t in _TIME), None)
    if first is None or tokens[0] != "size":
        raise LinkProbeError(f"{where}: a column header without size and time columns")
    left = tokens[:first]
    unknown = [t for t in left if t not in _LEFT]
    if unknown or left[:2] != ["size", "count"]:
        raise LinkProbeError(f"{where}: unknown column(s) {' '.join(unknown or left)!r} in the header")
    rest = tokens[first:]
    if len(rest) not in (4, 8) or any(rest[i] not in _TIME or rest[i + 1:i + 3] != ["algbw", "busbw"]
                                      or rest[i + 3] not in _WRONG for i in range(0, len(rest), 4)):
        raise LinkProbeError(f"{where}: the header's halves are not 'time algbw busbw #wrong|error'")
    n = len(rest) // 4
    places = order if len(order) == n else [False, True][:n]  # nccl-tests prints out-of-place first
    return _Header(left, [(places[h], rest[4 * h + 3]) for h in range(n)], lineno)


def _row(toks: list[str], h: _Header, op: str, seen: dict[tuple[str, int], int], where: str) -> list[dict[str, Any]]:
    k = 4 * len(h.halves)
    left, right = toks[:-k], toks[-k:]
    cols = list(h.left)
    if len(left) == len(cols) - 1 and "redop" in cols:
        cols.remove("redop")  # old alltoall rows leave redop blank
    if len(toks) <= k or len(left) != len(cols):
        raise LinkProbeError(f"{where}: {len(toks)} fields do not fit the header's columns "
                             f"({' '.join(h.left)} + {len(h.halves)} x time algbw busbw {h.halves[0][1]})")
    vals = dict(zip(cols, left, strict=True))
    if not _INT.match(vals["size"]) or not _INT.match(vals["count"]):
        raise LinkProbeError(f"{where}: size {vals['size']!r} and count {vals['count']!r} must be whole numbers")
    root = vals.get("root")
    if root is not None and not re.match(r"^-?\d+$", root):
        raise LinkProbeError(f"{where}: root {root!r} is not a rank")
    key = (op, int(vals["size"]))
    rep = seen.get(key, 0)  # a size printed again (nccl-tests -N, size-0 rows): its next repeat
    seen[key] = rep + 1
    out = []
    for i, (in_place, wcol) in enumerate(h.halves):
        t, alg, bus, w = right[4 * i: 4 * i + 4]
        time_us = _float(t, where)
        if time_us is None:
            raise LinkProbeError(f"{where}: time {t!r} is not a number")
        wv = None if w.upper() == "N/A" else w
        if wcol == "#wrong" and wv is not None and not _INT.match(wv):
            raise LinkProbeError(f"{where}: #wrong {w!r} is not a count")
        out.append({"phase": "import", "op": op, "bytes": int(vals["size"]), "count": int(vals["count"]),
                    "dtype": vals.get("type"), "redop": vals.get("redop"), "root": int(root) if root else None,
                    "in_place": in_place, "repeat": rep, "time_us": time_us, "algbw_gbps": _float(alg, where),
                    "busbw_gbps": _float(bus, where), "wrong": int(wv) if wcol == "#wrong" and wv else None,
                    "error": _float(wv, where) if wcol == "error" and wv else None})
    return out


def parse_nccl_tests(text: str, path: Path, op: str | None = None) -> Parsed:
    """Parse one nccl-tests output; LinkProbeError (one line, naming the line) if it is not one."""
    cur = canonical_op(op) if op else None
    if op and cur is None:
        raise LinkProbeError(f"--op {op!r} is not an nccl-tests collective")
    forced = cur is not None
    cur = cur or _op_from_name(path)
    p = Parsed(None, [], None)
    ranks: dict[int, str] = {}
    header: _Header | None = None
    order: list[bool] = []
    avg: float | None = None
    skipped = 0
    ops_seen: list[str] = []
    seen: dict[tuple[str, int], int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{lineno}"
        s = _MPI_TAG.sub("", raw).strip()
        if not s:
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if m := _VERSION.match(body):
                p.settings["nccl_tests_version"] = m.group(1)
                p.settings["libraries"] = m.group(2)
            elif m := _STARTING.match(body):
                if not forced and canonical_op(m.group(1)):
                    cur = canonical_op(m.group(1))
            elif body.startswith("nThread"):
                p.settings.update({k: int(m.group(1)) for k, rx in _SETTINGS.items() if (m := rx.search(body))})
            elif m := _RANK.match(body):
                ranks[int(m.group(1))] = f"{m.group(2)} device {m.group(3)} {m.group(5).strip()}"
            elif "out-of-place" in body or "in-place" in body:
                order = [not tok.startswith("out") for tok in re.findall(r"out-of-place|in-place", body)]
            elif body.startswith("size"):
                header = _header(body.split(), order, lineno, where)
            elif m := _AVG.match(body):
                avg = float(m.group(1))
            elif m := _OOB.match(body):
                p.notes.append(f"out of bounds values: {m.group(1)} {m.group(2)}")
            continue
        toks = s.split()
        if _INT.match(toks[0]):
            if header is None:
                raise LinkProbeError(f"{where}: a table row before any nccl-tests column header")
            if cur is None:
                raise LinkProbeError(f"{path}: cannot tell which nccl-tests binary wrote it (no "
                                     "'Collective test starting', no X_perf command line, no op in the file "
                                     "name): pass --op")
            p.rows += _row(toks, header, cur, seen, where)
            if cur not in ops_seen:
                ops_seen.append(cur)
            continue
        if (m := _OP_MENTION.search(s)) and not forced:
            cur = canonical_op(m.group(1))
        skipped += 1
    if not p.rows:
        raise LinkProbeError(f"{path}: no nccl-tests result table (a '# size count ...' header followed by rows)")
    p.op = ops_seen[0] if len(ops_seen) == 1 else ",".join(ops_seen)
    p.ranks = len(ranks) or None
    if ranks:
        p.settings["rank_devices"] = {str(r): d for r, d in sorted(ranks.items())}
        p.settings["hosts"] = sorted({d.split()[0] for d in ranks.values()})
    if p.ranks is None:
        guesses = {ranks_from_ratio(r["op"], r["algbw_gbps"] or 0, r["busbw_gbps"] or 0) for r in p.rows} - {None}
        if len(guesses) == 1:
            p.ranks = guesses.pop()
            p.notes.append(f"no rank lines: {p.ranks} ranks from busbw/algbw and nccl-tests' factor")
        else:
            p.notes.append("no rank lines and busbw/algbw does not say how many ranks: ranks unknown")
    for r in p.rows:
        r["ranks"] = p.ranks
    _check(p, avg)
    if skipped:
        p.notes.append(f"{skipped} line(s) outside the table skipped (commands, NCCL log lines)")
    return p


def _check(p: Parsed, avg: float | None) -> None:
    """Notes where the file disagrees with nccl-tests' own definitions (it is still stored as
    printed): busbw vs algbw x factor, and the footer's average against the rows."""
    if p.ranks:
        off = [r for r in p.rows if (r["algbw_gbps"] or 0) >= 1 and r["busbw_gbps"] is not None
               and abs(r["busbw_gbps"] - r["algbw_gbps"] * bus_factor(r["op"], p.ranks)) > 0.02 * r["busbw_gbps"] + 0.01]
        if off:
            p.notes.append(f"{len(off)} row(s) whose busbw is not algbw x nccl-tests' factor for {p.ranks} ranks "
                           f"(first: size {off[0]['bytes']})")
    if avg is not None:
        bus = [r["busbw_gbps"] for r in p.rows if r["busbw_gbps"] is not None]
        mean = sum(bus) / len(bus)
        p.settings["avg_bus_bandwidth"] = avg
        if abs(mean - avg) > 0.01 * avg + 0.01:
            p.notes.append(f"footer's Avg bus bandwidth {avg:g} differs from the rows' mean {mean:.4g}")


def import_nccl_tests(con: duckdb.DuckDBPyConnection, path: str | Path, op: str | None = None,
                      run: str | None = None) -> tuple[StoredProbe, Parsed]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except FileNotFoundError:
        raise LinkProbeError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise LinkProbeError(f"{path}: not text (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise LinkProbeError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    parsed = parse_nccl_tests(text, path, op)
    stored = save_probe(con, source="nccl-tests", rows=parsed.rows,
                        config={"op": parsed.op, **parsed.settings}, backend="nccl", world_size=parsed.ranks,
                        notes=parsed.notes, path=str(path), run=run,
                        hostname=",".join(parsed.settings.get("hosts", [])) or None)
    return stored, parsed
