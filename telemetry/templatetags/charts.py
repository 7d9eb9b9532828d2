"""Charts drawn as inline SVG on the server: no JavaScript library, nothing fetched from a CDN.

``{% sparkline values %}`` draws a small line of 0–100% values (None leaves a gap); ``{% util_chart points %}``
a labelled utilisation chart of gpus.telemetry.Point; ``{% bar_pairs rows %}`` paired bars (allocated vs used
GPU-hours per day). Each chart carries a text alternative (<title> and aria-label) with its figures.
"""

from __future__ import annotations

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

register = template.Library()


def _polylines(values, width: float, height: float, top: float = 100.0, x0: float = 0.0, y0: float = 0.0):
    """Runs of consecutive known values as SVG point lists (a None breaks the line)."""
    n = len(values)
    if n == 0:
        return []
    step = width / max(1, n - 1)
    runs, current = [], []
    for i, v in enumerate(values):
        if v is None:
            if current:
                runs.append(current)
            current = []
            continue
        y = y0 + height - (max(0.0, min(top, float(v))) / top) * height
        current.append(f"{x0 + i * step:.1f},{y:.1f}")
    if current:
        runs.append(current)
    return [" ".join(r) for r in runs]


def _time_runs(points, first, last, step, w, h, left, top):
    span = max(1.0, (last - first).total_seconds())
    runs, current, previous = [], [], None
    for p in points:
        gap = previous is not None and step and (p.t - previous).total_seconds() > 1.5 * step
        if p.util is None or gap:
            if current:
                runs.append(current)
            current = []
        if p.util is not None:
            x = left + (p.t - first).total_seconds() / span * w
            y = top + h - max(0.0, min(100.0, p.util)) / 100 * h
            current.append(f"{x:.1f},{y:.1f}")
        previous = p.t
    if current:
        runs.append(current)
    return runs


@register.simple_tag
def sparkline(values, width=120, height=24, label="utilisation"):
    values = list(values or [])
    known = [v for v in values if v is not None]
    if not known:
        return format_html('<span class="muted sparkline-none" title="No readings yet">{}</span>', "no data")
    last = known[-1]
    text = f"{label}: now {last:.0f}%, peak {max(known):.0f}%, mean {sum(known) / len(known):.0f}%"
    lines = "".join(
        f'<polyline points="{p}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
        for p in _polylines(values, width - 2, height - 4, x0=1, y0=2)
    )
    return mark_safe(  # noqa: S308 - numbers are formatted, every string is escape()d
        f'<svg class="sparkline" role="img" aria-label="{escape(text)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(text)}</title>{lines}</svg>'
        f'<span class="sparkline-value">{last:.0f}%</span>'
    )


@register.simple_tag
def util_chart(
    points, width=720, height=180, label="GPU utilisation", threshold=None, start=None, end=None, step=None, empty=""
):
    """Utilisation (%) over time, with 0/50/100% gridlines, time labels at both ends and the idle threshold.

    Points sit at their time between ``start`` and ``end`` (default: the first and last point); where readings
    are missing for more than one and a half ``step`` the line breaks instead of bridging the gap, and a reading
    with no neighbour is a dot (a line through one point draws nothing). ``empty``: what to say without any."""
    points = list(points or [])
    known = [p.util for p in points if p.util is not None]
    if not known:
        return format_html(
            '<p class="muted chart-empty">{}</p>', empty or "No utilisation readings for this period yet."
        )
    left, bottom, right, top_pad = 36, 20, 8, 6
    w, h = width - left - right, height - bottom - top_pad
    parts = []
    for pct in (0, 50, 100):
        y = top_pad + h - pct / 100 * h
        parts.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')
    if threshold is not None:
        y = top_pad + h - float(threshold) / 100 * h
        parts.append(f'<line class="threshold" x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}"/>')
    first, last = (start or points[0].t), (end or points[-1].t)
    for run in _time_runs(points, first, last, step, w, h, left, top_pad):
        if len(run) > 1:
            parts.append(f'<polyline class="series" points="{" ".join(run)}"/>')
        else:
            x, y = run[0].split(",")
            parts.append(f'<circle class="series-dot" cx="{x}" cy="{y}" r="3"/>')
    fmt = "%H:%M" if (last - first).total_seconds() <= 36 * 3600 else "%b %d"
    parts.append(f'<text class="axis" x="{left}" y="{height - 4}">{first:{fmt}}</text>')
    parts.append(f'<text class="axis" x="{left + w}" y="{height - 4}" text-anchor="end">{last:{fmt}} UTC</text>')
    text = (
        f"{label} from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC: mean {sum(known) / len(known):.0f}%, "
        f"peak {max(known):.0f}%, latest {known[-1]:.0f}%"
    )
    return mark_safe(  # noqa: S308 - numbers are formatted, every string is escape()d
        f'<svg class="chart" role="img" aria-label="{escape(text)}" viewBox="0 0 {width} {height}" '
        f'preserveAspectRatio="none" width="100%" height="{height}"><title>{escape(text)}</title>{"".join(parts)}'
        "</svg>"
    )


@register.simple_tag
def bar_pairs(rows, width=720, height=180):
    """rows: dicts with day, allocated, used (GPU-hours). Allocated is the pale bar, used the dark one inside."""
    rows = list(rows or [])
    if not rows:
        return format_html('<p class="muted chart-empty">{}</p>', "No GPU time in this period.")
    peak = max(max(r["allocated"], r["used"]) for r in rows) or 1.0
    left, bottom, top_pad = 44, 20, 6
    w, h = width - left - 4, height - bottom - top_pad
    slot = w / len(rows)
    parts = [
        f'<line class="grid" x1="{left}" x2="{left + w}" y1="{top_pad + h}" y2="{top_pad + h}"/>',
        f'<text class="axis" x="{left - 4}" y="{top_pad + 8}" text-anchor="end">{peak:.0f} h</text>',
    ]
    for i, r in enumerate(rows):
        x = left + i * slot + slot * 0.15
        bw = slot * 0.7
        for cls, value, inset in (("allocated", r["allocated"], 0.0), ("used", r["used"], bw * 0.25)):
            bh = value / peak * h
            parts.append(
                f'<rect class="bar-{cls}" x="{x + inset:.1f}" y="{top_pad + h - bh:.1f}" width="{bw - 2 * inset:.1f}" '
                f'height="{bh:.1f}"><title>{escape(str(r["day"]))}: {cls} {value:.1f} GPU-h</title></rect>'
            )
    parts.append(f'<text class="axis" x="{left}" y="{height - 4}">{escape(str(rows[0]["day"]))}</text>')
    parts.append(
        f'<text class="axis" x="{left + w}" y="{height - 4}" text-anchor="end">{escape(str(rows[-1]["day"]))}</text>'
    )
    total_a = sum(r["allocated"] for r in rows)
    total_u = sum(r["used"] for r in rows)
    text = f"Allocated {total_a:.1f} GPU-hours, used {total_u:.1f} GPU-hours over {len(rows)} days"
    return mark_safe(  # noqa: S308 - numbers are formatted, every string is escape()d
        f'<svg class="chart bars" role="img" aria-label="{escape(text)}" viewBox="0 0 {width} {height}" '
        f'preserveAspectRatio="none" width="100%" height="{height}"><title>{escape(text)}</title>{"".join(parts)}'
        "</svg>"
    )
