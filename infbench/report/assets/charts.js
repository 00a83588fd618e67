/* infbench report charts: draws the chart specs a report page carries (JSON written by
   infbench/report/charts.py) with uPlot, which the page inlines before this file.
   Each chart: hover values in its legend, drag to zoom (double-click resets), click a legend
   entry to hide or show its series. Width follows the page; tick labels read 1,500 / 15k. */
(function () {
  "use strict";
  const FONT = "12px sans-serif";
  const LABEL_FONT = "bold 12px sans-serif";
  const HEIGHT = 300;
  const ROW = 16; // css px per row of mark labels above the plot

  function group(s) {
    const neg = s[0] === "-";
    const [i, f] = (neg ? s.slice(1) : s).split(".");
    return (neg ? "-" : "") + i.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (f ? "." + f : "");
  }

  function trim(s) {
    return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, "");
  }

  /* One value, about four significant digits: 0.0123, 12.35, 1,234, 12.3k, 1.23M. */
  function fmt(v) {
    if (v == null || !isFinite(v)) return "-";
    const a = Math.abs(v);
    if (a >= 1e9) return trim((v / 1e9).toFixed(2)) + "G";
    if (a >= 1e6) return trim((v / 1e6).toFixed(2)) + "M";
    if (a >= 1e4) return trim((v / 1e3).toFixed(1)) + "k";
    if (a >= 1000) return group(v.toFixed(0));
    if (a >= 100) return trim(v.toFixed(1));
    if (a >= 1) return trim(v.toFixed(2));
    if (a === 0) return "0";
    return trim(v.toFixed(Math.min(12, 2 - Math.floor(Math.log10(a)))));
  }

  function stepDecimals(incr) {
    if (!(incr > 0) || !isFinite(incr)) return 0;
    for (let d = 0; d < 12; d++) {
      const v = incr * Math.pow(10, d);
      if (Math.abs(v - Math.round(v)) < 1e-6 * Math.max(1, v)) return d;
    }
    return 12;
  }

  /* Tick labels of one linear axis: one suffix and one number of decimals for all of them. */
  function ticks(splits, incr) {
    const max = Math.max(0, ...splits.filter((v) => v != null).map(Math.abs));
    let div = 1, suf = "";
    if (max >= 1e9) [div, suf] = [1e9, "G"];
    else if (max >= 1e6) [div, suf] = [1e6, "M"];
    else if (max >= 1e4) [div, suf] = [1e3, "k"];
    const d = stepDecimals(incr / div);
    return splits.map((v) => (v == null ? "" : v === 0 ? "0" : group((v / div).toFixed(d)) + suf));
  }

  function axisTitle(a) {
    return a.unit && a.unit !== a.label ? a.label + " (" + a.unit + ")" : a.label;
  }

  /* A vertical axis is as wide as its longest tick label, so labels never run into its title.
     uPlot asks again after each layout pass and the ticks can change with the new plot height
     (900 -> 1,000): the size only grows from pass to pass, so the last ticks always fit and
     the passes still converge. */
  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (axis.side % 2 === 0) return axis.ticks.size + axis.gap + 16; // a horizontal axis: one line
    let w = 0;
    if (values) {
      u.ctx.font = axis.font[0];
      for (const v of values) w = Math.max(w, u.ctx.measureText(v || "").width);
    }
    const need = Math.ceil(axis.ticks.size + axis.gap + w / uPlot.pxRatio) + 4;
    return cycleNum > 1 ? Math.max(axis._size || 0, need) : need;
  }

  function yRange(a) {
    return (u, min, max) => {
      if (a.min != null && a.max != null) return [a.min, a.max];
      if (min == null || max == null) return [0, 1];
      let lo = a.min != null ? a.min : a.zero ? Math.min(0, min) : min;
      let hi = a.max != null ? a.max : max;
      if (!(hi > lo)) hi = lo + (Math.abs(lo) || 1);
      const pad = (hi - lo) * 0.05;
      if (a.min == null && !a.zero) lo -= pad;
      return [lo, a.max != null ? hi : hi + pad];
    };
  }

  function xScale(spec) {
    const x = spec.x, data = spec.data[0];
    const lo = data[0], hi = data[data.length - 1];
    const dots = spec.series.some((s) => s.markers); // room for the first and last dot
    if (x.log) {
      return { distr: 3, log: 2, range: (u, min, max) =>
        (min === lo && max === hi ? (dots ? [min / 1.15, max * 1.15] : uPlot.rangeLog(min, max, 2, true))
          : [min, max]) };
    }
    return {
      time: false,
      range: (u, min, max) => {
        if (min === lo && max === hi) {
          if (x.range) return x.range; // whole bars of a histogram
          if (dots && max > min) return [min - (max - min) * 0.03, max + (max - min) * 0.03];
        }
        return max > min ? [min, max] : [min - 1, max + 1];
      },
    };
  }

  function seriesOpts(s, spec) {
    const unit = spec.y[s.axis].unit;
    const o = {
      label: s.name, stroke: s.color, width: 1.5, scale: s.axis ? "y2" : "y", spanGaps: true,
      value: (u, v) => (v == null ? "-" : fmt(v) + " " + unit),
    };
    if (s.style === "bars") {
      Object.assign(o, { paths: uPlot.paths.bars({ size: [1, Infinity], gap: 1 }), fill: s.color + "cc",
                         width: 0, points: { show: false } });
    } else if (s.style === "points") {
      Object.assign(o, { paths: () => null, points: { show: true, size: s.markers ? 8 : 3, width: 0,
                                                       fill: s.color, stroke: s.color, space: 0 } });
    } else if (s.style === "step") {
      Object.assign(o, { paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } });
    } else {
      o.pxAlign = 0; // a sloped line stays straight, not stairs of whole pixels
      o.points = { show: !!s.markers, size: 6, fill: s.color };
    }
    return o;
  }

  function pow2Splits(u, ai, min, max) {
    const out = [];
    for (let e = Math.ceil(Math.log2(min) - 1e-9); Math.pow(2, e) <= max * (1 + 1e-9); e++) out.push(Math.pow(2, e));
    return out;
  }

  function axis(a, side, grid, log) {
    const splits = log ? { splits: pow2Splits } : {};
    return { ...splits,
      scale: side === 1 ? "y2" : side === 2 ? "x" : "y", side, label: axisTitle(a), labelSize: 18,
      labelFont: LABEL_FONT, font: FONT, size: axisSize, gap: 5, space: side === 2 ? 70 : 36,
      grid: { show: grid, stroke: "#eee", width: 1 }, ticks: { stroke: "#ccc", width: 1, size: 5 },
      values: log ? (u, splits) => splits.map(fmt) : (u, splits, ai, space, incr) => ticks(splits, incr),
    };
  }

  /* Dashed lines at the marks, their labels in rows above the plot (never over data). */
  function drawMarks(marks) {
    return (u) => {
      const ctx = u.ctx, px = uPlot.pxRatio, b = u.bbox, rows = [];
      ctx.save();
      ctx.font = Math.round(12 * px) + "px sans-serif";
      ctx.textBaseline = "alphabetic";
      // The placement below measures from the label's left end; the context keeps whatever
      // alignment uPlot drew its last axis with (a left axis's "right" put a mark near the
      // plot's left edge back over the y tick labels).
      ctx.textAlign = "left";
      const placed = marks.map((m) => ({ m, x: u.valToPos(m.x, "x", true) }))
        .filter((p) => p.x >= b.left - 0.5 && p.x <= b.left + b.width + 0.5)
        .sort((p, q) => p.x - q.x);
      placed.forEach(({ m, x }, i) => {
        ctx.strokeStyle = m.color;
        ctx.lineWidth = 1.5 * px;
        ctx.setLineDash([4 * px, 4 * px * (placed.length - 1) + 4 * px]);
        ctx.lineDashOffset = -4 * px * i; // marks at one x interleave their dashes: both stay visible
        ctx.beginPath();
        ctx.moveTo(x, b.top);
        ctx.lineTo(x, b.top + b.height);
        ctx.stroke();
        const w = ctx.measureText(m.label).width, gap = 4 * px;
        let left = x + gap;
        if (left + w > b.left + b.width) left = Math.max(b.left, x - gap - w);
        let r = rows.findIndex((end) => end + 8 * px <= left);
        if (r < 0) { r = rows.length; rows.push(0); }
        rows[r] = left + w;
        ctx.fillStyle = m.color;
        ctx.fillText(m.label, left, b.top - r * ROW * px - 5 * px); // row 0 nearest the plot
      });
      ctx.restore();
    };
  }

  function build(el, spec) {
    const hasY2 = spec.y.length > 1;
    const marks = spec.marks || [];
    const opts = {
      width: Math.max(200, el.clientWidth), height: spec.height || HEIGHT,
      padding: [10 + (marks.length ? ROW * marks.length : 0), hasY2 ? null : 18, null, null],
      scales: { x: xScale(spec), y: { range: yRange(spec.y[0]) } },
      axes: [axis(spec.x, 2, true, spec.x.log), axis(spec.y[0], 3, true, false)],
      series: [{ label: axisTitle(spec.x), value: (u, v, si, i) => (v == null ? "-" : fmt(v) + " " + spec.x.unit
                 + (spec.x.names && i != null ? " · " + spec.x.names[i] : "")) }]
        .concat(spec.series.map((s) => seriesOpts(s, spec))),
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
      hooks: marks.length ? { draw: [drawMarks(marks)] } : {},
    };
    if (hasY2) {
      opts.scales.y2 = { range: yRange(spec.y[1]) };
      opts.axes.push(axis(spec.y[1], 1, false, false));
    }
    return new uPlot(opts, spec.data, el);
  }

  const plots = [];
  const resize = typeof ResizeObserver === "undefined" ? null : new ResizeObserver((entries) => {
    for (const e of entries) {
      const u = e.target._uplot, w = Math.floor(e.contentRect.width);
      if (u && w > 0 && Math.abs(w - u.width) >= 1) u.setSize({ width: w, height: u.height });
    }
  });

  function renderAll(node) {
    const specs = JSON.parse(node.textContent);
    for (const spec of specs) {
      const el = document.getElementById(spec.id);
      if (!el || !spec.data) continue;
      el._uplot = build(el, spec);
      plots.push(el._uplot);
      if (resize) resize.observe(el);
    }
  }

  window.infbenchCharts = { renderAll, fmt, ticks, plots };
})();
