"""HTTP to the portal over the standard library: JSON requests, text downloads and server-sent event streams.

Every call names an ``Endpoint`` from ``ENDPOINTS``; a test checks that each exists, with its method, in the
portal's OpenAPI schema, so the client cannot drift from the API unnoticed."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import __version__
from .errors import ConnectionFailed, error_for

Params = Mapping[str, Any] | None


@dataclass(frozen=True)
class Endpoint:
    method: str
    #: As the OpenAPI schema writes it: /api/v1/jobs/{id}/cancel/
    path: str

    def format(self, **values: Any) -> str:
        return self.path.format(**{k: urllib.parse.quote(str(v), safe="") for k, v in values.items()})


ME = Endpoint("GET", "/api/v1/me/")
JOBS_LIST = Endpoint("GET", "/api/v1/jobs/")
JOBS_CREATE = Endpoint("POST", "/api/v1/jobs/")
JOB_GET = Endpoint("GET", "/api/v1/jobs/{id}/")
JOB_CANCEL = Endpoint("POST", "/api/v1/jobs/{id}/cancel/")
JOB_RESUBMIT = Endpoint("POST", "/api/v1/jobs/{id}/resubmit/")
JOB_CHECKPOINT = Endpoint("POST", "/api/v1/jobs/{id}/checkpoint/")
JOB_EVENTS = Endpoint("GET", "/api/v1/jobs/{id}/events/")
JOB_EVENTS_STREAM = Endpoint("GET", "/api/v1/jobs/{id}/events/stream/")
JOB_WAIT = Endpoint("GET", "/api/v1/jobs/{id}/wait/")
TEAM_EVENTS_STREAM = Endpoint("GET", "/api/v1/teams/{slug}/events/stream/")
JOB_LOGS = Endpoint("GET", "/api/v1/jobs/{id}/logs/")
JOB_LOGS_DOWNLOAD = Endpoint("GET", "/api/v1/jobs/{id}/logs/download/")
JOB_LOGS_STREAM = Endpoint("GET", "/api/v1/jobs/{id}/logs/stream/")
ARRAYS_CREATE = Endpoint("POST", "/api/v1/job-arrays/")
ARRAY_GET = Endpoint("GET", "/api/v1/job-arrays/{id}/")
ARRAY_CANCEL = Endpoint("POST", "/api/v1/job-arrays/{id}/cancel/")
NOTEBOOKS_LIST = Endpoint("GET", "/api/v1/notebooks/")
NOTEBOOKS_CREATE = Endpoint("POST", "/api/v1/notebooks/")
NOTEBOOK_GET = Endpoint("GET", "/api/v1/notebooks/{id}/")
NOTEBOOK_START = Endpoint("POST", "/api/v1/notebooks/{id}/start/")
NOTEBOOK_STOP = Endpoint("POST", "/api/v1/notebooks/{id}/stop/")
NOTEBOOK_EXTEND = Endpoint("POST", "/api/v1/notebooks/{id}/extend/")
SERVICES_LIST = Endpoint("GET", "/api/v1/services/")
SERVICES_CREATE = Endpoint("POST", "/api/v1/services/")
SERVICE_GET = Endpoint("GET", "/api/v1/services/{id}/")
SERVICE_UPDATE = Endpoint("PATCH", "/api/v1/services/{id}/")
SERVICE_DELETE = Endpoint("DELETE", "/api/v1/services/{id}/")
SERVICE_SCALE = Endpoint("POST", "/api/v1/services/{id}/scale/")
SERVICE_PAUSE = Endpoint("POST", "/api/v1/services/{id}/pause/")
SERVICE_RESUME = Endpoint("POST", "/api/v1/services/{id}/resume/")
SERVICE_ROLLBACK = Endpoint("POST", "/api/v1/services/{id}/rollback/")
PLANS_LIST = Endpoint("GET", "/api/v1/planner/runs/")
PLANS_CREATE = Endpoint("POST", "/api/v1/planner/runs/")
PLAN_GET = Endpoint("GET", "/api/v1/planner/runs/{id}/")
PLAN_CANCEL = Endpoint("POST", "/api/v1/planner/runs/{id}/cancel/")
PLAN_CSV = Endpoint("GET", "/api/v1/planner/runs/{id}/results.csv")
CLUSTERS_LIST = Endpoint("GET", "/api/v1/clusters/")
CLASSES_LIST = Endpoint("GET", "/api/v1/resource-classes/")
NODES_LIST = Endpoint("GET", "/api/v1/nodes/")
GPUS_LIST = Endpoint("GET", "/api/v1/gpus/")
QUOTAS_LIST = Endpoint("GET", "/api/v1/quotas/")
USAGE = Endpoint("GET", "/api/v1/usage/")
USAGE_PEOPLE = Endpoint("GET", "/api/v1/usage/people/")
MEMBER_SHARES = Endpoint("GET", "/api/v1/teams/{slug}/member-shares/")
MEMBER_WEIGHTS = Endpoint("PATCH", "/api/v1/teams/{slug}/member-shares/")
PREEMPTION = Endpoint("GET", "/api/v1/teams/{slug}/preemption/")
PREEMPTION_SET = Endpoint("PUT", "/api/v1/teams/{slug}/preemption/")
TEMPLATES_LIST = Endpoint("GET", "/api/v1/teams/{slug}/templates/")
TEMPLATE_SAVE = Endpoint("POST", "/api/v1/teams/{slug}/templates/")
TEMPLATE_GET = Endpoint("GET", "/api/v1/teams/{slug}/templates/{name}/")
TEMPLATE_DELETE = Endpoint("DELETE", "/api/v1/teams/{slug}/templates/{name}/")
WEBHOOKS_LIST = Endpoint("GET", "/api/v1/webhooks/")
WEBHOOK_DELIVERIES = Endpoint("GET", "/api/v1/webhooks/{id}/deliveries/")
WEBHOOK_PING = Endpoint("POST", "/api/v1/webhooks/{id}/ping/")
WEBHOOK_REDELIVER = Endpoint("POST", "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver/")

# The command line's sign-in (no token yet): ask for a code, then poll for the approved token.
DEVICE_START = Endpoint("POST", "/api/v1/auth/device/")
DEVICE_TOKEN = Endpoint("POST", "/api/v1/auth/device/token/")

ENDPOINTS: tuple[Endpoint, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Endpoint))


class Transport:
    """One portal (base URL) and one token. ``timeout`` bounds each request's wait for an answer."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _open(self, endpoint: Endpoint, path_values: Mapping[str, Any], params: Params, body: Any,
              headers: Mapping[str, str] | None, accept: str, timeout: float):  # fmt: skip
        path = endpoint.format(**path_values)
        query = urllib.parse.urlencode([(k, v) for k, v in _pairs(params)], doseq=True)
        url = f"{self.base}{path}" + (f"?{query}" if query else "")
        data = None
        all_headers = {"Accept": accept, "User-Agent": f"gpu-portal-client/{__version__}"}
        if self.token:  # none yet while signing in
            all_headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        request = urllib.request.Request(url, data=data, method=endpoint.method, headers=all_headers)  # noqa: S310
        try:
            return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - the portal's http(s) URL
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            raise error_for(error.code, parsed, endpoint.method, path) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ConnectionFailed(f"No answer from {self.base}: {reason}") from None

    def call(self, endpoint: Endpoint, *, params: Params = None, body: Any = None,
             headers: Mapping[str, str] | None = None, wait_for: float | None = None,
             **path_values: Any) -> tuple[int, Any]:  # fmt: skip
        """(status, parsed JSON body) of a JSON request; raises an APIError subclass on 4xx/5xx. ``wait_for``: the
        seconds the portal may take on purpose (a long-poll), added to the transport's timeout."""
        timeout = self.timeout + (wait_for or 0)
        with self._open(endpoint, path_values, params, body, headers, "application/json", timeout) as answer:
            raw = answer.read()
            return answer.status, (json.loads(raw) if raw else None)

    def text(self, endpoint: Endpoint, *, params: Params = None, accept: str = "text/plain", **path_values: Any) -> str:
        with self._open(endpoint, path_values, params, None, None, accept, self.timeout) as answer:
            return answer.read().decode("utf-8", errors="replace")

    def lines(self, endpoint: Endpoint, *, params: Params = None, headers: Mapping[str, str] | None = None,
              timeout: float = 120.0, **path_values: Any) -> Iterator[str]:  # fmt: skip
        """The answer's lines as they arrive (for text/event-stream), without their line ends."""
        answer = self._open(endpoint, path_values, params, None, headers, "text/event-stream", timeout)
        with answer:
            for raw in answer:
                yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _pairs(params: Params) -> Iterator[tuple[str, Any]]:
    """Query pairs; a list value repeats its key (?state=queued&state=running), None leaves the key out."""
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, list | tuple | set | frozenset):
            for item in value:
                yield key, item
        elif isinstance(value, bool):
            yield key, "true" if value else "false"
        else:
            yield key, value
