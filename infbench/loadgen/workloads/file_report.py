"""What a workload file gave: rows read and used, and what was skipped, sorted or adjusted.

Reading a trace or a dataset is checked before the run starts. What cannot be sent at all is
an error (one line naming the file, the row and the field); what can be sent after a
documented change, or left out, is counted here and reported as one warning per kind, with the
first row it happened to, before the run and again in its summary; the stored config says
which rows were used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileReport:
    path: str
    unit: str = "row"  # what the file's entries are called in messages: row | record
    read: int = 0
    used: int = 0
    first_used: int | None = None  # file row numbers of the first and last entries sent
    last_used: int | None = None
    # kind -> (count, first row, what was done): one warning each
    _events: dict[str, list[Any]] = field(default_factory=dict)

    def note(self, kind: str, row: int, what: str) -> None:
        """Count one entry that was skipped or changed; `what` says what and why (its first
        occurrence's wording is kept)."""
        ev = self._events.get(kind)
        if ev is None:
            self._events[kind] = [1, row, what]
        else:
            ev[0] += 1

    def count(self, kind: str) -> int:
        ev = self._events.get(kind)
        return int(ev[0]) if ev else 0

    def mark_used(self, row: int) -> None:
        self.used += 1
        self.first_used = row if self.first_used is None else min(self.first_used, row)
        self.last_used = row if self.last_used is None else max(self.last_used, row)

    def warnings(self) -> list[str]:
        out = []
        for _kind, (n, row, what) in self._events.items():
            of = f"{n} of {self.read} {self.unit}s" if self.read else f"{n} {self.unit}s"
            out.append(f"{self.path}: {of} {what} (first: {self.unit} {row})")
        return out

    def describe(self) -> dict[str, Any]:
        return {"file": self.path, f"{self.unit}s_read": self.read, f"{self.unit}s_used": self.used,
                f"first_{self.unit}_used": self.first_used, f"last_{self.unit}_used": self.last_used,
                "changes": {k: int(v[0]) for k, v in self._events.items()}}
