"""Chart specs: one x array per chart, one unit per axis, marks, histogram bins, the page's
inline assets and escaping. (How the browser draws them: tests/e2e/test_report_pages.py.)"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from infbench.report.charts import (
    Axis,
    Chart,
    Mark,
    Series,
    histogram,
    human,
    page_head,
    peaks,
    render,
)

T = Axis("time", "s")


def test_series_with_their_own_x_share_one_x_array_with_gaps() -> None:
    c = Chart("c", T, [Axis("a", "requests")],
              [Series("a", np.array([0.0, 2.0]), np.array([1.0, 3.0])),
               Series("b", np.array([1.0, 2.0]), np.array([5.0, np.nan]))])
    spec = c.spec("x")
    assert spec["data"] == [[0.0, 1.0, 2.0], [1.0, None, 3.0], [None, 5.0, None]]


def test_same_x_is_kept_in_order_with_duplicates() -> None:
    x = np.array([2.0, 1.0, 1.0])
    c = Chart("c", T, [Axis("r", "request #")], [Series("a", x, np.array([7.0, 8.0, 9.0]), style="points")])
    assert c.spec("x")["data"] == [[1.0, 1.0, 2.0], [8.0, 9.0, 7.0]]


def test_an_axis_without_data_goes_and_the_other_stands_on_the_left() -> None:
    empty = np.array([])
    c = Chart("c", T, [Axis("requests", "requests"), Axis("KV cache used", "%")],
              [Series("running", empty, empty), Series("KV", np.array([0.0, 1.0]), np.array([10.0, 20.0]), axis=1)])
    spec = c.spec("x")
    assert [a["unit"] for a in spec["y"]] == ["%"] and spec["series"][0]["axis"] == 0


def test_a_chart_has_at_most_two_units_and_known_styles() -> None:
    one = np.array([1.0])
    with pytest.raises(ValueError, match="one or two y axes"):
        Chart("c", T, [Axis("a", "ms"), Axis("b", "%"), Axis("c", "requests")])
    with pytest.raises(ValueError, match="style 'area'"):
        Chart("c", T, [Axis("a", "ms")], [Series("s", one, one, style="area")])
    with pytest.raises(ValueError, match="axis 1"):
        Chart("c", T, [Axis("a", "ms")], [Series("s", one, one, axis=1)])


def test_values_are_six_significant_digits_and_nan_is_null() -> None:
    c = Chart("c", T, [Axis("a", "ms")], [Series("s", np.array([0.123456789, 1.0]),
                                                  np.array([123456.789, np.inf]))])
    assert c.spec("x")["data"] == [[0.123457, 1.0], [123457.0, None]]


def test_histogram_bins_clip_marks_and_note() -> None:
    values = np.concatenate([np.linspace(10, 20, 999), [500.0]])
    h = histogram(values, "TTFT", Axis("TTFT", "ms"), "requests", marks={"p50": 15.0, "p99": None})
    spec = h.spec("h")
    counts = spec["data"][1]
    assert len(counts) == 60 and sum(counts) == 1000  # the outlier is in the last bin
    assert spec["x"]["range"][0] == 10.0 and spec["x"]["range"][1] < 21
    assert "1 values above p99.9" in h.note and "max 500 ms" in h.note
    assert spec["marks"] == [{"x": 15.0, "label": "p50 15 ms", "color": spec["marks"][0]["color"]}]
    assert spec["y"][0] == {"label": "requests", "unit": "requests", "log": False, "min": None, "max": None,
                            "zero": True}
    few = histogram(np.array([1.0, 2.0, 3.0]), "t", Axis("x", "ms"), "requests").spec("f")
    assert len(few["data"][0]) == 10
    const = histogram(np.array([5.0, 5.0]), "t", Axis("x", "ms"), "requests").spec("c")
    assert const["x"]["range"] == [5.0, 6.0] and sum(const["data"][1]) == 2
    assert histogram(np.array([np.nan]), "t", Axis("x", "ms"), "requests").spec("e").keys() == {"id", "title"}


def test_peaks_keeps_the_spike_of_each_slice() -> None:
    x = np.arange(10_000, dtype=float)
    y = np.ones_like(x)
    y[4321] = 250.0
    px, py = peaks(x, y, n=100)
    assert len(px) == 100 and py.max() == 250.0 and 4321.0 in px
    assert peaks(x[:5], y[:5])[0].size == 5


@pytest.mark.parametrize(("v", "text"), [(1500, "1,500"), (15_000, "15k"), (1.5e6, "1.5M"), (0.0123, "0.0123"),
                                         (12.345, "12.3"), (0, "0"), (0.00001234, "0.000012")])
def test_human_numbers_never_use_exponents(v: float, text: str) -> None:
    assert human(v) == text and "e" not in human(v)


def test_render_escapes_text_and_keeps_data_out_of_the_script_end() -> None:
    c = Chart("</script><b>x", T, [Axis("a", "ms")], [Series("</script>", np.array([0.0]), np.array([1.0]))],
              note="a < b", marks=[Mark(0.0, "</script>")])
    page = render([c, Chart("nothing", T, [Axis("a", "ms")], empty="no vLLM gauges")])
    assert "<figcaption>&lt;/script&gt;&lt;b&gt;x</figcaption>" in page and "a &lt; b" in page
    data = re.search(r"id='chart-data'>(.*?)</script>", page, re.S).group(1)
    assert "<" not in data and json.loads(data)[0]["series"][0]["name"] == "</script>"
    assert page.count("<b>") == 0
    assert "no vLLM gauges" in page and page.count("class='plot'") == 1


def test_page_head_inlines_uplot_and_the_chart_code() -> None:
    head = page_head()
    assert "uPlot" in head and "infbenchCharts" in head and ".uplot" in head
    assert not re.search(r"""(src|href)\s*=|<link|@import|url\(""", head)
    assert 50_000 < len(head) < 80_000


def test_point_names_follow_the_sorted_x_and_need_one_shared_x() -> None:
    x = np.array([3.0, 1.0, 2.0])
    c = Chart("c", T, [Axis("a", "ms")], [Series("s", x, x * 2, style="points", markers=True)],
              point_names=["c=3", "c=1", "c=2"])
    spec = c.spec("x")
    assert spec["x"]["names"] == ["c=1", "c=2", "c=3"] and spec["data"][1] == [2.0, 4.0, 6.0]
    bad = Chart("c", T, [Axis("a", "ms")], [Series("s", x, x), Series("t", x + 1, x)], point_names=["a"] * 3)
    with pytest.raises(ValueError, match="point names"):
        bad.spec("x")
