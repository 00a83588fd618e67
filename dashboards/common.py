"""What every dashboard here shares: the Prometheus datasource variable, template variables,
and a panel described as data (`Spec`), built with grafana-foundation-sdk's builders.

A `Spec` is what the tests read: every target expression of every panel is run against a
real Prometheus after the template variables are substituted (`tests/e2e/test_dashboards.py`),
so an expression that names a metric nobody exports fails there, not in a user's Grafana.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as md

DATASOURCE = md.DataSourceRef(type_val="prometheus", uid="${datasource}")
# The variables a panel's expressions may use besides Grafana's own ($__rate_interval, ...).
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Spec:
    """One panel: what it shows (targets), how (unit, kind), and what to do about it."""

    title: str
    description: str  # what a bad value means, and which `infbench diagnose` to run
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat
    mappings: dict[str, str] = field(default_factory=dict)  # stat: value -> text

    def __post_init__(self) -> None:
        if "infbench" not in self.description:
            raise ValueError(f"panel {self.title!r}: the description must name an infbench step")


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # Grafana's label_values(SELECTOR, LABEL) form


def quantile_targets(bucket: str, selector: str, qs: tuple[float, ...], who: str,
                     fallback: str | None = None) -> tuple[Target, ...]:
    """histogram_quantile over `bucket` (a `_bucket` series) for each q; with `fallback`, the
    older name a server exposes instead (vLLM's renames), used only where the new one is absent."""
    def expr(q: float) -> str:
        rates = f"rate({bucket}{{{selector}}}[{RATE}])"
        if fallback:
            # `or` per series, before summing: a server with only the old name still counts
            # beside servers with the new one, and one exposing both is not counted twice.
            rates = f"{rates} or rate({fallback}{{{selector}}}[{RATE}])"
        return f"histogram_quantile({q:g}, sum by (le) ({rates}))"
    return tuple(Target(expr(q), f"{who} p{round(q * 100):d}") for q in qs)


def _variable(v: Variable) -> gd.QueryVariable:
    return (gd.QueryVariable(v.name).label(v.label).query(v.query).datasource(DATASOURCE)
            .multi(True).include_all(True).all_value(".*")
            .refresh(md.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(md.VariableSort.ALPHABETICAL_ASC))


def _panel(spec: Spec) -> gts.Panel | gstat.Panel:
    panel = (gstat.Panel() if spec.kind == "stat" else gts.Panel().fill_opacity(10))
    panel = panel.title(spec.title).description(spec.description).datasource(DATASOURCE) \
        .unit(spec.unit).span(12).height(8)
    if spec.mappings:
        panel = panel.mappings([md.ValueMap(options={k: md.ValueMappingResult(text=t, index=i)
                                                     for i, (k, t) in enumerate(spec.mappings.items())})])
    for i, t in enumerate(spec.targets):
        panel = panel.with_target(gp.Dataquery().expr(t.expr).legend_format(t.legend)
                                  .ref_id(chr(ord("A") + i)).datasource(DATASOURCE))
    return panel


def build(uid: str, title: str, description: str, tags: list[str], variables: list[Variable],
          rows: list[tuple[str, list[Spec]]]) -> md.Dashboard:
    dash = (gd.Dashboard(title).uid(uid).description(description).tags(tags)
            .refresh("10s").time("now-30m", "now").timezone("browser").editable()
            .tooltip(md.DashboardCursorSync.CROSSHAIR)
            .with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus")))
    for v in variables:
        dash = dash.with_variable(_variable(v))
    ids = iter(range(1, 1000))  # unique panel ids: Grafana links and edits panels by id
    for row_title, specs in rows:
        dash = dash.with_row(gd.Row(row_title).id(next(ids)))
        for spec in specs:
            dash = dash.with_panel(_panel(spec).id(next(ids)))
    return dash.build()


def to_json(dash: md.Dashboard) -> str:
    """The committed form: sorted keys, two-space indent, one trailing newline."""
    return json.dumps(dash, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
