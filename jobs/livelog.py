"""A job's log over HTTP: downloaded whole (kept or live) and followed live as server-sent events.

Both the job page and the API use these. The rules:

- Which log: ``?pod=`` names one of the job's pods (a kept log of an earlier attempt, or a rank of a distributed
  job), ``?rank=`` a rank of a distributed job (``requested_pod``); never any other pod. By default the current
  pod's, kept if it was kept, else read from the cluster; a job without either answers 404 saying why.
- Following holds no database connection (it is closed before the stream starts) and lasts at most
  ``PORTAL_LOG_FOLLOW_SECONDS``; then the stream ends and the browser's EventSource reconnects by itself, sending
  ``Last-Event-ID`` (each line's id is its line number), so the next stream goes on where this one stopped.
  When the container has ended (or the log is a kept one) the last event is ``end``: the client stops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse, StreamingHttpResponse

from cluster import ClusterBackend
from cluster.base import ClusterError, NotFound
from gpus.fleet import backend_of_id
from jobs import logkeeping
from jobs.distributed.ranks import pod_of_rank, rank_pods
from jobs.models import Job, JobLog

#: How long the browser waits before it reconnects a stream that ended without an ``end`` event (ms).
RECONNECT_MS = 1000
#: A stream that stops this much before its deadline stopped because the container ended, not the clock.
_EARLY = 0.5


def _pick(job: Job, pod: str | None) -> tuple[JobLog | None, str]:
    """(the kept log to serve, or None to read the cluster's) and the pod's name; Http404 saying why if neither.
    ``pod`` may name only one of the job's own pods: its current one, one with a kept log, or a rank's."""
    kept = list(job.logs.all())
    if pod:
        chosen = next((entry for entry in kept if entry.pod_name == pod), None)
        if chosen is None and pod != job.pod_name and pod not in rank_pods(job):
            raise Http404(f"Job #{job.pk} has no log of a pod called {pod}.")
        return chosen, pod
    view = logkeeping.log_view(job, kept)
    if view.kept is not None:
        return view.kept, view.kept.pod_name
    if view.live:
        return None, job.pod_name
    raise Http404(view.note)


def requested_pod(job: Job, params) -> str | None:
    """The pod a log request names with ``pod`` or ``rank`` (query parameters), or None for the default."""
    if params.get("rank") not in (None, ""):
        return pod_of_rank(job, params["rank"])
    return params.get("pod") or None


def _filename(job: Job, pod: str) -> str:
    return f"job-{job.pk}-{pod}.log"


def download(job: Job, pod: str | None = None) -> HttpResponse | StreamingHttpResponse:
    """The whole log as a text/plain attachment: a kept one (its first line says what was cut, if anything), or
    the live pod's, streamed from the cluster as it is read."""
    kept, pod_name = _pick(job, pod)
    if kept is not None:
        head = "".join(f"# {line}\n" for line in (kept.cut_notice, kept.note) if line)
        response: HttpResponse | StreamingHttpResponse = HttpResponse(
            head + kept.text, content_type="text/plain; charset=utf-8"
        )
    else:
        namespace = job.team.namespace
        try:
            lines = backend_of_id(job.cluster_id).stream_pod_log(namespace, pod_name, follow=False)
            first = next(lines, "")
        except NotFound:
            raise Http404(f"The pod {pod_name} is gone and its log was not kept.") from None
        except ClusterError as error:
            raise Http404(f"No log from pod {pod_name} now: {error}") from None
        response = StreamingHttpResponse(_encoded(first, lines), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(job, pod_name)}"'
    return response


def _encoded(first: str, rest: Iterator[str]) -> Iterator[bytes]:
    yield first.encode()
    try:
        for line in rest:
            yield line.encode()
    except ClusterError as error:
        yield f"\n# The log stream broke off: {error}\n".encode()


def _event(data: str, *, event: str = "", ident: int | None = None) -> bytes:
    head = (f"event: {event}\n" if event else "") + (f"id: {ident}\n" if ident is not None else "")
    body = "".join(f"data: {part}\n" for part in data.replace("\r", "").split("\n"))
    return (head + body + "\n").encode()


def follow(job: Job, *, tail: int, last_id: int | None, pod: str | None = None) -> StreamingHttpResponse:
    """Server-sent events: the last ``tail`` lines (or the lines after ``last_id``), then each new line while the
    pod runs, for at most PORTAL_LOG_FOLLOW_SECONDS. Events: a line (``id`` = its line number), ``waiting`` (the
    container cannot give a log yet; the client retries), ``end`` (no more will come; the data says why)."""
    kept, pod_name = _pick(job, pod)
    namespace = job.team.namespace
    seconds = settings.PORTAL_LOG_FOLLOW_SECONDS
    if not connection.in_atomic_block:
        connection.close()  # the stream may last a while: it must not hold a database connection meanwhile
    if kept is not None:
        stream = _kept_events(kept, tail, last_id)
    else:
        stream = _live_events(backend_of_id(job.cluster_id), namespace, pod_name, tail, last_id, seconds)
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx and the like: pass each event on at once
    return response


def _kept_events(kept: JobLog, tail: int, last_id: int | None) -> Iterator[bytes]:
    lines = kept.text.splitlines()
    start = last_id + 1 if last_id is not None else max(0, len(lines) - tail)
    for index in range(start, len(lines)):
        yield _event(lines[index], ident=index)
    yield _event("The container has ended; this is its kept log.", event="end")


def _live_events(
    backend: ClusterBackend, namespace: str, pod: str, tail: int, last_id: int | None, seconds: float
) -> Iterator[bytes]:
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    deadline = time.monotonic() + seconds
    try:
        if last_id is not None:
            start = last_id + 1
        else:
            written = sum(1 for _ in backend.stream_pod_log(namespace, pod, follow=False))
            start = max(0, written - tail)
        index = 0
        for line in backend.stream_pod_log(namespace, pod, follow=True, timeout_seconds=seconds):
            if index >= start:
                yield _event(line.rstrip("\n"), ident=index)
            index += 1
    except NotFound:
        yield _event(f"The pod {pod} is gone; its log is kept on the job page once the portal has read it.",
                     event="end")  # fmt: skip
        return
    except ClusterError as error:
        yield _event(f"No log yet: {error}", event="waiting")
        return
    if time.monotonic() < deadline - _EARLY:
        yield _event("The container has ended.", event="end")
