"""Generated JSON schemas for the structured workload: `--schemas K`, their sizes, and how
many are new to the run.

An engine compiles each schema it has not seen (vLLM: xgrammar, cached by the schema's text),
so what a structured workload measures depends on which schemas the engine has met before:

- `count` distinct schemas, each request picking one uniformly (its label is the schema's,
  `schema-007`), so every schema's first request in the run meets whatever compile it
  needs and its later ones the cache;
- `fields`: properties per schema (a length distribution: `12`, or `uniform:4:60` for a mix
  of sizes), drawn per schema from a stream of its own index, so schema i is the same in
  every run of the same options;
- `new_share`: the share of the K schemas that are new to this run. Their text carries the
  run's salt (in `title`), so no engine has compiled them, whatever ran before; the others
  are the same text in every run, so an engine that served an earlier run, or was pre-warmed
  with them, has them cached. 1.0 (the default) makes every schema cold on its first use.

`describe()` lists each schema's label, field count, bytes and whether it is new: the run's
config keeps it, and `infbench diagnose structured` reads it to relate compile stalls to
schema size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from infbench.loadgen.workloads.lengths import LengthDist

# Property types the bundled engine's grammar (and every JSON-schema backend) takes.
_TYPES: tuple[dict[str, Any], ...] = (
    {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"},
    {"type": "array", "items": {"type": "string"}},
    {"type": "object", "properties": {"code": {"type": "string"}, "n": {"type": "integer"}}},
)
_WORDS = ("account", "amount", "city", "code", "count", "country", "date", "email", "id",
          "item", "kind", "label", "name", "note", "owner", "price", "rank", "region",
          "score", "status", "tag", "title", "total", "unit", "user", "value", "weight", "zone")
SALT_HEX = 16  # hex digits of the run's salt in a new schema's title: same length every run


@dataclass(frozen=True)
class SchemaMix:
    count: int
    fields: LengthDist
    new_share: float = 1.0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"schemas: must be >= 1, got {self.count}")
        if not 0.0 <= self.new_share <= 1.0:
            raise ValueError(f"new_schemas: must be a share in [0, 1], got {self.new_share:g}")

    @property
    def num_new(self) -> int:
        return round(self.count * self.new_share)

    def is_new(self, i: int) -> bool:
        # The new ones are spread over the indices, not the first few, so a uniform pick
        # meets both kinds from the start.
        return self.num_new > 0 and (i * self.num_new) % self.count < self.num_new

    def field_counts(self) -> list[int]:
        return [max(1, int(self.fields.sample(np.random.default_rng([0x5C4E, i]))[0]))
                for i in range(self.count)]

    def schemas(self, salt: int | None) -> list[tuple[str, dict[str, Any]]]:
        """(label, schema) for each of the K schemas; `salt` marks the new ones."""
        out = []
        for i, n in enumerate(self.field_counts()):
            label = f"schema-{i:03d}"
            title = label
            if self.is_new(i):
                title += f" run-{(salt or 0) & ((1 << 4 * SALT_HEX) - 1):0{SALT_HEX}x}"
            props = {f"{_WORDS[(i + j) % len(_WORDS)]}_{j}": _TYPES[(i + j) % len(_TYPES)]
                     for j in range(n)}
            out.append((label, {"title": title, "type": "object", "properties": props,
                                "required": sorted(props)}))
        return out

    def describe(self) -> dict[str, Any]:
        listed = [{"label": label, "fields": len(s["properties"]),
                   "bytes": len(json.dumps(s).encode()), "new": self.is_new(i)}
                  for i, (label, s) in enumerate(self.schemas(0))]
        return {"count": self.count, "fields": str(self.fields), "new_share": self.new_share,
                "schemas": listed}
