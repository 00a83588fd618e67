"""dashboards/: the committed JSON is what the code generates, and it is a Grafana dashboard.

Validation is by grafana-foundation-sdk's typed model (Grafana 11.6's dashboard schema, from
which the SDK is generated): the JSON must load into `Dashboard` and encode back unchanged,
so nothing in it is unknown to the schema or of the wrong shape. On top: what Grafana needs
to render and what we promise (unique panel ids, a grid that fits 24 columns, every
expression's variables defined, a description on every panel naming the infbench step).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards.build import DASHBOARDS, JSON_DIR, generate, main

BUILTINS = {"__rate_interval", "__interval", "__range", "__name__"}
VAR = re.compile(r"\$(?:\{)?([A-Za-z_][A-Za-z0-9_]*)")


def _docs() -> dict[str, dict[str, Any]]:
    return {name: json.loads((JSON_DIR / name).read_text()) for name in DASHBOARDS}


def check(doc: dict[str, Any]) -> None:
    """Raise AssertionError naming what is wrong with a dashboard document."""
    typed = Dashboard.from_json(doc)
    assert json.loads(json.dumps(typed, cls=JSONEncoder)) == doc, "not Grafana's dashboard schema"
    assert doc.get("uid") and doc.get("title") and isinstance(doc.get("schemaVersion"), int)
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids), ids
    for p in doc["panels"]:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy") and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "stat"), p["type"]
        assert "infbench" in p.get("description", ""), f"{p['title']}: no next step"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            used = set(VAR.findall(t["expr"])) - BUILTINS
            assert used <= variables, (p["title"], used - variables)
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            assert set(VAR.findall(v["query"])) - BUILTINS <= variables, v["name"]


def test_committed_json_is_what_the_code_generates() -> None:
    generated = generate()
    assert sorted(generated) == sorted(p.name for p in JSON_DIR.glob("*.json"))
    for name, text in generated.items():
        assert (JSON_DIR / name).read_text() == text, f"{name}: run python -m dashboards.build"
    assert generate() == generated  # and generating is reproducible
    assert main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_each_dashboard_is_valid(name: str) -> None:
    check(_docs()[name])


def test_templates_have_model_and_instance() -> None:
    for name, doc in _docs().items():
        names = {v["name"] for v in doc["templating"]["list"]}
        assert {"model", "instance"} <= names, name


@pytest.mark.parametrize("mutate", [
    lambda d: d["panels"][1].update(id=d["panels"][2]["id"]),                   # duplicate id
    lambda d: d["panels"][1].update(description="latency"),                     # no next step
    lambda d: d["panels"][1]["targets"][0].update(expr="rate(x{a=~\"$nope\"}[5m])"),  # undefined var
    lambda d: d["panels"][1]["gridPos"].update(x=20),                           # off the grid
    lambda d: d["panels"][1].update(gridPos="wide"),                            # wrong shape
])
def test_the_checks_catch_a_broken_dashboard(mutate) -> None:  # type: ignore[no-untyped-def]
    doc = copy.deepcopy(_docs()["engine-overview.json"])
    mutate(doc)
    with pytest.raises((AssertionError, TypeError, KeyError, AttributeError)):
        check(doc)


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dashboards.build as b
    for name, text in generate().items():
        (tmp_path / name).write_text(text)
    (tmp_path / "gpu.json").write_text("{}\n")
    monkeypatch.setattr(b, "JSON_DIR", tmp_path)
    assert b.main(["--check"]) == 1
    assert b.main([]) == 0 and b.main(["--check"]) == 0
