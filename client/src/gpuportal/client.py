"""``Client``: the portal's jobs, job arrays, logs and notebooks as Python calls. Answers are the API's JSON as
dicts (typed with gpuportal.types); refusals raise gpuportal.errors.APIError subclasses carrying every field's
messages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from . import transport as api
from . import waiting
from .config import checkpoint_target, resolve
from .errors import NotFound, WaitTimeout
from .spec import load_spec
from .types import (
    ARRAY_ONLY_FIELDS,
    FINAL_STATES,
    PLAN_FINAL_STATES,
    ArraySpec,
    GPUInfo,
    Job,
    JobArray,
    JobEvent,
    JobLog,
    JobSpec,
    JobWait,
    Me,
    MemberShares,
    NodeInfo,
    Notebook,
    NotebookSpec,
    PeopleUsage,
    PlanRun,
    QuotaInfo,
    ResourceClass,
    Service,
    ServiceSpec,
    Usage,
    WorkloadTemplate,
)

#: The most a list call fetches when no limit is given (pages of PAGE are read until then).
PAGE = 100


@dataclass(frozen=True)
class LogEvent:
    """One event of a followed log: a line (``line_no`` set), or ``kind`` "waiting"/"end" with a sentence."""

    text: str
    kind: str = "line"
    line_no: int | None = None


class Client:
    """One portal and one token. Either argument left out comes from GPUPORTAL_URL / GPUPORTAL_TOKEN, then from
    the file ``gpuportal login`` writes. ``waiter`` decides how wait() waits (default: the portal's long-poll,
    polling with backoff on a portal without it)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 waiter: waiting.Waiter | None = None) -> None:  # fmt: skip
        url, token = resolve(url, token)
        self.url = url.rstrip("/")
        self.http = api.Transport(self.url, token, timeout=timeout)
        self.waiter: waiting.Waiter = waiter or waiting.LongPollWaiter()

    def __repr__(self) -> str:  # never the token
        return f"Client({self.url!r})"

    # Who am I

    def me(self) -> Me:
        return cast(Me, self.http.call(api.ME)[1])

    # Jobs

    def submit(self, spec: Mapping[str, Any] | str | Path, *, idempotency_key: str | None = None) -> Job | JobArray:
        """Submit a job (a spec dict, or the path of a YAML/JSON spec file). A spec with ``size`` is a job array.
        With ``idempotency_key`` a retried submission returns the first job instead of making a second."""
        data = dict(load_spec(spec) if isinstance(spec, str | Path) else spec)
        if ARRAY_ONLY_FIELDS & data.keys():
            return self.submit_array(cast(ArraySpec, data), idempotency_key=idempotency_key)
        return self.submit_job(cast(JobSpec, data), idempotency_key=idempotency_key)

    def submit_job(self, spec: JobSpec | Mapping[str, Any], *, idempotency_key: str | None = None) -> Job:
        """One job, single-node or (with ``workers``) a distributed gang; unknown spec fields are passed on and
        the portal names any it does not take."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return cast(Job, self.http.call(api.JOBS_CREATE, body=dict(spec), headers=headers)[1])

    def submit_array(self, spec: ArraySpec | Mapping[str, Any], *, idempotency_key: str | None = None) -> JobArray:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return cast(JobArray, self.http.call(api.ARRAYS_CREATE, body=dict(spec), headers=headers)[1])

    def get_job(self, job_id: int) -> Job:
        return cast(Job, self.http.call(api.JOB_GET, id=job_id)[1])

    def list_jobs(self, *, state: str | list[str] | None = None, kind: str | None = None, team: str | None = None,
                  label: str | list[str] | None = None, owner: str | None = None, array: int | None = None,
                  q: str | None = None, cluster: str | None = None, limit: int | None = 50) -> list[Job]:  # fmt: skip
        """Jobs you can see, newest first. ``state`` and ``label`` may be lists (states: any of; labels
        ``key=value`` or ``key``: all of); ``cluster``: only those placed on that cluster of the fleet (a name no
        cluster has is refused). ``limit=None`` reads every page."""
        params = {"state": state, "kind": kind, "team": team, "label": label, "owner": owner, "array": array, "q": q,
                  "cluster": cluster}  # fmt: skip
        return cast(list[Job], self._list(api.JOBS_LIST, params, limit))

    def cancel_job(self, job_id: int, reason: str | None = None) -> Job:
        """Cancel a job; ``reason`` is required for someone else's job (a lead's or admin's): the owner is told."""
        body = {"reason": reason} if reason else None
        return cast(Job, self.http.call(api.JOB_CANCEL, body=body, id=job_id)[1])

    def resubmit(self, job_id: int, changes: Mapping[str, Any] | None = None) -> Job:
        """A new job from an ended one; ``changes`` overrides any spec field (e.g. {"image": ..., "count": 2})."""
        return cast(Job, self.http.call(api.JOB_RESUBMIT, body=dict(changes or {}), id=job_id)[1])

    def report_checkpoint(self, job_id: int, at: str | None = None) -> Job:
        """Tell the portal the job has just written a checkpoint (``at``: ISO 8601 time it was written; default
        now). Called from inside a running job; preemption then loses least of it, and the next attempt reads it
        in PORTAL_LAST_CHECKPOINT."""
        return cast(Job, self.http.call(api.JOB_CHECKPOINT, body={"at": at} if at else {}, id=job_id)[1])

    def job_events(self, job_id: int) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.http.call(api.JOB_EVENTS, id=job_id)[1])

    def wait(self, job_id: int, timeout: float | None = None, *, seen: Callable[[Job], None] | None = None) -> Job:
        """The job once it has ended (succeeded, failed, cancelled or lost); WaitTimeout after ``timeout`` s.
        Long-polls the portal (one request per LONG_POLL_SECONDS), or polls an older portal without it. ``seen`` is
        called with the job as each answer brings it (at least every LONG_POLL_SECONDS while it waits)."""

        def fetch(*, seconds: float | None = None) -> Job:
            if seconds is None:
                job = self.get_job(job_id)
            else:
                params = {"timeout": round(seconds, 3)}
                job = cast(Job, self.http.call(api.JOB_WAIT, params=params, wait_for=seconds, id=job_id)[1])
            if seen is not None:
                seen(job)
            return job

        return self.waiter.wait(fetch, timeout)

    def wait_for_change(self, job_id: int, *, state: str | None = None, after_event: int | None = None,
                        timeout: float = 30.0) -> JobWait:  # fmt: skip
        """One long-poll: the job once its state differs from ``state`` (or an event newer than ``after_event``
        exists, or it has ended), else after ``timeout`` seconds (at most 60) with ``timed_out`` true."""
        params = {"timeout": timeout, "state": state, "after_event": after_event}
        return cast(JobWait, self.http.call(api.JOB_WAIT, params=params, wait_for=timeout, id=job_id)[1])

    def events(self, job_id: int, *, after: int | None = None, pause: float = 0.5) -> Iterator[JobEvent]:
        """The job's timeline (after event ``after``), then each new event as it happens, until the job has ended.
        Reconnects when the portal closes a stream (it bounds each), going on after the last event seen."""
        yield from self._stream(api.JOB_EVENTS_STREAM, after, pause, id=job_id)

    def team_events(self, team: str, *, after: int | None = None, pause: float = 0.5) -> Iterator[JobEvent]:
        """Every new event of the team's jobs (after event ``after``), as it happens; endless (stop iterating to
        stop). Members of the team only."""
        yield from self._stream(api.TEAM_EVENTS_STREAM, after, pause, slug=team)

    def _stream(self, endpoint: api.Endpoint, after: int | None, pause: float, **path: Any) -> Iterator[JobEvent]:
        last = after
        while True:
            headers = None if last is None else {"Last-Event-ID": str(last)}
            for event in _events(self.http.lines(endpoint, headers=headers, **path)):
                if event.kind == "end":
                    return
                if event.line_no is not None:
                    last = event.line_no
                if event.kind not in ("ready", "line"):
                    yield cast(JobEvent, json.loads(event.text))
            waiting.sleep(pause)

    def get_array(self, array_id: int) -> JobArray:
        return cast(JobArray, self.http.call(api.ARRAY_GET, id=array_id)[1])

    def cancel_array(self, array_id: int) -> JobArray:
        return cast(JobArray, self.http.call(api.ARRAY_CANCEL, id=array_id)[1])

    # Logs

    def logs(self, job_id: int, *, tail: int = 200, rank: int | None = None) -> JobLog:
        """The log's last ``tail`` lines (1-5000), the running pod's or the kept one (``rank``: that rank's of a
        distributed job; rank 0's by default)."""
        return cast(JobLog, self.http.call(api.JOB_LOGS, params={"tail": tail, "rank": rank}, id=job_id)[1])

    def download_log(self, job_id: int, *, pod: str | None = None, rank: int | None = None) -> str:
        """The whole log as text (``pod``: an earlier attempt's kept log; ``rank``: a distributed job's rank)."""
        return self.http.text(api.JOB_LOGS_DOWNLOAD, params={"pod": pod, "rank": rank}, id=job_id)

    def follow_logs(
        self, job_id: int, *, tail: int = 200, pause: float = 1.0, rank: int | None = None
    ) -> Iterator[LogEvent]:
        """The last ``tail`` lines, then each new one as it is written, until the container ends. Reconnects when
        the portal closes a stream (it bounds each), going on after the last line seen; while the job has no log
        yet, checks back every ``pause`` seconds (and stops if the job ended without one)."""
        last: int | None = None
        while True:
            params: dict[str, Any] = {"tail": tail} if last is None else {"from": last}
            params["rank"] = rank
            try:
                for event in _events(self.http.lines(api.JOB_LOGS_STREAM, params=params, id=job_id)):
                    if event.kind == "line" and event.line_no is not None:
                        last = event.line_no
                    yield event
                    if event.kind == "end":
                        return
            except NotFound as error:
                job = self.get_job(job_id)  # no pod yet, or never had one: which?
                if job.get("state") in FINAL_STATES:
                    yield LogEvent(error.detail or "The job has no log.", kind="end")
                    return
            waiting.sleep(pause)

    # Notebooks

    def list_notebooks(self, *, state: str | None = None, team: str | None = None, owner: str | None = None,
                       limit: int | None = 50) -> list[Notebook]:  # fmt: skip
        params = {"state": state, "team": team, "owner": owner}
        return cast(list[Notebook], self._list(api.NOTEBOOKS_LIST, params, limit))

    def get_notebook(self, notebook_id: int) -> Notebook:
        return cast(Notebook, self.http.call(api.NOTEBOOK_GET, id=notebook_id)[1])

    def launch_notebook(self, spec: NotebookSpec | Mapping[str, Any]) -> Notebook:
        """A new notebook; the answer's ``token`` (the notebook's login) is shown this once."""
        return cast(Notebook, self.http.call(api.NOTEBOOKS_CREATE, body=dict(spec))[1])

    def start_notebook(self, notebook_id: int) -> Notebook:
        """Start a stopped notebook again (same home volume, a new ``token``)."""
        return cast(Notebook, self.http.call(api.NOTEBOOK_START, id=notebook_id)[1])

    def stop_notebook(self, notebook_id: int, reason: str | None = None) -> Notebook:
        """Stop a notebook; ``reason`` is required for someone else's notebook: the owner is told."""
        body = {"reason": reason} if reason else None
        return cast(Notebook, self.http.call(api.NOTEBOOK_STOP, body=body, id=notebook_id)[1])

    def extend_notebook(self, notebook_id: int, seconds: int | None = None) -> Notebook:
        body = {} if seconds is None else {"seconds": seconds}
        return cast(Notebook, self.http.call(api.NOTEBOOK_EXTEND, body=body, id=notebook_id)[1])

    # Services

    def list_services(self, *, stopped: bool = False, limit: int | None = 50) -> list[Service]:
        params = {"state": "stopped" if stopped else None}
        return cast(list[Service], self._list(api.SERVICES_LIST, params, limit))

    def get_service(self, service_id: int) -> Service:
        return cast(Service, self.http.call(api.SERVICE_GET, id=service_id)[1])

    def create_service(self, spec: ServiceSpec | Mapping[str, Any] | str | Path) -> Service:
        """A new service from a spec (a mapping, or a YAML/JSON file); a ``kind: service`` key is dropped."""
        body = load_spec(spec) if isinstance(spec, str | Path) else dict(spec)
        body.pop("kind", None)
        return cast(Service, self.http.call(api.SERVICES_CREATE, body=body)[1])

    def update_service(self, service_id: int, changes: Mapping[str, Any]) -> Service:
        """Image/command/env/resources/probes roll out a new revision; replica bounds and the metric change the
        autoscaler only."""
        return cast(Service, self.http.call(api.SERVICE_UPDATE, body=dict(changes), id=service_id)[1])

    def scale_service(self, service_id: int, min_replicas: int, max_replicas: int) -> Service:
        body = {"min_replicas": min_replicas, "max_replicas": max_replicas}
        return cast(Service, self.http.call(api.SERVICE_SCALE, body=body, id=service_id)[1])

    def pause_service(self, service_id: int) -> Service:
        return cast(Service, self.http.call(api.SERVICE_PAUSE, id=service_id)[1])

    def resume_service(self, service_id: int) -> Service:
        return cast(Service, self.http.call(api.SERVICE_RESUME, id=service_id)[1])

    def rollback_service(self, service_id: int) -> Service:
        return cast(Service, self.http.call(api.SERVICE_ROLLBACK, id=service_id)[1])

    def delete_service(self, service_id: int, reason: str | None = None) -> None:
        """Stop the service: its Deployment, Service and autoscaler are removed. ``reason`` is required for
        someone else's service: the owner is told."""
        self.http.call(api.SERVICE_DELETE, params={"reason": reason or None}, id=service_id)

    # The fleet

    def list_clusters(self) -> list[dict[str, Any]]:
        """The clusters of the fleet: name, region, health ("reachable", "unreachable" since ``unreachable_since``),
        Kubernetes version, capabilities, node and GPU counts."""
        return self._list(api.CLUSTERS_LIST, {}, None)

    # Capacity, quotas and usage: what can be asked for, what is free, and what was used

    def list_classes(self, *, available: bool | None = None, limit: int | None = None) -> list[ResourceClass]:
        """The resource classes you may request, each with its ``key`` (what a spec's ``resource_class`` names)
        and capacity figures; ``available=True``: only those with units free now."""
        return cast(list[ResourceClass], self._list(api.CLASSES_LIST, {"available": available}, limit))

    def list_nodes(self, *, cluster: str | None = None, limit: int | None = None) -> list[NodeInfo]:
        """The nodes you may use (admins: all) with what each advertises (``allocatable``) and holds in use
        (``gpu_in_use``) per resource; ``cluster``: only that cluster's."""
        return cast(list[NodeInfo], self._list(api.NODES_LIST, {"cluster": cluster}, limit))

    def list_gpus(self, *, node: str | None = None, cluster: str | None = None, limit: int | None = None
                  ) -> list[GPUInfo]:  # fmt: skip
        """The GPUs of the nodes you may use, each with its node, cluster, product, sharing and MIG partitions;
        ``node`` / ``cluster``: only that node's or that cluster's."""
        return cast(list[GPUInfo], self._list(api.GPUS_LIST, {"node": node, "cluster": cluster}, limit))

    def list_quotas(self, *, team: str | None = None, limit: int | None = None) -> list[QuotaInfo]:
        """Your teams' quotas (admins: every team's): guaranteed, limit and units ``used`` per class."""
        return cast(list[QuotaInfo], self._list(api.QUOTAS_LIST, {"team": team}, limit))

    def usage(self, team: str, start: str, end: str) -> Usage:
        """GPU-hours allocated and used from ``start`` to ``end`` (dates, UTC, inclusive): per day, per team and per
        member (a lead or admin: every member; others: their own). ``team="all"``: every team (admins)."""
        params = {"team": team, "start": start, "end": end}
        return cast(Usage, self.http.call(api.USAGE, params=params)[1])

    def people_usage(self, team: str | None = None, *, month: str | None = None, months: int | None = None
                     ) -> PeopleUsage:  # fmt: skip
        """GPU-hours, jobs, busy, idle and preempted GPU-hours and energy per month, team, person and resource class:
        your own (``team`` None), a team's (a lead or admin: every member; others: their own) or every team's
        (``team="all"``, admins). ``month``: the last month, YYYY-MM (default this one); ``months``: how many."""
        params = {"team": team, "month": month, "months": months}
        params = {key: value for key, value in params.items() if value is not None}
        return cast(PeopleUsage, self.http.call(api.USAGE_PEOPLE, params=params)[1])

    def member_shares(self, team: str) -> MemberShares:
        """Fair share among ``team``'s members: each one's weight and recent use (any member of the team)."""
        return cast(MemberShares, self.http.call(api.MEMBER_SHARES, slug=team)[1])

    def set_member_weights(self, team: str, weights: Mapping[str, float]) -> MemberShares:
        """Set members' fair-share weights, user name → weight above 0 (the team's leads, admins); all or none."""
        return cast(MemberShares, self.http.call(api.MEMBER_WEIGHTS, body={"weights": dict(weights)}, slug=team)[1])

    def min_runtime(self, team: str) -> dict[str, Any]:
        """The team's minimum runtime before preemption: {"team", "min_runtime_seconds", "max_seconds"}."""
        return cast(dict[str, Any], self.http.call(api.PREEMPTION, slug=team)[1])

    def set_min_runtime(self, team: str, seconds: int) -> dict[str, Any]:
        """Set the team's minimum runtime before preemption (the team's leads, admins; 0: none)."""
        return cast(dict[str, Any], self.http.call(api.PREEMPTION_SET, body={"min_runtime_seconds": seconds},
                                                   slug=team)[1])  # fmt: skip

    # Workload templates (any member reads and submits from them; the team's leads and admins save and remove)

    def list_templates(self, team: str) -> list[WorkloadTemplate]:
        """``team``'s templates, each with its kind, its latest version number and every version's spec."""
        return cast(list[WorkloadTemplate], self.http.call(api.TEMPLATES_LIST, slug=team)[1])

    def get_template(self, team: str, name: str) -> WorkloadTemplate:
        return cast(WorkloadTemplate, self.http.call(api.TEMPLATE_GET, slug=team, name=name)[1])

    def find_template(self, ref: str, team: str | None = None) -> WorkloadTemplate | None:
        """The template ``ref`` (NAME or NAME@VERSION) names among ``team``'s, or among the templates of your teams
        (None when no team has it, or more than one does: the portal's answer to a submission says which)."""
        name = ref.split("@", 1)[0]
        teams = [team] if team else [t["team"] for t in self.me().get("teams", [])]
        found = [t for slug in teams for t in self.list_templates(slug) if t["name"] == name]
        return found[0] if len(found) == 1 else None

    def save_template(self, team: str, name: str, *, spec: Mapping[str, Any] | None = None,
                      kind: str | None = None, from_job: int | None = None, from_notebook: int | None = None,
                      from_service: int | None = None, description: str = "") -> WorkloadTemplate:  # fmt: skip
        """Save ``spec`` (as the create API of ``kind`` takes it: job, the default, notebook or service) or the spec
        of job ``from_job``, notebook ``from_notebook`` or service ``from_service`` as the next version of template
        ``name``; the portal checks the spec as that API checks a request, every problem at once."""
        body: dict[str, Any] = {"name": name, "description": description}
        if spec is not None:
            body["spec"] = dict(spec)
        if kind is not None:
            body["kind"] = kind
        for field, value in (("from_job", from_job), ("from_notebook", from_notebook), ("from_service", from_service)):
            if value is not None:
                body[field] = value
        return cast(WorkloadTemplate, self.http.call(api.TEMPLATE_SAVE, body=body, slug=team)[1])

    def delete_template(self, team: str, name: str) -> None:
        self.http.call(api.TEMPLATE_DELETE, slug=team, name=name)

    # Webhooks (a team's leads and admins; others see none)

    def list_webhooks(self, *, limit: int | None = 50) -> list[dict[str, Any]]:
        return self._list(api.WEBHOOKS_LIST, {}, limit)

    def webhook_deliveries(self, webhook_id: int, *, limit: int | None = 50) -> list[dict[str, Any]]:
        """The webhook's delivery log, newest first: status, attempts with response codes, the body sent."""
        return self._list_at(api.WEBHOOK_DELIVERIES, limit, id=webhook_id)

    def ping_webhook(self, webhook_id: int) -> dict[str, Any]:
        return cast(dict[str, Any], self.http.call(api.WEBHOOK_PING, id=webhook_id)[1])

    def redeliver(self, webhook_id: int, delivery_id: int) -> dict[str, Any]:
        """Send a delivery's body again (a new delivery, the same event id)."""
        return cast(dict[str, Any], self.http.call(api.WEBHOOK_REDELIVER, id=webhook_id, delivery_id=delivery_id)[1])

    # Capacity planner (admins make and cancel runs; team leads read them)

    def create_plan(self, request: Mapping[str, Any]) -> PlanRun:
        """Start a plan run: {"days": n} or {"start", "end"}, "cluster" (one cluster; absent: the fleet),
        "proposals": [{"name", "cluster", "changes"}], "options"."""
        return cast(PlanRun, self.http.call(api.PLANS_CREATE, body=dict(request))[1])

    def get_plan(self, run_id: int) -> PlanRun:
        return cast(PlanRun, self.http.call(api.PLAN_GET, id=run_id)[1])

    def list_plans(self, *, limit: int | None = 50) -> list[PlanRun]:
        return cast(list[PlanRun], self._list(api.PLANS_LIST, {}, limit))

    def cancel_plan(self, run_id: int) -> PlanRun:
        return cast(PlanRun, self.http.call(api.PLAN_CANCEL, id=run_id)[1])

    def plan_csv(self, run_id: int) -> str:
        """A succeeded run's results as CSV: one row per scenario × (total | team | class | cluster)."""
        return self.http.text(api.PLAN_CSV, accept="text/csv", id=run_id)

    def wait_plan(self, run_id: int, timeout: float | None = None, *, pause: float = 1.0) -> PlanRun:
        """The run once it has ended (succeeded, failed or cancelled), polling every ``pause`` seconds;
        WaitTimeout after ``timeout`` seconds."""
        deadline = None if timeout is None else waiting.monotonic() + timeout
        while True:
            run = self.get_plan(run_id)
            if run.get("state") in PLAN_FINAL_STATES:
                return run
            if deadline is not None and waiting.monotonic() >= deadline:
                raise WaitTimeout(dict(run), timeout or 0, what="Plan run")
            waiting.sleep(pause)

    def _list(self, endpoint: api.Endpoint, params: dict[str, Any], limit: int | None) -> list[dict[str, Any]]:
        return self._list_at(endpoint, limit, params=params)

    def _list_at(self, endpoint: api.Endpoint, limit: int | None, params: dict[str, Any] | None = None,
                 **path_values: Any) -> list[dict[str, Any]]:  # fmt: skip
        found: list[dict[str, Any]] = []
        while limit is None or len(found) < limit:
            size = PAGE if limit is None else min(PAGE, limit - len(found))
            query = {**(params or {}), "limit": size, "offset": len(found)}
            page = self.http.call(endpoint, params=query, **path_values)[1]
            found.extend(page["results"])
            if not page.get("next") or not page["results"]:
                break
        return found


def _events(lines: Iterator[str]) -> Iterator[LogEvent]:
    """Server-sent events (blank-line separated ``field: value`` lines) as LogEvents; ``retry`` is ignored."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in _with_end(lines):
        if line == "":
            if data:
                ident = fields.get("id")
                kind = fields.get("event") or "line"
                yield LogEvent("\n".join(data), kind, int(ident) if ident and ident.isdigit() else None)
            fields, data = {}, []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name:
            fields[name] = value


def _with_end(lines: Iterator[str]) -> Iterator[str]:
    yield from lines
    yield ""


def report_checkpoint_from_job(at: str | None = None, *, timeout: float = 30.0) -> Job:
    """From inside a job that declared ``"report": "token"``: tell the portal the job has just written a checkpoint
    (``at``: ISO 8601 time it was written; default now), with the token and address the portal put in the job's
    environment (PORTAL_CHECKPOINT_TOKEN, PORTAL_CHECKPOINT_URL). Needs no login and no API token; the token can do
    nothing else."""
    base, job_id, token = checkpoint_target()
    http = api.Transport(base, token, timeout=timeout)
    return cast(Job, http.call(api.JOB_CHECKPOINT, body={"at": at} if at else {}, id=job_id)[1])
