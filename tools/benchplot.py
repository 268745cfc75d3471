"""Time against batch size, as an SVG drawn from a bench results file (tools/bench --report FILE
--plot OUT.svg): one panel per layer shape, M on a log2 axis, µs on a log10 axis, a line each for
jitmarlin, every peer of the rows, fp16 cuBLAS and the byte floor (dashed). Pure: no GPU, no
plotting library (the SVG is written here), so the README's plot is redrawn from any run of
record on any machine.
"""

from __future__ import annotations

import math
from html import escape

# series: (label, colour, stroke width, dash); peers not listed get a grey line of their own
SERIES = {
    "jitmarlin": ("jitmarlin", "#d62728", 2.6, ""),
    "humming": ("humming", "#1f77b4", 1.6, ""),
    "ist_marlin_benchmd": ("IST Marlin (anchor)", "#9467bd", 1.4, ""),
    "tinygemm": ("tinygemm", "#8c564b", 1.4, ""),
    "gemlite": ("gemlite", "#2ca02c", 1.4, ""),
    "cublas_fp16": ("cuBLAS fp16", "#000000", 1.4, ""),
    "floor": ("byte floor", "#7f7f7f", 1.2, "4 3"),
}
PANEL_W, PANEL_H, COLS = 300, 210, 4
PAD_L, PAD_R, PAD_T, PAD_B = 46, 10, 26, 30


def series_of(row) -> dict:
    """{series name: µs} of one bench row (positive times only)."""
    out = {"jitmarlin": row.get("jitmarlin_us"), "cublas_fp16": row.get("cublas_fp16_us"), "floor": row.get("floor_us")}
    out.update(row.get("peers") or {})
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and v > 0}


def panels(rows, qtype: str, act: str) -> dict:
    """{shape: {series: [(M, µs), ...] sorted by M}} of the rows of one weight type and dtype, in
    the rows' shape order."""
    out: dict = {}
    for r in rows:
        if (r.get("qtype") or "uint4b8") != qtype or r.get("act") != act:
            continue
        m = r.get("M")
        if not isinstance(m, int) or m < 1:
            continue
        for name, us in series_of(r).items():
            out.setdefault(r["shape"], {}).setdefault(name, []).append((m, us))
    for shape in out.values():
        for pts in shape.values():
            pts.sort()
    return out


def _ticks(lo: float, hi: float) -> list:
    """1, 2, 5 x 10^k values within [lo, hi] (log axis labels)."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for d in (1, 2, 5):
            v = d * 10.0**e
            if lo <= v <= hi:
                out.append(v)
    return out


def _fmt(v: float) -> str:
    return f"{v:g}" if v < 1e4 else f"{v / 1e3:g}k"


def plot_svg(rows, qtype: str = "uint4b8", act: str = "float16", title: str = "") -> str:
    """The SVG text. ValueError when no row has this weight type and dtype."""
    data = panels(rows, qtype, act)
    if not data:
        raise ValueError(f"no rows of {qtype} / {act} to plot")
    names = [n for n in SERIES if any(n in s for s in data.values())]
    names += sorted({n for s in data.values() for n in s} - set(names))
    rows_n = -(-len(data) // COLS)
    cols = min(COLS, len(data))
    legend_h = 24
    width, height = cols * PANEL_W, rows_n * PANEL_H + legend_h + (22 if title else 0)
    top = 22 if title else 0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    if title:
        out.append(f'<text x="{width / 2:.0f}" y="15" text-anchor="middle" font-size="13">{escape(title)}</text>')
    for i, (shape, series) in enumerate(data.items()):
        x0, y0 = (i % COLS) * PANEL_W, top + (i // COLS) * PANEL_H
        ms = sorted({m for pts in series.values() for m, _ in pts})
        us = [v for pts in series.values() for _, v in pts]
        lo, hi = min(us) / 1.15, max(us) * 1.15
        lx0, lx1 = math.log2(ms[0]), math.log2(ms[-1])
        w, h = PANEL_W - PAD_L - PAD_R, PANEL_H - PAD_T - PAD_B

        def px(m, lx0=lx0, lx1=lx1, x0=x0, w=w):
            return x0 + PAD_L + (w * (math.log2(m) - lx0) / (lx1 - lx0) if lx1 > lx0 else w / 2)

        def py(v, lo=lo, hi=hi, y0=y0, h=h):
            return y0 + PAD_T + h * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

        out.append(
            f'<text x="{x0 + PAD_L + w / 2:.0f}" y="{y0 + 16}" text-anchor="middle" '
            f'font-size="11">{escape(str(shape))}</text>'
        )
        out.append(f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" width="{w}" height="{h}" fill="none" stroke="#bbb"/>')
        for v in _ticks(lo, hi):
            y = py(v)
            out.append(f'<line x1="{x0 + PAD_L}" x2="{x0 + PAD_L + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{x0 + PAD_L - 4}" y="{y + 3:.1f}" text-anchor="end">{_fmt(v)}</text>')
        for m in ms:
            out.append(f'<text x="{px(m):.1f}" y="{y0 + PAD_T + h + 13}" text-anchor="middle">{m}</text>')
        out.append(
            f'<text x="{x0 + PAD_L + w / 2:.0f}" y="{y0 + PANEL_H - 4}" text-anchor="middle" '
            f'fill="#555">M (rows of x)</text>'
        )
        out.append(
            f'<text x="{x0 + 10}" y="{y0 + PAD_T + h / 2:.0f}" text-anchor="middle" fill="#555" '
            f'transform="rotate(-90 {x0 + 10} {y0 + PAD_T + h / 2:.0f})">µs</text>'
        )
        for name in names:
            pts = series.get(name)
            if not pts:
                continue
            _, colour, sw, dash = SERIES.get(name, (name, "#aaaaaa", 1.2, ""))
            d = f' stroke-dasharray="{dash}"' if dash else ""
            coords = " ".join(f"{px(m):.1f},{py(v):.1f}" for m, v in pts)
            out.append(
                f'<polyline data-series="{escape(name)}" points="{coords}" fill="none" '
                f'stroke="{colour}" stroke-width="{sw}"{d}/>'
            )
    ly = top + rows_n * PANEL_H + 14
    for j, name in enumerate(names):
        label, colour, sw, dash = SERIES.get(name, (name, "#aaaaaa", 1.2, ""))
        lx = 10 + j * (width - 20) / max(len(names), 1)
        d = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{lx:.0f}" x2="{lx + 22:.0f}" y1="{ly - 3}" y2="{ly - 3}" stroke="{colour}" '
            f'stroke-width="{sw}"{d}/>'
        )
        out.append(f'<text x="{lx + 26:.0f}" y="{ly}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
