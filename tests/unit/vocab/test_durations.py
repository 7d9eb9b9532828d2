"""One function formats every duration (vocab.durations), in the style each reader needs: exact for a job's
runtime and wait, rough for the planner's compared waits, spelled-out words for a notebook's limits."""

from __future__ import annotations

import pytest

from vocab.durations import EXACT, ROUGH, UNKNOWN, WORDS, duration_text


@pytest.mark.parametrize(
    ("seconds", "style", "text"),
    [
        # The job pages (max runtime, "Waited" in the wait detail) and the no-log note of logkeeping.
        (60, EXACT, "1 min"),
        (90, EXACT, "1 min 30 s"),
        (300, EXACT, "5 min"),
        (45.7, EXACT, "45 s"),
        (3600, EXACT, "1 h"),
        (5400, EXACT, "1 h 30 min"),
        (3661, EXACT, "1 h 1 min"),
        (90000, EXACT, "1 d 1 h"),
        (0, EXACT, "0 s"),
        (-5, EXACT, "0 s"),
        (None, EXACT, UNKNOWN),
        # The planner's waits and fidelity (one unit, rounded).
        (45, ROUGH, "45 s"),
        (89.4, ROUGH, "89 s"),
        (90, ROUGH, "2 min"),
        (720, ROUGH, "12 min"),
        (5400, ROUGH, "1.5 h"),
        (12240, ROUGH, "3.4 h"),
        (None, ROUGH, UNKNOWN),
        # A notebook's session length and idle timeout, and the team policy page.
        (3600, WORDS, "1 hour"),
        (5400, WORDS, "1.5 hours"),
        (28800, WORDS, "8 hours"),
        (600, WORDS, "10 minutes"),
        (2700, WORDS, "45 minutes"),
    ],
)
def test_a_duration_in_each_style(seconds, style, text):
    assert duration_text(seconds, style) == text


def test_an_unknown_style_is_refused():
    with pytest.raises(ValueError, match="no duration style"):
        duration_text(60, "compact")
