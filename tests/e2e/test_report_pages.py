"""The HTML reports of real runs, opened in headless Chromium (Debian's `chromium`) at 1400 and
900 px wide: no text overlaps other text or a plot's data, nothing is clipped, nothing is
loaded from anywhere, the charts fill their width, and hover, zoom and legend toggles work.

Made here: a run of the bundled engine with a periodic stall injected (`infbench run`, diagnosed
so the Diagnosis section has a stall finding and its SQL; its simulated GPU's dcgm-exporter series add the four GPU charts), an auto sweep that saturates (`infbench sweep --mode auto`, knee and goodput maximum
marked) and the same sweep's first two points analysed alone (not saturated: no knee).
Screenshots of the three pages at 1400 px are written to $INFBENCH_SCREENSHOTS when it is set
(docs/reports.md), else into the test's temporary folder.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infbench.report.charts import Axis, Chart, Series, histogram, page_head, render
from infbench.store import open_store
from infbench.sweep.analysis import analyse
from infbench.sweep.html import sweep_html
from infbench.sweep.store import get_sweep
from tests.e2e.page_check import CHROMIUM, _chromium, check_page, screenshot
from tests.support.cli import infbench

pytestmark = pytest.mark.e2e


def test_chromium_is_installed() -> None:
    # Not a skip: the README's test command and .ci/run install it, and a page check that
    # silently did not run would pass a broken report.
    assert CHROMIUM is not None, "needs Debian's chromium: apt-get install -y chromium"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pages")
    db, sdb = d / "run.duckdb", d / "sweep.duckdb"
    # A periodic stall injected, so the Diagnosis section always holds a finding whose evidence
    # carries multi-line SQL (collapsed in <details>; the check opens it). A host pause found
    # on a quiet-looking run once put it there unplanned and it widened the page at 900 px.
    r = infbench("run", "--db", str(db), "--duration", "5", "--arrival", "poisson", "--rate", "6",
                 "--output-tokens", "uniform:64:160",
                 "--engine-arg=--fault=periodic-stall:every_s=1.3,duration_ms=150", timeout=180)
    assert r.returncode == 0, r.stderr
    r = infbench("diagnose", "stalls", "last", "--db", str(db), "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert any("stall" in f["verdict"] for f in json.loads(r.stdout)["findings"]), r.stdout[-2000:]
    r = infbench("report", "last", "--db", str(db), "--html", str(d / "run.html"))
    assert r.returncode == 0, r.stderr
    r = infbench("sweep", "--db", str(sdb), "--mode", "auto", "--num-rates", "1", "--duration", "2",
                 "--input-tokens", "256", "--output-tokens", "24", "--engine-arg=--max-num-seqs=4",
                 "--slo", "ttft=200ms", "--html", str(d / "sweep.html"), timeout=240)
    assert r.returncode == 0, r.stderr
    con = open_store(sdb, read_only=True)
    try:
        sw = get_sweep(con, "last")
        first_two = [p for p in sw.points if p[2] == "concurrency"][:2]
        result = analyse(con, first_two, sw.config.get("slo_ms") or {}, sw.config.get("engine"))
    finally:
        con.close()
    assert result["knee"] is None and not result["saturation"]["reached"], result["saturation"]
    (d / "sweep_not_saturated.html").write_text(sweep_html(sw.sweep_id + " (first two points)", result))
    return {name: d / f"{name}.html" for name in ("run", "sweep", "sweep_not_saturated")}


def _assert_clean(found: dict[str, Any], charts: int) -> None:
    assert found["errors"] == []
    assert found["charts"] == charts and found["canvas_texts"] >= 8 * charts
    assert found["overlaps"] == [], found["overlaps"]
    assert found["over_data"] == [] and found["clipped"] == [], (found["over_data"], found["clipped"])
    assert found["resources"] == [], "a report loads nothing"
    assert found["scroll_width"] <= found["inner_width"], "no sideways scrolling"
    # Each chart is as wide as its grid cell, and the cells fill the window.
    assert all(abs(cell - plot) <= 1 for cell, plot in found["widths"])
    left, right = found["extent"]
    assert left < 40 and right > found["inner_width"] - 40, found["extent"]
    ticks = " ".join(found["ticks"])
    assert "e+" not in ticks and "e-" not in ticks and "NaN" not in ticks


@pytest.mark.parametrize(("name", "charts"), [("run", 15), ("sweep", 7), ("sweep_not_saturated", 6)])
def test_pages_at_1400_and_900_px_have_no_overlapping_text(pages: dict[str, Path], name: str,
                                                           charts: int, tmp_path: Path) -> None:
    page = pages[name]
    wide = check_page(page, 1400)
    _assert_clean(wide, charts)
    assert sum(1 for cell, _ in wide["widths"] if cell > 600) == len(wide["widths"]), "two columns of 600+ px"
    narrow = check_page(page, 900)
    _assert_clean(narrow, charts)
    out = Path(os.environ.get("INFBENCH_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    png = screenshot(page, out / f"{name}.png", 1400, int(wide["height"]) + 20)
    assert png.stat().st_size > 50_000
    if os.environ.get("INFBENCH_SCREENSHOTS"):
        shutil.copy(page, out / page.name)


def test_sweep_pages_mark_the_knee_and_the_goodput_maximum_or_say_there_is_no_knee(
        pages: dict[str, Path]) -> None:
    found = check_page(pages["sweep"])
    labels = " ".join(found["ticks"])
    assert "knee (c=" in labels and "goodput max (" in labels
    assert {"1", "2", "4", "8"} <= set(found["ticks"]), "concurrency on a log axis ticks at powers of 2"
    text = pages["sweep_not_saturated"].read_text()
    found = check_page(pages["sweep_not_saturated"])
    assert "knee (" not in " ".join(found["ticks"])
    assert "No knee: not saturated. Throughput still rose" in text


def test_charts_answer_hover_zoom_and_legend_clicks(pages: dict[str, Path]) -> None:
    for name in ("run", "sweep"):
        found = check_page(pages[name], interact=True)
        assert len(found["interact"]) == found["charts"]
        for chart in found["interact"]:
            assert chart["values"][0] != "-" and any(v != "-" for v in chart["values"][1:]), chart
            if name == "sweep" and "tokens/s" in chart["values"][0]:
                assert " · c=" in chart["values"][0] or " req/s" in chart["values"][0], chart  # the load
            lo, hi = chart["before"]
            zlo, zhi = chart["zoomed"]
            assert lo < zlo < zhi < hi and zhi - zlo < 0.5 * (hi - lo), chart
            assert chart["reset"] == chart["before"] and chart["hidden"] and chart["shown_again"], chart


def test_tick_labels_read_as_numbers(tmp_path: Path) -> None:
    probe = tmp_path / "ticks.html"
    probe.write_text(
        f"<!doctype html><html><head>{page_head()}</head><body><pre id='out'></pre><script>"
        "const t = infbenchCharts.ticks, f = infbenchCharts.fmt;"
        "document.getElementById('out').textContent = JSON.stringify(["
        "t([0, 500, 1000, 1500], 500), t([0, 5000, 10000, 15000], 5000), t([0, 0.25, 0.5], 0.25),"
        "t([2e6, 4e6], 2e6), t([-1500, 0, 1500], 1500), [f(1234.5), f(15300), f(0.000123), f(7), f(null)]])"
        "</script></body></html>")
    dom = _chromium(["--dump-dom", probe.as_uri()])
    got = json.loads(html.unescape(re.search(r"<pre id=\"out\">(.*?)</pre>", dom, re.S).group(1)))
    assert got == [["0", "500", "1,000", "1,500"], ["0", "5k", "10k", "15k"], ["0", "0.25", "0.50"],
                   ["2M", "4M"], ["-1,500", "0", "1,500"], ["1,235", "15.3k", "0.000123", "7", "-"]]


@pytest.mark.parametrize("at", [0.004, 0.03, 0.5, 0.97, 0.999])
def test_mark_labels_stay_in_their_strip_wherever_the_mark_sits(tmp_path: Path, at: float) -> None:
    # A p50 near the plot's left edge (an ITL histogram stretched by one 157 ms stall) once
    # drew its label right-aligned, over the y axis's top tick label ("1,500"): the label's
    # alignment was whatever uPlot's last axis left in the canvas context.
    rng = np.random.default_rng(int(at * 1000))
    # 1,439 in the tallest bin: the y axis tops out at its 1,500 tick, level with the strip.
    values = np.concatenate([rng.normal(7.0, 0.1, 1439), rng.uniform(12.0, 150.0, 60), [160.0]])
    lo, hi = float(values.min()), float(values.max())
    v = lo + at * (hi - lo)
    chart = histogram(values, "marks at the edges", Axis("ITL", "ms"), "tokens",
                      marks={"p50": v, "p99": min(hi, v + 0.01 * (hi - lo))})
    page = tmp_path / "marks.html"
    page.write_text(f"<!doctype html><html><head>{page_head()}</head><body>{render([chart])}</body></html>")
    for width in (1400, 900):
        found = check_page(page, width)
        assert found["overlaps"] == [] and found["over_data"] == [] and found["clipped"] == [], found


def test_the_check_sees_overlapping_clipped_and_loaded(tmp_path: Path) -> None:
    """The layout check is not blind: text over text, a caption pushed over its plot, an axis
    title longer than the plot and an image fetched from the network are all reported."""
    x = np.arange(10.0)
    chart = Chart("pushed down", Axis("time", "s"), [Axis("a title much longer than any plot is high " * 3, "ms")],
                  [Series("s", x, x * 1500)])
    probe = tmp_path / "bad.html"
    probe.write_text(
        f"<!doctype html><html><head>{page_head()}<style>figcaption{{position:relative;top:120px}}"
        ".a{position:absolute;top:5px;left:5px}</style></head><body><span class='a'>first</span>"
        f"<span class='a'>second</span><img src='http://127.0.0.1:9/x.png'>{render([chart])}</body></html>")
    found = check_page(probe)
    kinds = {o[0] for o in found["overlaps"]}
    assert {"page", "page over chart"} <= kinds, found["overlaps"]
    assert found["clipped"] and found["resources"] == ["http://127.0.0.1:9/x.png"]
    assert "10.0k" in found["ticks"] and not any("e+" in t for t in found["ticks"])
