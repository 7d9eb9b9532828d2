"""When a notebook is warned and stopped: the rule, as plain functions over plain data (no ORM), so every edge
can be tested on its own. jobs.notebook.sessions gathers the evidence and acts on the decision.

The rule (docs/user-guide.md, "Notebook limits") for a session that is running:

- Maximum age: the session expires ``ttl`` after it started running (an "Extend" moves this, never past the
  team's maximum). The owner is warned once ``lead`` before; the session is stopped by the first culling run at
  or after the expiry. If no warning was recorded by then (the culler was down) it is recorded and sent in that
  same run: the warning was due, and the maximum age is a hard limit.
- Idle: the last activity is the latest of: the session's start, its latest extension, the newest GPU reading
  at or above the utilisation threshold, and — when the server answers /api/kernels — ``now`` if any kernel's
  ``execution_state`` is not ``idle``, else the newest kernel ``last_activity`` — and the server's own ``activity``
  time where its kind has one (code-server's heartbeat, RStudio's latest request through the portal's sign-in;
  jobs.notebook.workspaces), never later than ``now``. The idle deadline is last activity
  plus the idle timeout. Without GPU readings covering the span (the newest at most ``slack`` old and the oldest
  at most ``slack`` after the later of the start and ``now - idle timeout``) idleness is unknown, and nothing is
  warned or stopped for it: no data is not evidence of waste. The owner is warned once the deadline is ``lead``
  away; the session is stopped when the deadline has passed *and* the warning is at least ``lead`` old, so a late
  warning still gives the full notice. Activity that moves the deadline more than ``lead`` away withdraws the
  warning (a later idle spell is warned again).
- When both limits fall due in one run, the maximum age wins (it is the reason recorded).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

TTL = "ttl"
IDLE = "idle"


@dataclass(frozen=True)
class Evidence:
    running_since: datetime
    extended_at: datetime | None
    idle_timeout: timedelta
    #: Oldest and newest GPU reading of the session, and the newest at or above the threshold.
    gpu_oldest: datetime | None
    gpu_newest: datetime | None
    gpu_last_busy: datetime | None
    #: /api/kernels as [{"execution_state", "last_activity"}], or None when the server could not be asked.
    kernels: list[dict] | None
    #: The latest use the server itself reports (code-server's /healthz heartbeat, RStudio's latest request), or
    #: None when its kind has none or it could not be asked.
    activity: datetime | None = None


def parse_time(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def kernel_activity(kernels: Iterable[dict], now: datetime) -> datetime | None:
    """Kubeflow's culler rule: a kernel in any state but "idle" (busy, starting …) is activity now; otherwise the
    newest ``last_activity``. None for no kernels."""
    latest = None
    for kernel in kernels:
        if kernel.get("execution_state") != "idle":
            return now
        at = parse_time(kernel.get("last_activity"))
        if at is not None and (latest is None or at > latest):
            latest = at
    return min(latest, now) if latest is not None else None


def last_activity(ev: Evidence, now: datetime, slack: timedelta) -> datetime | None:
    """The latest activity of the session, or None when the GPU readings do not cover the span (unknown)."""
    span_start = max(ev.running_since, now - ev.idle_timeout)
    if ev.gpu_newest is None or ev.gpu_oldest is None:
        return None
    if ev.gpu_newest < now - slack or ev.gpu_oldest > span_start + slack:
        return None
    candidates = [ev.running_since]
    if ev.extended_at is not None:
        candidates.append(ev.extended_at)
    if ev.gpu_last_busy is not None:
        candidates.append(ev.gpu_last_busy)
    if ev.kernels is not None:
        seen = kernel_activity(ev.kernels, now)
        if seen is not None:
            candidates.append(seen)
    if ev.activity is not None:
        candidates.append(min(ev.activity, now))
    return max(candidates)


@dataclass
class Decision:
    warn: list[str] = field(default_factory=list)
    stop: str | None = None
    withdraw_idle_warning: bool = False


def decide(
    now: datetime,
    lead: timedelta,
    expires_at: datetime | None,
    idle_deadline: datetime | None,
    ttl_warned_at: datetime | None,
    idle_warned_at: datetime | None,
) -> Decision:
    decision = Decision()
    if expires_at is not None:
        if now >= expires_at - lead and ttl_warned_at is None:
            decision.warn.append(TTL)
        if now >= expires_at:
            decision.stop = TTL
    if idle_deadline is None or now < idle_deadline - lead:
        decision.withdraw_idle_warning = idle_warned_at is not None
    else:
        if idle_warned_at is None:
            decision.warn.append(IDLE)
        elif decision.stop is None and now >= idle_deadline and now >= idle_warned_at + lead:
            decision.stop = IDLE
    return decision
