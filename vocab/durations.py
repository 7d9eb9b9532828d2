"""Durations in words: one function for every page, message and chart, in one of three styles.

- ``EXACT`` (the default): whole units down to the minute, and the seconds below an hour, for a time a person
  reads as a fact: a job's maximum runtime, how long a job waited ("1 d 2 h", "1 h 30 min", "1 min 30 s", "0 s").
- ``ROUGH``: one unit, rounded, for figures compared side by side (the planner's waits: "45 s", "12 min", "3.4 h").
- ``WORDS``: hours or minutes spelled out, for limits a person sets in a sentence (a notebook's session length:
  "1 hour", "1.5 hours", "10 minutes").

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

EXACT, ROUGH, WORDS = "exact", "rough", "words"
#: What a duration that is not known reads as.
UNKNOWN = "—"


def duration_text(seconds: float | None, style: str = EXACT) -> str:
    """``seconds`` in words, in ``style`` (EXACT, ROUGH or WORDS); UNKNOWN for None."""
    if seconds is None:
        return UNKNOWN
    if style == ROUGH:
        if seconds < 90:
            return f"{seconds:.0f} s"
        if seconds < 5400:
            return f"{seconds / 60:.0f} min"
        return f"{seconds / 3600:.1f} h"
    if style == WORDS:
        hours = seconds / 3600
        return f"{hours:g} hour{'s' if hours != 1 else ''}" if seconds >= 3600 else f"{int(seconds) // 60} minutes"
    if style != EXACT:
        raise ValueError(f"no duration style {style!r}")
    days, rest = divmod(max(0, int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min")]
    if not days and not hours:
        parts.append((secs, "s"))
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 s"
