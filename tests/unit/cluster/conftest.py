"""Fixtures of the simulated cluster's own tests (no Django)."""

import pytest

from tests.clock import FakeClock


@pytest.fixture
def clock(request) -> FakeClock:
    """The cluster's clock in epoch seconds (tests/clock.py), at T0 unless the test is marked
    ``@pytest.mark.clock(now=...)``; it moves only when a test advances it."""
    marker = request.node.get_closest_marker("clock")
    return FakeClock(**(marker.kwargs if marker else {}))
