"""The structured workload's generated schemas: K of them, their sizes, new vs stable."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from infbench.loadgen.preflight import Target
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads import Structured, TokenModel
from infbench.loadgen.workloads.build import build_workload
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.schemas import SchemaMix
from reference_engine.json_grammar import compile_schema

L = LengthDist.parse
BPE = TokenModel(1.0, 1.0, "measured")


def sent(wl: Structured, streams: Streams, n: int) -> list[tuple[str, str]]:
    out = []
    for sess in islice(wl.sessions(streams), n):
        spec = next(sess)
        schema = spec.extra["response_format"]["json_schema"]["schema"]
        out.append((spec.label, json.dumps(schema)))
    return out


@pytest.mark.parametrize(("count", "fields"), [(7, "9"), (13, "uniform:3:50")])
def test_k_schemas_of_the_asked_sizes_each_sent_under_its_label(count: int, fields: str) -> None:
    mix = SchemaMix(count, L(fields, "f"))
    wl = Structured(L("60", "i"), L("9", "o"), BPE, mix=mix)
    reqs = sent(wl, Streams(3, 11), 40 * count)
    assert len({label for label, _ in reqs}) == count
    by_label = {label: text for label, text in reqs}
    assert len(set(by_label.values())) == count  # each label one text within the run
    sizes = [len(json.loads(t)["properties"]) for _, t in sorted(by_label.items())]
    if fields.isdigit():
        assert sizes == [int(fields)] * count
    else:
        assert min(sizes) >= 3 and max(sizes) <= 50 and len(set(sizes)) > 3
    for text in by_label.values():
        compile_schema(json.loads(text))  # the bundled engine's grammar takes every one
    listed = wl.describe()["schemas"]["schemas"]
    assert [s["fields"] for s in listed] == sizes


@pytest.mark.parametrize(("count", "share"), [(10, 0.3), (8, 1.0), (5, 0.0)])
def test_new_schemas_differ_between_runs_and_stable_ones_repeat(count: int, share: float) -> None:
    mix = SchemaMix(count, L("6", "f"), share)
    wl = Structured(L("60", "i"), L("9", "o"), BPE, mix=mix)
    run_a = dict(sent(wl, Streams(3, 101), 30 * count))
    run_b = dict(sent(wl, Streams(3, 202), 30 * count))
    changed = sorted(label for label in run_a if run_a[label] != run_b[label])
    assert len(changed) == round(count * share) == mix.num_new
    assert changed == sorted(s["label"] for s in mix.describe()["schemas"] if s["new"])
    # the description, which the gate compares between runs, does not carry the salt
    assert mix.describe() == SchemaMix(count, L("6", "f"), share).describe()


def test_bad_mixes_and_schemas_on_another_workload_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="schemas: must be >= 1"):
        SchemaMix(0, L("4", "f"))
    with pytest.raises(ValueError, match="new_schemas"):
        SchemaMix(3, L("4", "f"), 1.5)
    target = Target(url="http://127.0.0.1:1", model="m", models=["m"], tokens=BPE,
                    ignore_eos_supported=True, metrics_url=None, steps_url=None)
    with pytest.raises(ValueError, match="--schemas is for --workload structured"):
        build_workload("synthetic", input_len=L("60", "i"), output_len=None, target=target,
                       prefix_groups=1, prefix_tokens=8, turns=1, dataset=None, trace=None,
                       time_scale=1.0, trace_start=0.0, trace_end=None,
                       schemas=SchemaMix(3, L("4", "f")))
