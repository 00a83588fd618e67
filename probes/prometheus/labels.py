"""Labels as `metric_samples.labels` holds them: `k="v",...` with the text format's escapes.

Prometheus pulls are written sorted by key; the run's own `/metrics` scrapes keep the order the
target printed. The format is `infbench.promtext`'s; these are the names this package uses.
`parse_labels` is strict: text it cannot read raises `ExpositionError` (a ValueError).
"""

from __future__ import annotations

from infbench.promtext import escape, format_labels, parse_labels

__all__ = ["escape", "format_labels", "parse_labels"]
