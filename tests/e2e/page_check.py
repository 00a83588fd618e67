"""Open a report page in headless Chromium (Debian's `chromium`), check its layout from inside
the page, and screenshot it.

The check runs in the page: a hook on the 2D canvas records every text the charts draw (tick
labels, axis titles, mark labels) with its ink box, and after the page settles a script
collects the boxes of all DOM text (one per line fragment; every <details> opened first, so
collapsed evidence is checked as it reads expanded) and reports:
- `overlaps`: pairs of texts whose boxes intersect by more than 1 px both ways (canvas text
  against canvas text of the same chart, DOM text against DOM text, DOM text over a chart);
- `over_data`: chart text drawn inside a chart's plotting area (where the data is);
- `clipped`: chart text that runs off its canvas;
- `resources`: everything the page loaded (a self-contained page loads nothing);
- `errors`: script errors; `charts`, `canvas_texts`, `ticks`, `widths` (each chart's cell and
  plot), `extent` (leftmost and rightmost chart edge), `scroll_width`, `height`.

Usage outside the tests: `python -m tests.e2e.page_check PAGE.html OUT.png [WIDTH]`.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

HOOK_JS = r"""
window.__ibText = new Map(); window.__ibErrors = [];
window.addEventListener('error', (e) => window.__ibErrors.push(String(e.message)));
(function () {
  const P = CanvasRenderingContext2D.prototype, fill = P.fillText, clear = P.clearRect;
  P.clearRect = function (x, y, w, h) {
    if (x <= 0 && y <= 0 && w >= this.canvas.width && h >= this.canvas.height) window.__ibText.set(this.canvas, []);
    return clear.apply(this, arguments);
  };
  P.fillText = function (text, x, y) {
    const s = String(text);
    if (s.trim()) {
      const m = this.measureText(s), t = this.getTransform();
      const pts = [[x - m.actualBoundingBoxLeft, y - m.actualBoundingBoxAscent],
                   [x + m.actualBoundingBoxRight, y + m.actualBoundingBoxDescent]]
        .map(([a, b]) => t.transformPoint(new DOMPoint(a, b)));
      const box = { text: s, x0: Math.min(pts[0].x, pts[1].x), x1: Math.max(pts[0].x, pts[1].x),
                    y0: Math.min(pts[0].y, pts[1].y), y1: Math.max(pts[0].y, pts[1].y) };
      if (!window.__ibText.has(this.canvas)) window.__ibText.set(this.canvas, []);
      window.__ibText.get(this.canvas).push(box);
    }
    return fill.apply(this, arguments);
  };
})();
"""

CHECK_JS = r"""
setTimeout(function () {
  // Collapsed evidence (a finding's SQL) is checked as a reader who expands it sees it: a
  // closed <details> lays nothing out, yet its text reports line boxes stacked on each other.
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  const TOL = 1;
  const hit = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > TOL && Math.min(a.b, b.b) - Math.max(a.t, b.t) > TOL;
  const page = (r) => ({ l: r.left + scrollX, r: r.right + scrollX, t: r.top + scrollY, b: r.bottom + scrollY });
  const out = { overlaps: [], over_data: [], clipped: [], errors: window.__ibErrors, ticks: [], widths: [] };
  const plots = (window.infbenchCharts && window.infbenchCharts.plots) || [];
  out.charts = plots.length;
  const canvases = [];
  let n = 0;
  for (const [cv, items] of window.__ibText) {
    if (!cv.isConnected) continue;
    const cr = page(cv.getBoundingClientRect()), sx = (cr.r - cr.l) / cv.width, sy = (cr.b - cr.t) / cv.height;
    const u = plots.find((p) => p.ctx.canvas === cv);
    const area = u && { l: u.bbox.left, r: u.bbox.left + u.bbox.width, t: u.bbox.top, b: u.bbox.top + u.bbox.height };
    const boxes = items.map((b) => ({ text: b.text, l: cr.l + b.x0 * sx, r: cr.l + b.x1 * sx, t: cr.t + b.y0 * sy, b: cr.t + b.y1 * sy, raw: b }));
    canvases.push(cr);
    n += boxes.length;
    for (const b of boxes) {
      out.ticks.push(b.text);
      if (b.raw.x0 < -TOL || b.raw.y0 < -TOL || b.raw.x1 > cv.width + TOL || b.raw.y1 > cv.height + TOL) out.clipped.push(b.text);
      if (area && hit({ l: b.raw.x0, r: b.raw.x1, t: b.raw.y0, b: b.raw.y1 }, area)) out.over_data.push(b.text);
    }
    for (let i = 0; i < boxes.length; i++)
      for (let j = i + 1; j < boxes.length; j++)
        if (hit(boxes[i], boxes[j])) out.overlaps.push(['chart', boxes[i].text, boxes[j].text]);
  }
  out.canvas_texts = n;
  const dom = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode: (nd) => /^(SCRIPT|STYLE|NOSCRIPT)$/.test(nd.parentNode.nodeName) || !nd.textContent.trim()
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT });
  for (let nd; (nd = walk.nextNode());) {
    const range = document.createRange();
    range.selectNodeContents(nd);
    for (const r of range.getClientRects()) if (r.width > 0 && r.height > 0) dom.push({ text: nd.textContent.trim().slice(0, 60), ...page(r) });
  }
  for (let i = 0; i < dom.length; i++) {
    for (let j = i + 1; j < dom.length; j++)
      if (hit(dom[i], dom[j])) out.overlaps.push(['page', dom[i].text, dom[j].text]);
    for (const c of canvases) if (hit(dom[i], c)) out.overlaps.push(['page over chart', dom[i].text, '']);
  }
  out.dom_texts = dom.length;
  for (const u of plots) {
    const cell = u.root.parentNode.getBoundingClientRect();
    out.widths.push([cell.width, u.width]);
    out.extent = [Math.min(cell.left, (out.extent || [1e9])[0]), Math.max(cell.right, (out.extent || [0, 0])[1])];
  }
  out.resources = performance.getEntriesByType('resource').map((e) => e.name);
  out.scroll_width = document.documentElement.scrollWidth;
  out.inner_width = innerWidth;
  out.height = document.documentElement.scrollHeight;
  const pre = document.createElement('pre');
  pre.id = 'ib-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 1000);
"""

# What a reader does with a chart, as mouse events: hover the middle (its legend shows values),
# drag across the middle third (zoom), double-click (zoom out), click the first series' legend
# entry twice (hide, show). Runs after the layout check, on every chart.
INTERACT_JS = r"""
setTimeout(async function () {
  const ev = (el, type, x, y) => el.dispatchEvent(new MouseEvent(type, { bubbles: true, cancelable: true,
    view: window, clientX: x, clientY: y, movementX: 1, button: 0, buttons: type === 'mouseup' ? 0 : 1 }));
  const settle = () => new Promise((ok) => setTimeout(ok, 20)); // uPlot applies changes in a microtask
  const res = [];
  for (const u of window.infbenchCharts.plots) {
    const r = u.over.getBoundingClientRect(), cy = r.top + r.height / 2;
    const at = (f) => r.left + r.width * f;
    ev(u.over, 'mouseenter', at(0.5), cy);
    ev(u.over, 'mousemove', at(0.5), cy);
    await settle();
    const values = [...u.root.querySelectorAll('.u-legend .u-value')].map((v) => v.textContent);
    const before = [u.scales.x.min, u.scales.x.max];
    ev(u.over, 'mousedown', at(0.33), cy);
    ev(u.over, 'mousemove', at(0.67), cy);
    ev(document, 'mouseup', at(0.67), cy);
    await settle();
    const zoomed = [u.scales.x.min, u.scales.x.max];
    ev(u.over, 'dblclick', at(0.5), cy);
    await settle();
    const reset = [u.scales.x.min, u.scales.x.max];
    const entry = u.root.querySelectorAll('.u-legend .u-series')[1].querySelector('th');
    entry.click();
    await settle();
    const hidden = !u.series[1].show;
    entry.click();
    await settle();
    res.push({ values, before, zoomed, reset, hidden, shown_again: u.series[1].show });
  }
  const pre = document.createElement('pre');
  pre.id = 'ib-interact';
  pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
}, 1500);
"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=5000"]


def _chromium(args: list[str], timeout: float = 60) -> str:
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                           capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"chromium exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def check_page(page: Path, width: int = 1400, height: int = 1000, interact: bool = False) -> dict[str, Any]:
    """Load a copy of `page` with the hook and the check in it; the check's findings (and
    with `interact`, under "interact", what each chart did with the mouse)."""
    text = page.read_text(encoding="utf-8")
    scripts = f"<script>{CHECK_JS}</script>" + (f"<script>{INTERACT_JS}</script>" if interact else "")
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / "probe.html"
        text = text.replace("<head>", f"<head><script>{HOOK_JS}</script>", 1)
        probe.write_text(text.replace("</body>", f"{scripts}</body>", 1), encoding="utf-8")
        dom = _chromium([f"--window-size={width},{height}", "--dump-dom", probe.as_uri()])
    found = {}
    for key, pre in (("check", "ib-check"), ("interact", "ib-interact")):
        m = re.search(rf'<pre id="{pre}">(.*?)</pre>', dom, re.S)
        if m:
            found[key] = json.loads(html.unescape(m.group(1)))
        elif key == "check" or interact:
            raise RuntimeError(f"the {key} script did not run in {page}: {dom[-1000:]}")
    return {**found["check"], **({"interact": found["interact"]} if interact else {})}


def screenshot(page: Path, png: Path, width: int = 1400, height: int | None = None) -> Path:
    """The whole page at `width` CSS px (its height measured first unless given)."""
    if height is None:
        height = int(check_page(page, width)["height"]) + 20
    _chromium([f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()])
    return png


if __name__ == "__main__":
    page, png = Path(sys.argv[1]), Path(sys.argv[2])
    w = int(sys.argv[3]) if len(sys.argv) > 3 else 1400
    found = check_page(page, w)
    screenshot(page, png, w, int(found["height"]) + 20)
    print(json.dumps({k: v for k, v in found.items() if k != "ticks"}, indent=1))
