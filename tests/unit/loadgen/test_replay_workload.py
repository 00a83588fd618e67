"""The replay workload (`diagnose dilution`'s re-runs): rows sent as given, a shared prefix as
the start of one document (the first row carrying it), labels saying what an earlier row sent,
schemas and arrival offsets passed through, bad rows refused."""

from __future__ import annotations

import pytest

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.replay import Replay, ReplayRow, repeated_prefix
from infbench.loadgen.workloads.synthetic import SCHEMAS


def _specs(rows, tokens=TokenModel(per_word=1.0, overhead=2.0), schemas=None):
    wl = Replay(tuple(rows), tokens, schemas)
    return [next(s) for s in wl.sessions(Streams(4, 99))]


@pytest.mark.parametrize("shared, size", [(300, 700), (96, 128)])
def test_shared_rows_start_with_the_same_words_and_the_first_row_carries_them(shared: int, size: int) -> None:
    rows = [ReplayRow(size, 8, 0), ReplayRow(size, 8, 0), ReplayRow(size, 9, shared), ReplayRow(size, 3, shared)]
    specs = _specs(rows)
    words = [s.prompt.split() for s in specs]
    body = shared - 2  # the overhead (BOS, template) is in every prompt anyway
    assert words[0][:body] == words[2][:body] == words[3][:body]
    assert words[1][:5] != words[0][:5]  # an unshared row is fresh text
    assert [s.label for s in specs] == ["unshared", "unshared", f"prefix-{shared}", f"prefix-{shared}"]
    assert [len(w) for w in words] == [size - 2] * 4  # one token per word: sized to the row
    assert [s.max_tokens for s in specs] == [8, 8, 9, 3]
    assert [repeated_prefix(s.label) for s in specs] == [0, 0, shared, shared]


def test_schemas_and_arrival_offsets_pass_through() -> None:
    custom = {"schema-001": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    specs = _specs([ReplayRow(40, 4, 0, "schema-001", 0.0), ReplayRow(40, 4, 20, "person", 1.5),
                    ReplayRow(40, 4, 0, None, 2.25)], schemas=custom)
    assert [s.at for s in specs] == [0.0, 1.5, 2.25]
    assert specs[0].extra["response_format"]["json_schema"]["schema"] == custom["schema-001"]
    assert specs[1].extra["response_format"]["json_schema"]["schema"] == SCHEMAS["person"]
    assert specs[2].extra is None
    assert specs[1].label == "prefix-20:person" and repeated_prefix(specs[1].label) == 20


def test_bad_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="input and output tokens"):
        ReplayRow(0, 5)
    with pytest.raises(ValueError, match="shared tokens"):
        ReplayRow(10, 5, -1)
    with pytest.raises(ValueError, match="no rows"):
        Replay((), TokenModel())
