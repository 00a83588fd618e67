"""The GPU probes' names for the strict exposition-format reader, which `infbench.promtext`
owns: `parse_exposition(text)` -> `Sample(name, labels, value, raw)` per sample line, and
`ExpositionError("line N: ...")` on the first line that is not valid."""

from __future__ import annotations

from infbench.promtext import ExpositionError, Sample
from infbench.promtext import parse_strict as parse_exposition

__all__ = ["ExpositionError", "Sample", "parse_exposition"]
