"""The planner's charts, drawn as inline SVG on the server like the portal's other charts (telemetry's
templatetags/charts.py: same classes, gridlines, time labels at both ends and a text alternative).

``{% allocation_chart series %}``: a scenario's allocated GPUs over time (the solid line) under its capacity
(the dashed line), from the engine's series {"t", "allocated_gpus", "capacity_gpus", "waiting_jobs"}.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from vocab.durations import ROUGH, UNKNOWN, duration_text

register = template.Library()


def _points(ts, values, first, span, peak, w, h, left, top) -> str:
    out = []
    for t, v in zip(ts, values, strict=False):
        if v is None:
            continue
        x = left + (float(t) - first) / span * w
        y = top + h - max(0.0, float(v)) / peak * h
        out.append(f"{x:.1f},{y:.1f}")
    if len(out) == 1:
        out.append(out[0])
    return " ".join(out)


@register.simple_tag
def allocation_chart(series, label="Allocated GPUs", width=720, height=180):
    series = series or {}
    ts = list(series.get("t") or [])
    allocated = list(series.get("allocated_gpus") or [])
    capacity = list(series.get("capacity_gpus") or [])
    if not ts or not allocated:
        return format_html('<p class="muted chart-empty">{}</p>', "No allocation series for this scenario.")
    peak = max([*(v for v in allocated if v is not None), *(v for v in capacity if v is not None), 1.0])
    left, bottom, right, top_pad = 44, 20, 8, 6
    w, h = width - left - right, height - bottom - top_pad
    first, last = float(ts[0]), float(ts[-1])
    span = max(1.0, last - first)
    parts = []
    for fraction in (0.0, 0.5, 1.0):
        y = top_pad + h - fraction * h
        parts.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{fraction * peak:.0f}</text>'
        )
    frame = (first, span, peak, w, h, left, top_pad)
    if capacity:
        parts.append(f'<polyline class="threshold" fill="none" points="{_points(ts, capacity, *frame)}"/>')
    parts.append(f'<polyline class="series" points="{_points(ts, allocated, *frame)}"/>')
    start, end = datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(last, UTC)
    fmt = "%H:%M" if last - first <= 36 * 3600 else "%b %d"
    parts.append(f'<text class="axis" x="{left}" y="{height - 4}">{start:{fmt}}</text>')
    parts.append(f'<text class="axis" x="{left + w}" y="{height - 4}" text-anchor="end">{end:{fmt}} UTC</text>')
    known = [float(v) for v in allocated if v is not None]
    cap = [float(v) for v in capacity if v is not None]
    text = (
        f"{label} from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC: mean {sum(known) / len(known):.1f}, "
        f"peak {max(known):.1f}" + (f", of a capacity of {max(cap):.1f} GPUs" if cap else " GPUs")
    )
    return mark_safe(  # noqa: S308 - numbers are formatted, every string is escape()d
        f'<svg class="chart" role="img" aria-label="{escape(text)}" viewBox="0 0 {width} {height}" '
        f'preserveAspectRatio="none" width="100%" height="{height}"><title>{escape(text)}</title>{"".join(parts)}'
        "</svg>"
    )


@register.filter
def duration(seconds) -> str:
    """Seconds as people read a wait: 45 s, 12 min, 3.4 h (vocab.durations, ROUGH)."""
    return duration_text(None if seconds in (None, "") else float(seconds), ROUGH)


@register.filter
def signed_duration(seconds) -> str:
    if seconds in (None, ""):
        return UNKNOWN
    sign = "+" if float(seconds) >= 0 else "−"
    return sign + duration_text(abs(float(seconds)), ROUGH)


@register.filter
def percent(fraction) -> str:
    if fraction in (None, ""):
        return "—"
    value = 100 * float(fraction)
    return f"{value:.1f}%" if 0 < abs(value) < 10 else f"{value:.0f}%"


@register.filter
def points(difference) -> str:
    """A difference of two fractions in percentage points, signed: +2.5 pts."""
    if difference in (None, ""):
        return "—"
    value = 100 * float(difference)
    return f"{'+' if value >= 0 else '−'}{abs(value):.1f} pts"


@register.filter
def lookup(mapping, key):
    return (mapping or {}).get(key)


def _layout(layout) -> str:
    if not layout:
        return "MIG off"
    return " + ".join(f"{count}×{profile}" for profile, count in layout.items() if count)


def _nodes(names) -> str:
    names = list(names or [])
    return names[0] if len(names) == 1 else f"{len(names)} nodes"


@register.filter
def change_summary(change) -> str:
    """A proposal's change in a few words, as the scenarios table shows it."""
    change = change or {}
    kind = change.get("type")
    if kind == "mig":
        if change.get("preset"):
            return f"MIG {change['preset']} on {_nodes(change.get('nodes'))}"
        layouts = list(change.get("per_gpu") or [])
        distinct = list(dict.fromkeys(_layout(layout) for layout in layouts))
        return f"MIG on {_nodes(change.get('nodes'))}: " + "; ".join(distinct)
    if kind == "time_slicing":
        return f"time-slicing ×{change.get('replicas')} on {_nodes(change.get('nodes'))}"
    if kind == "quota":
        return (
            f"quota of team #{change.get('team')} for class #{change.get('class_id')}: "
            f"{change.get('guaranteed')} guaranteed, limit {change.get('limit')}"
        )
    if kind == "add_nodes":
        return f"{change.get('count')} more node(s) like {change.get('like')}"
    if kind == "remove_nodes":
        return f"remove {_nodes(change.get('nodes'))}"
    return str(kind)
