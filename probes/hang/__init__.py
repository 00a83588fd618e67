"""Hang capture: every rank's Flight Recorder dump and Python stacks, into the store.

`capture_url(URL)`, `capture_pids([PID, ...])` and `capture_dumps(DIR)` return a `Capture`;
`write_capture(con, capture)` stores it in the hang tables (`docs/store.md`), which
`playbooks.hang` reads. Dumps are unpickled by `frdump.parse_dump`, which refuses any pickle
that asks to run code.
"""

from probes.hang.capture import capture, capture_dumps, capture_pids, capture_url, parse_pids
from probes.hang.errors import CaptureError, DumpRefused
from probes.hang.frdump import FrDump, FrEntry, parse_dump, read_dump
from probes.hang.model import Capture, RankCapture
from probes.hang.writer import store_capture, write_capture

__all__ = ["Capture", "CaptureError", "DumpRefused", "FrDump", "FrEntry", "RankCapture",
           "capture", "capture_dumps", "capture_pids", "capture_url", "parse_dump",
           "parse_pids", "read_dump", "store_capture", "write_capture"]
