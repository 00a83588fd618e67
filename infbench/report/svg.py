"""Minimal inline-SVG charts (histogram, lines, scatter) so a report needs no JS or network."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np

W, H = 720, 260
ML, MR, MT, MB = 64, 16, 28, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


class _Frame:
    def __init__(self, title: str, xlabel: str, ylabel: str, x: tuple[float, float], y: tuple[float, float]) -> None:
        self.x0, self.x1 = x if x[1] > x[0] else (x[0], x[0] + 1)
        self.y0, self.y1 = y if y[1] > y[0] else (y[0], y[0] + 1)
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
                      f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
                      f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">'
                      f'{html.escape(title)}</text>']
        for t in _nice_ticks(self.x0, self.x1):
            px = self.px(t)
            self.parts.append(f'<line x1="{px:.1f}" y1="{H - MB}" x2="{px:.1f}" y2="{MT}" stroke="#eee"/>'
                              f'<text x="{px:.1f}" y="{H - MB + 14}" text-anchor="middle">{_fmt(t)}</text>')
        for t in _nice_ticks(self.y0, self.y1):
            py = self.py(t)
            self.parts.append(f'<line x1="{ML}" y1="{py:.1f}" x2="{W - MR}" y2="{py:.1f}" stroke="#eee"/>'
                              f'<text x="{ML - 4}" y="{py + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
        self.parts.append(f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none" stroke="#999"/>'
                          f'<text x="{(ML + W - MR) / 2}" y="{H - 6}" text-anchor="middle">{html.escape(xlabel)}</text>'
                          f'<text x="12" y="{(MT + H - MB) / 2}" text-anchor="middle" '
                          f'transform="rotate(-90 12 {(MT + H - MB) / 2})">{html.escape(ylabel)}</text>')

    def px(self, x: float) -> float:
        return ML + (x - self.x0) / (self.x1 - self.x0) * (W - ML - MR)

    def py(self, y: float) -> float:
        return H - MB - (y - self.y0) / (self.y1 - self.y0) * (H - MT - MB)

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"


def empty(title: str, why: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="60" font-family="sans-serif">'
            f'<text x="10" y="20" font-weight="bold">{html.escape(title)}</text>'
            f'<text x="10" y="44" fill="#777">{html.escape(why)}</text></svg>')


def histogram(values: np.ndarray, title: str, xlabel: str, bins: int = 60,
              marks: dict[str, float] | None = None) -> str:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return empty(title, "no data")
    hi = float(np.quantile(values, 0.999)) if values.size > 100 else float(values.max())
    lo = float(values.min())
    counts, edges = np.histogram(np.clip(values, lo, hi), bins=bins, range=(lo, hi if hi > lo else lo + 1))
    f = _Frame(title, xlabel, "requests" if "ITL" not in title else "gaps", (lo, float(edges[-1])), (0, float(counts.max())))
    for c, a, b in zip(counts, edges[:-1], edges[1:], strict=True):
        if c:
            f.parts.append(f'<rect x="{f.px(a):.1f}" y="{f.py(c):.1f}" width="{max(f.px(b) - f.px(a) - 0.5, 0.5):.1f}" '
                           f'height="{f.py(0) - f.py(c):.1f}" fill="{COLORS[0]}"/>')
    for i, (name, v) in enumerate((marks or {}).items()):
        if v is not None and lo <= v <= f.x1:
            x = f.px(v)
            f.parts.append(f'<line x1="{x:.1f}" y1="{MT}" x2="{x:.1f}" y2="{H - MB}" stroke="{COLORS[1 + i]}" '
                           f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{MT + 12 + 12 * i}" '
                           f'fill="{COLORS[1 + i]}">{html.escape(name)} {_fmt(v)}</text>')
    return f.done()


def lines(series: Sequence[tuple[str, np.ndarray, np.ndarray]], title: str, xlabel: str, ylabel: str) -> str:
    series = [(n, np.asarray(x, float), np.asarray(y, float)) for n, x, y in series if len(x)]
    if not series:
        return empty(title, "no data")
    xs = np.concatenate([s[1] for s in series])
    ys = np.concatenate([s[2] for s in series])
    f = _Frame(title, xlabel, ylabel, (float(xs.min()), float(xs.max())), (min(0.0, float(ys.min())), float(ys.max())))
    for i, (name, x, y) in enumerate(series):
        if len(x) > 2000:  # thin to keep the page light; the shape survives
            idx = np.linspace(0, len(x) - 1, 2000).astype(int)
            x, y = x[idx], y[idx]
        pts = " ".join(f"{f.px(a):.1f},{f.py(b):.1f}" for a, b in zip(x, y, strict=True))
        color = COLORS[i % len(COLORS)]
        f.parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/>'
                       f'<text x="{W - MR - 4}" y="{MT + 14 + 13 * i}" text-anchor="end" fill="{color}">'
                       f'{html.escape(name)}</text>')
    return f.done()


def scatter(x: np.ndarray, y: np.ndarray, title: str, xlabel: str, ylabel: str, max_points: int = 20000,
            highlight: np.ndarray | None = None) -> str:
    if len(x) == 0:
        return empty(title, "no data")
    if len(x) > max_points:
        idx = np.random.default_rng(0).choice(len(x), max_points, replace=False)
        x, y = x[idx], y[idx]
        highlight = highlight[idx] if highlight is not None else None
    f = _Frame(title, xlabel, ylabel, (float(x.min()), float(x.max())), (float(y.min()), float(y.max())))
    dots = []
    for i, (a, b) in enumerate(zip(x, y, strict=True)):
        color = COLORS[1] if highlight is not None and highlight[i] else COLORS[0]
        dots.append(f'<rect x="{f.px(a):.1f}" y="{f.py(b):.1f}" width="1.5" height="1.5" fill="{color}"/>')
    f.parts.append("".join(dots))
    return f.done()
