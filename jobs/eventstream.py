"""Waiting without polling: a long-poll on one job, and server-sent event streams of a job's or a team's
timeline (JobEvent rows). The API's views call these; the client's ``wait()``, ``events()`` and
``team_events()`` use them.

The rules:

- Neither holds a database connection while it sleeps: the connection is closed before each pause (outside a
  transaction; a test's transaction keeps it), and the database is read again every PORTAL_WAIT_POLL_SECONDS.
  What a waiting request does hold is one web worker thread (gunicorn's gthread slots), for at most
  PORTAL_WAIT_MAX_SECONDS (long-poll) or PORTAL_EVENT_STREAM_SECONDS (a stream): docs/operator-guide.md says
  what that costs.
- The long-poll answers as soon as the job's state differs from ``state``, or a timeline event newer than
  ``after_event`` exists, or the job has ended (nothing more will change); asked for neither, as soon as the job
  has ended. Otherwise it answers at the timeout with the job unchanged (``timed_out``).
- A stream's events carry ``id:`` = the JobEvent's id, ``event:`` = its kind, ``data:`` = JSON (id, job,
  job_name, state, cluster, estimated_start, kind, message, at, data; ``cluster``: the name of the cluster the job
  was placed on, null before that; ``estimated_start``: while the job is queued, its start-time estimate in words
  as the stream read the event, else null). ``Last-Event-ID`` (or ``?after=``) resumes after that event. A job's
  stream starts with its whole timeline and ends with an ``end`` event once the job has ended; a team's starts
  with a ``ready`` event whose id is the newest event now (so a reconnect misses nothing) and then only new
  events. A comment line (``: keep-alive``) goes out every PORTAL_EVENT_HEARTBEAT_SECONDS so proxies keep the
  connection; every stream ends after PORTAL_EVENT_STREAM_SECONDS and the client reconnects.

A process serving many streams reads the timeline once for all of them (``RECENT``): at most once every
PORTAL_WAIT_POLL_SECONDS it reads the events written since its last read and renders each once; a stream sends
those of its job or team from there, and reads the database itself only the first time round, when the process
cannot tell (the stream resumes from before what the process has read), to see whether its job has ended after
sending some of its events, and at its keep-alive. 200 streams of one team in one process cost one read a second
and one rendering an event, instead of 200 of each.

``sleep`` and ``monotonic`` are this module's names for the clock, so a test can act while a request waits.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from time import monotonic, sleep

from django.conf import settings
from django.db import connection
from django.db.models import Max, QuerySet
from django.http import StreamingHttpResponse

from jobs.choices import TERMINAL_STATES
from jobs.models import Job, JobEvent

__all__ = ["job_stream", "monotonic", "sleep", "team_stream", "wait_for_job"]

#: How long the browser waits before it reconnects an ended stream (ms).
RECONNECT_MS = 1000
#: The most events one read sends (a long timeline goes out over several reads).
BATCH = 500

_open_lock = threading.Lock()
_open = 0


def open_streams() -> int:
    """How many event streams this process is serving now (a test waits for its live server's to end before the
    database is emptied under them)."""
    return _open


def _counted(stream: Iterator[bytes]) -> Iterator[bytes]:
    global _open
    with _open_lock:
        _open += 1
    try:
        yield from stream
    finally:
        with _open_lock:
            _open -= 1


class RecentEvents:
    """The timeline events written since this process first looked, each with its job, its team and its
    server-sent event as a stream sends it, read for every stream of the process at most once every
    PORTAL_WAIT_POLL_SECONDS (the first read takes only the newest id). It keeps the last KEEP; a stream resuming
    from before them reads its own events as before."""

    KEEP = 5_000
    #: The most events one read takes; past it, the rest are left to the streams' own reads (``floor`` moves up).
    READ = BATCH

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: deque[tuple[int, int, int, bytes]] = deque()
        self.floor: int | None = None  # events above it are all in ``rows`` (None: not read yet)
        self.read_at: float | None = None

    def since(self, after: int, matches: Callable[[tuple[int, int, int, bytes]], bool]
              ) -> tuple[int, list[tuple[int, bytes]]] | None:  # fmt: skip
        """(the newest event id read, the (id, server-sent event) of each read event newer than ``after`` that
        ``matches`` its (id, job, team, event) row, oldest first), or None when this process cannot tell."""
        self._refresh()
        with self.lock:
            if self.floor is None or after < self.floor:
                return None
            newest = self.rows[-1][0] if self.rows else self.floor
            mine = []
            for row in reversed(self.rows):
                if row[0] <= after:
                    break
                if matches(row):
                    mine.append((row[0], row[3]))
            return max(newest, after), mine[::-1]

    def _refresh(self) -> None:
        interval = settings.PORTAL_WAIT_POLL_SECONDS
        with self.lock:
            now = monotonic()
            if self.read_at is not None and now - self.read_at < interval:
                return
            if self.floor is None:
                self.floor = JobEvent.objects.aggregate(newest=Max("pk"))["newest"] or 0
            else:
                upto = self.rows[-1][0] if self.rows else self.floor
                new = list(
                    JobEvent.objects.filter(pk__gt=upto).select_related("job__cluster").order_by("pk")[: self.READ]
                )
                if len(new) == self.READ:  # more than one read takes: what it left out is below the floor
                    self.rows.clear()
                    self.floor = new[-1].pk
                elif new:
                    self.rows.extend((event.pk, event.job_id, event.job.team_id, rendered(event)) for event in new)
                elif (newest := JobEvent.objects.aggregate(newest=Max("pk"))["newest"] or 0) < upto:
                    self.rows.clear()  # ids went back (a restored or emptied database): start from the newest again
                    self.floor = newest
                while len(self.rows) > self.KEEP:
                    self.floor = self.rows.popleft()[0]
            self.read_at = now

    def newest(self) -> int:
        """The newest event id this process has read (reading first if it is due)."""
        self._refresh()
        with self.lock:
            return self.rows[-1][0] if self.rows else (self.floor or 0)

    def forget(self) -> None:
        """Start again from nothing read (a test's database was rolled back under it)."""
        with self.lock:
            self.rows.clear()
            self.floor = self.read_at = None


#: This process's view of the newest timeline events, shared by its streams.
RECENT = RecentEvents()


def _release_connection() -> None:
    """Give the database connection back before a pause (not inside a transaction, which a test holds)."""
    if not connection.in_atomic_block:
        connection.close()


def _pause(seconds: float) -> None:
    _release_connection()
    sleep(seconds)  # the module's global, looked up now: a test may have replaced it


def wait_for_job(read: Callable[[], Job], *, state: str | None, after_event: int | None, timeout: float,
                 first: Job | None = None) -> tuple[Job, bool]:  # fmt: skip
    """(the job, timed_out): read the job with ``read()`` until it differs from what the caller knows (see the
    module's rules) or ``timeout`` seconds have passed. ``first``: the job as the caller just read it (with
    ``read``), looked at before the first read."""
    interval = settings.PORTAL_WAIT_POLL_SECONDS
    deadline = monotonic() + timeout
    while True:
        job, first = first or read(), None
        if _moved(job, state, after_event):
            return job, False
        left = deadline - monotonic()
        if left <= 0:
            return job, True
        _pause(min(interval, left))


def _moved(job: Job, state: str | None, after_event: int | None) -> bool:
    if job.state in TERMINAL_STATES:
        return True
    if state is not None and job.state != state:
        return True
    if after_event is None:
        return False
    # The API's read brings the newest event's id (jobs.api.answer_read); another reader asks the database.
    newest = getattr(job, "newest_event", _UNREAD)
    if newest is not _UNREAD:
        return newest is not None and newest > after_event
    return JobEvent.objects.filter(job_id=job.pk, pk__gt=after_event).exists()


_UNREAD = object()


# -- server-sent events ---------------------------------------------------------------------------------------


def sse(data: str, *, event: str = "", ident: int | None = None) -> bytes:
    """One server-sent event (a multi-line ``data`` becomes several ``data:`` lines)."""
    head = (f"event: {event}\n" if event else "") + (f"id: {ident}\n" if ident is not None else "")
    body = "".join(f"data: {part}\n" for part in data.replace("\r", "").split("\n"))
    return (head + body + "\n").encode()


def event_data(event: JobEvent) -> dict:
    """The JSON an event's ``data:`` carries (``state``: the job's state when the stream read the event)."""
    return {
        "id": event.pk,
        "job": event.job_id,
        "job_name": event.job.name,
        "state": event.job.state,
        "cluster": event.job.cluster.name if event.job.cluster_id is not None else None,
        # While the job is queued: its start-time estimate in words when the stream read the event, else null.
        "estimated_start": event.job.estimated_start or None,
        "kind": event.kind,
        "message": event.message,
        "at": event.at.isoformat(),
        "data": event.data,
    }


def rendered(event: JobEvent) -> bytes:
    """An event as a stream sends it."""
    return sse(json.dumps(event_data(event)), event=event.kind, ident=event.pk)


def _response(stream: Iterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx and the like: pass each event on at once
    return response


def job_stream(job: Job, last_id: int | None) -> StreamingHttpResponse:
    """A job's timeline from the start (or after ``last_id``), then each new event, ending with ``end`` once the
    job has ended and every event is out."""
    events = JobEvent.objects.filter(job_id=job.pk)

    def finished() -> bool:
        return Job.objects.filter(pk=job.pk, state__in=TERMINAL_STATES).exists()

    _release_connection()
    stream = _events(events, last_id or 0, finished, concerns=lambda row: row[1] == job.pk)
    return _response(_counted(stream))


def team_stream(team, last_id: int | None) -> StreamingHttpResponse:
    """Every new timeline event of the team's jobs (after ``last_id`` when given), for a bounded time."""
    events = JobEvent.objects.filter(job__team=team)
    start = last_id
    if start is None:
        start = events.aggregate(newest=Max("pk"))["newest"] or 0
    _release_connection()
    stream = _events(events, start, None, ready=last_id is None, concerns=lambda row: row[2] == team.pk)
    return _response(_counted(stream))


def _events(events: QuerySet, after: int, finished: Callable[[], bool] | None, *, ready: bool = False,
            concerns: Callable[[tuple], bool]) -> Iterator[bytes]:  # fmt: skip
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    if ready:
        yield sse(json.dumps({"last_event": after}), event="ready", ident=after)
    interval = settings.PORTAL_WAIT_POLL_SECONDS
    heartbeat = settings.PORTAL_EVENT_HEARTBEAT_SECONDS
    deadline = monotonic() + settings.PORTAL_EVENT_STREAM_SECONDS
    quiet_since = monotonic()
    look = True  # the first time round, after a full batch and at each keep-alive: whatever RECENT says
    known = after  # no event of this stream's between ``after`` and this (RECENT read them all)
    while True:
        read = None if look else RECENT.since(max(after, known), concerns)
        if read is not None:
            known, mine = read
            if mine:
                # One write for what the read brought, not one an event: with many streams the writes (and the
                # proxy's copies of them) are the cost, not the bytes.
                yield b"".join(event for _, event in mine)
                after = mine[-1][0]
                quiet_since = monotonic()
                # A job's stream reads once itself whether its job has ended (and what came with the end).
                look = finished is not None
            now = monotonic()
            if now >= deadline:
                return
            if now - quiet_since >= heartbeat:
                look = True  # ... and the keep-alive after this look
                continue
            _pause(min(interval, deadline - now))
            continue
        look = False
        # Every event of this stream's up to what the process had read by now is in the read below.
        seen = RECENT.newest()
        # Whether the job had ended is read before its events: an event written as it ends is still sent.
        ended = finished is not None and finished()
        batch = list(events.filter(pk__gt=after).select_related("job__cluster").order_by("pk")[:BATCH])
        if len(batch) < BATCH:
            known = max(known, seen)
        if batch:
            yield b"".join(rendered(event) for event in batch)
            after = batch[-1].pk
            quiet_since = monotonic()
            if len(batch) == BATCH:
                look = True
                continue
        if ended:
            yield sse(json.dumps({"last_event": after}), event="end")
            return
        now = monotonic()
        if now >= deadline:
            return
        if now - quiet_since >= heartbeat:
            yield b": keep-alive\n\n"
            quiet_since = now
        _pause(min(interval, deadline - now))
