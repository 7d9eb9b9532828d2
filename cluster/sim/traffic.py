"""The simulated request load on a service: a deterministic day curve on the simulated clock.

Not a component: pure functions the HPA controller (the metrics it reads, as a metrics server and a custom or
external metrics adapter would serve them) and nothing else uses. The rule:

* A service's total request rate is ``peak × shape(hour)``: ``shape`` is 1 at the peak hour (15:00 by default, an
  afternoon peak) and ``trough`` twelve hours away (03:00, the night), a raised cosine between them, so the rate
  rises through the morning and falls through the evening. The hour is the clock's UTC hour plus the scenario's
  ``traffic.utc_offset_hours``.
* ``peak`` is the Deployment's ``sim.gpu-portal.io/peak-requests-per-second`` annotation, else the scenario's
  ``traffic.peak_requests_per_second`` (default 40); ``trough`` is the scenario's ``traffic.trough_fraction``
  (default 0.05) and the peak hour ``traffic.peak_hour``.
* The load is spread evenly over the pods that serve it. A replica's CPU is fully used (100 % of its request) at
  ``sim.gpu-portal.io/requests-per-replica`` requests per second (default 10), so CPU utilisation follows the
  per-replica rate.
* Custom metrics named by the user come from the same curve: a Pods metric is the per-pod request rate, an
  External metric the service's total. So "requests_per_second" and "queue_depth" alike rise in the afternoon
  and fall at night.
"""

from __future__ import annotations

import math
from typing import Any

PEAK_ANNOTATION = "sim.gpu-portal.io/peak-requests-per-second"
CAPACITY_ANNOTATION = "sim.gpu-portal.io/requests-per-replica"
DEFAULT_PEAK = 40.0
DEFAULT_TROUGH_FRACTION = 0.05
DEFAULT_PEAK_HOUR = 15.0
DEFAULT_REQUESTS_PER_REPLICA = 10.0
#: CPU a replica uses with no traffic at all (per cent of its request): the server's own housekeeping.
IDLE_UTILISATION = 2.0


def _number(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) and number >= 0 else default


def shape(hour: float, trough: float = DEFAULT_TROUGH_FRACTION, peak_hour: float = DEFAULT_PEAK_HOUR) -> float:
    """The fraction of the peak rate at ``hour`` (0-24): 1 at ``peak_hour``, ``trough`` twelve hours away."""
    phase = 2 * math.pi * ((hour - peak_hour) % 24) / 24
    return trough + (1 - trough) * (1 + math.cos(phase)) / 2


def hour_of_day(now: float, settings: dict[str, Any]) -> float:
    try:
        offset = float(settings.get("utc_offset_hours") or 0.0)
    except (TypeError, ValueError):
        offset = 0.0
    return ((now / 3600.0) + offset) % 24


def request_rate(now: float, annotations: dict[str, str] | None, settings: dict[str, Any] | None) -> float:
    """The service's total requests per second at ``now`` (its Deployment's ``annotations``; the scenario's
    ``traffic:`` ``settings``)."""
    settings = settings or {}
    default_peak = _number(settings.get("peak_requests_per_second"), DEFAULT_PEAK)
    peak = _number((annotations or {}).get(PEAK_ANNOTATION), default_peak)
    trough = min(1.0, _number(settings.get("trough_fraction"), DEFAULT_TROUGH_FRACTION))
    peak_hour = _number(settings.get("peak_hour"), DEFAULT_PEAK_HOUR) % 24
    return peak * shape(hour_of_day(now, settings), trough, peak_hour)


def replica_capacity(annotations: dict[str, str] | None) -> float:
    """Requests per second one replica serves at 100 % of its CPU request."""
    capacity = _number((annotations or {}).get(CAPACITY_ANNOTATION), DEFAULT_REQUESTS_PER_REPLICA)
    return capacity or DEFAULT_REQUESTS_PER_REPLICA


def cpu_utilisation(rate: float, pods: int, annotations: dict[str, str] | None) -> float:
    """Average CPU utilisation of ``pods`` replicas sharing ``rate`` (per cent of the CPU request)."""
    if pods <= 0:
        return 0.0
    return IDLE_UTILISATION + 100.0 * (rate / pods) / replica_capacity(annotations)
