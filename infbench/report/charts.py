"""Interactive charts for the self-contained HTML reports (run report, sweep report).

A chart here is data and labels (`Chart`); `page_head()` inlines the code that draws them and
`render()` places them in the page with their data as JSON. The drawing is done in the browser
by uPlot (MIT, vendored in `assets/` with its licence: `uPlot.iife.min.js`, v1.6.32 from the
npm registry) and `assets/charts.js`, our ~200 lines of options on top of it.

Why uPlot, written down: a report is one file that opens with no network (CI artefacts,
incident tickets, air-gapped clusters), so whatever draws it travels inside every page.
Readers of peer tools' reports expect hover values, zoom and series toggles, which static SVG
cannot give without our own JS for each. uPlot gives all three, a second y axis, log scales,
bar/step/point paths and a legend outside the plot in 51 KB minified; Plotly's bundle
(shipped by the `plotly` pip package) gives more chart kinds for ~3.5-4.6 MB in every report,
70x the page itself; hand-written SVG is zero bytes of library but static. A run report is
~0.15-0.5 MB with its data (sizes measured in docs/reports.md).

Rules the charts keep: every axis has a unit and one unit only (series of another unit go on
the second axis or their own chart, never a 0-1 fraction beside counts), tick labels read
1,500 or 15k (never 1e+03), legends sit below the plot, marks (percentiles, knee, goodput
maximum) are dashed lines whose labels sit in a strip above the plot, and charts take the
width of their grid cell, which follows the window.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
STYLES = ("line", "step", "bars", "points")

CSS = (".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(560px,100%),1fr));gap:18px 24px}"
       ".chart{margin:0;min-width:0}.chart.wide{grid-column:1/-1}"
       ".chart figcaption{font-weight:bold;font-size:14px;margin-bottom:2px}"
       ".chart .note{font-size:12px;color:#555;margin:0 0 4px}.chart .plot{width:100%}"
       ".chart .empty{font-size:12px;color:#777;padding:12px 0}"
       ".uplot{width:100%;font-family:sans-serif}.u-legend{font-size:12px}"
       ".u-legend .u-series > *{padding:1px 4px}.charts-help{font-size:12px;color:#555}")


@dataclass(frozen=True)
class Axis:
    label: str
    unit: str
    log: bool = False  # x axis only: a base-2 log scale (concurrency 1, 2, 4, ...)
    min: float | None = None
    max: float | None = None
    zero: bool = True  # y axis: its range includes 0


@dataclass(frozen=True)
class Series:
    name: str
    x: np.ndarray
    y: np.ndarray
    axis: int = 0  # 0: the left y axis, 1: the right one
    style: str = "line"
    markers: bool = False  # dots at the points of a line (few points, e.g. a sweep)


@dataclass(frozen=True)
class Mark:
    x: float
    label: str
    color: str = COLORS[1]


@dataclass
class Chart:
    title: str
    x: Axis
    y: list[Axis]
    series: list[Series] = field(default_factory=list)
    note: str = ""
    marks: list[Mark] = field(default_factory=list)
    wide: bool = False
    x_range: tuple[float, float] | None = None
    empty: str = ""  # why there is nothing to draw
    point_names: list[str] | None = None  # one per x (all series share it), shown on hover

    def __post_init__(self) -> None:
        if not 1 <= len(self.y) <= 2:
            raise ValueError(f"{self.title}: a chart has one or two y axes, not {len(self.y)}")
        for s in self.series:
            if s.style not in STYLES or not 0 <= s.axis < len(self.y):
                raise ValueError(f"{self.title}: series {s.name!r} has style {s.style!r}, axis {s.axis}")

    def spec(self, chart_id: str) -> dict[str, object]:
        series = [s for s in self.series if len(s.x)]
        out: dict[str, object] = {"id": chart_id, "title": self.title}
        if not series:
            return out
        xs, ys = _align(series)
        names = None
        if self.point_names is not None:
            first = np.asarray(series[0].x, float)
            if len(self.point_names) != len(first) or not all(np.array_equal(s.x, first) for s in series):
                raise ValueError(f"{self.title}: point names need one shared x, one name per point")
            names = [self.point_names[i] for i in np.argsort(first, kind="stable")]  # as _align sorts
        # An axis whose series all had no data goes; the other one then stands on the left.
        used = sorted({s.axis for s in series})
        out.update({
            "x": {**_axis(self.x), "range": list(self.x_range) if self.x_range else None, "names": names},
            "y": [_axis(self.y[a]) for a in used],
            "series": [{"name": s.name, "axis": used.index(s.axis), "style": s.style, "markers": s.markers,
                        "color": COLORS[i % len(COLORS)]} for i, s in enumerate(series)],
            "data": [_numbers(xs), *(_numbers(y) for y in ys)],
            "marks": [{"x": m.x, "label": m.label, "color": m.color} for m in self.marks
                      if m.x is not None and math.isfinite(m.x)],
        })
        return out


def _axis(a: Axis) -> dict[str, object]:
    return {"label": a.label, "unit": a.unit, "log": a.log, "min": a.min, "max": a.max, "zero": a.zero}


def _align(series: Sequence[Series]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One x array for all series (uPlot's data layout), NaN where a series has no value."""
    first = np.asarray(series[0].x, float)
    if all(len(s.x) == len(first) and np.array_equal(np.asarray(s.x, float), first) for s in series):
        order = np.argsort(first, kind="stable")
        return first[order], [np.asarray(s.y, float)[order] for s in series]
    xs = np.unique(np.concatenate([np.asarray(s.x, float) for s in series]))
    ys = []
    for s in series:
        col = np.full(xs.size, np.nan)
        col[np.searchsorted(xs, np.asarray(s.x, float))] = np.asarray(s.y, float)
        ys.append(col)
    return xs, ys


def _numbers(a: np.ndarray) -> list[float | None]:
    """Six significant digits (what a chart can show), None for gaps."""
    return [float(f"{v:.6g}") if math.isfinite(v) else None for v in np.asarray(a, float).tolist()]


def peaks(x: np.ndarray, y: np.ndarray, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """At most n points: the highest of each of n equal slices, so spikes (stalls) survive."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) <= n:
        return x, y
    edges = np.linspace(0, len(x), n + 1).astype(int)
    keep = [a + int(np.nanargmax(y[a:b])) if np.isfinite(y[a:b]).any() else a
            for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return x[keep], y[keep]


def human(v: float) -> str:
    """A value for a label, as the charts' ticks write it: 0.012, 12.3, 1,234, 12.3k."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1e-3 or a == 0:
        return f"{v:.3g}"
    return f"{v:.6f}".rstrip("0")


def histogram(values: np.ndarray, title: str, x: Axis, count: str, bins: int | None = None,
              marks: dict[str, float | None] | None = None) -> Chart:
    """Counts of `count` (requests, tokens) per bin; the top 0.1% share the last bin. Bins:
    twice the square root of the count, 10 to 60."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    chart = Chart(title, x, [Axis(count, count)])
    if values.size == 0:
        chart.empty = "no data"
        return chart
    bins = bins or int(np.clip(2 * math.sqrt(values.size), 10, 60))
    lo, hi = float(values.min()), float(values.max())
    top = float(np.quantile(values, 0.999)) if values.size > 100 else hi
    if top <= lo:
        top = lo + 1.0
    counts, edges = np.histogram(np.clip(values, lo, top), bins=bins, range=(lo, top))
    chart.series = [Series(count, (edges[:-1] + edges[1:]) / 2, counts.astype(float), style="bars")]
    chart.x_range = (float(edges[0]), float(edges[-1]))
    if hi > top:
        chart.note = (f"The last bar also counts the {int((values > top).sum()):,} values above p99.9 "
                      f"({human(top)} {x.unit}, max {human(hi)} {x.unit}).")
    chart.marks = [Mark(v, f"{k} {human(v)} {x.unit}", COLORS[1 + i]) for i, (k, v) in enumerate((marks or {}).items())
                   if v is not None]
    return chart


@cache
def _asset(name: str) -> str:
    return resources.files("infbench.report").joinpath("assets", name).read_text(encoding="utf-8")


def page_head() -> str:
    """Styles and scripts for a page's <head>: uPlot and the chart code, inlined."""
    return (f"<style>{_asset('uPlot.min.css')}{CSS}</style>"
            f"<script>{_asset('uPlot.iife.min.js')}</script><script>{_asset('charts.js')}</script>")


HELP = ("<p class='charts-help'>Hover a plot for its values; drag across it to zoom, double-click to "
        "zoom out; click a legend entry to hide or show that series.</p>"
        "<noscript><p>The plots need JavaScript, which this page carries inline.</p></noscript>")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")


def render(charts: Sequence[Chart], prefix: str = "chart") -> str:
    """The charts' figures, their data and the call that draws them."""
    figures, specs = [], []
    for i, c in enumerate(charts):
        cid = f"{prefix}-{i}"
        spec = c.spec(cid)
        note = f"<p class='note'>{_escape(c.note)}</p>" if c.note else ""
        body = (f"<div class='plot' id='{cid}'></div>" if "data" in spec else
                f"<div class='empty'>{_escape(c.empty or 'no data')}</div>")
        figures.append(f"<figure class='chart{' wide' if c.wide else ''}'><figcaption>{_escape(c.title)}"
                       f"</figcaption>{note}{body}</figure>")
        if "data" in spec:
            specs.append(spec)
    # No "<" at all inside the script element, so no text can end it or open a comment there.
    data = json.dumps(specs, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    return (f"{HELP}<div class='charts'>{''.join(figures)}</div>"
            f"<script type='application/json' id='{prefix}-data'>{data}</script>"
            f"<script>infbenchCharts.renderAll(document.getElementById('{prefix}-data'))</script>")
