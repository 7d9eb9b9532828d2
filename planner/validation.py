"""A plan request (the API's JSON, or the page's form turned into the same JSON) checked and turned into what the
engine takes: the window, the proposals as model.Proposal, and engine.Options. Every problem is reported at once,
each under the path of the field it is about ("start", "cluster", "proposals[1].name", "proposals[1].cluster",
"proposals[0].changes[2].nodes", "options.suggest"), so the API answers them as field errors and the page shows
each next to its field.

Over a fleet: ``cluster`` limits the replay to one cluster (absent or "": the whole fleet); each proposal names the
cluster its changes are made to (absent: the run's cluster, or the default one for a fleet run), and is stored with
that name.

The rule for what a proposal may change on the cluster (node names, MIG geometry, quotas) has one home,
planner.proposals.validate; this module checks the request's shape and bounds, then asks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from . import engine, history, proposals

MAX_DAYS = 90
MAX_PROPOSALS = 5
MAX_CHANGES = 20
MAX_NAME = 60
MAX_NODES = 1000
MAX_SUGGEST = 5
MAX_REPLICAS = 64
MAX_ADD = 500
MAX_UNITS = 100_000
#: A window may end this far past now (the clocks of a browser and the server disagree a little).
FUTURE_SLACK = timedelta(minutes=5)

#: Each change type's fields (besides "type") and which are required.
CHANGE_FIELDS: dict[str, dict[str, bool]] = {
    "mig": {"nodes": True, "preset": False, "per_gpu": False},
    "time_slicing": {"nodes": True, "replicas": True},
    "quota": {"team": True, "class_id": True, "guaranteed": True, "limit": True},
    "add_nodes": {"like": True, "count": True},
    "remove_nodes": {"nodes": True},
}
OPTION_FIELDS = ("preemption", "borrowing", "suggest")


class PlanInvalid(Exception):
    """Every problem with a plan request: {path: [sentence, ...]}."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass
class PlanRequest:
    start: datetime
    end: datetime
    proposals: list  # [model.Proposal]
    #: The proposals as JSON, as they will be stored on the run (normalised by planner.proposals.to_json).
    proposals_json: list[dict]
    options: engine.Options
    options_json: dict
    #: The cluster the replay is limited to; "" for the whole fleet.
    cluster: str = ""


class _Errors(dict):
    def add(self, path: str, message: str) -> None:
        self.setdefault(path, []).append(message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_moment(value, *, end: bool) -> datetime | None:
    """An ISO date-time (UTC unless it says otherwise) or a date (its start; an end date means the end of that day)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 40:
        text = value.strip()
        try:
            day = parse_date(text) if len(text) == 10 else None
            moment = None if day is not None else parse_datetime(text)
        except ValueError:  # the right shape, not a real date or time (2026-02-30)
            return None
        if day is not None:
            moment = datetime(day.year, day.month, day.day) + (timedelta(days=1) if end else timedelta())
        if moment is None:
            return None
    else:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


def _is_day(value) -> bool:
    return isinstance(value, str) and len(value.strip()) == 10 and parse_date(value.strip()) is not None


def _window(data: dict, errors: _Errors, now: datetime) -> tuple[datetime | None, datetime | None]:
    days = data.get("days")
    has_dates = data.get("start") not in (None, "") or data.get("end") not in (None, "")
    if days not in (None, "") and has_dates:
        errors.add("days", "Give either a number of days back from now or a start and an end, not both.")
        return None, None
    if days not in (None, ""):
        if not _is_int(days) or not 1 <= days <= MAX_DAYS:
            errors.add("days", f"A whole number of days from 1 to {MAX_DAYS}.")
            return None, None
        return now - timedelta(days=days), now
    start = _parse_moment(data.get("start"), end=False)
    end = _parse_moment(data.get("end"), end=True) if data.get("end") not in (None, "") else now
    if data.get("start") in (None, ""):
        errors.add("start", "Say where the window starts (a date or an ISO date-time), or give days.")
    elif start is None:
        errors.add("start", "Not a date: write it as 2026-10-01 or 2026-10-01T08:00:00Z.")
    if end is None:
        errors.add("end", "Not a date: write it as 2026-10-31 or 2026-10-31T18:00:00Z.")
    if start is None or end is None:
        return None, None
    # A date as the end means up to the end of that day; today's date means up to now.
    latest = end - timedelta(days=1) if _is_day(data.get("end")) else end
    if latest > now + FUTURE_SLACK:
        errors.add("end", "The window cannot end in the future: there is no history there yet.")
    if start >= end:
        errors.add("start", "The window must start before it ends.")
    elif end - start > timedelta(days=MAX_DAYS):
        errors.add("start", f"The window is {(end - start).days} days long; at most {MAX_DAYS} days.")
    return start, min(end, now)


def _nodes(value, path: str, errors: _Errors) -> None:
    if not isinstance(value, list) or not value:
        errors.add(path, "Pick at least one node (a list of node names).")
    elif len(value) > MAX_NODES:
        errors.add(path, f"At most {MAX_NODES} nodes in one change.")
    elif not all(isinstance(n, str) and 0 < len(n) <= 253 for n in value):
        errors.add(path, "Node names are text (as on the Nodes page).")
    elif len(set(value)) != len(value):
        errors.add(path, "A node is named twice.")


def _whole(value, path: str, errors: _Errors, low: int, high: int, what: str) -> bool:
    if not _is_int(value) or not low <= value <= high:
        errors.add(path, f"{what}: a whole number from {low} to {high}.")
        return False
    return True


def _change(change, path: str, errors: _Errors) -> None:
    if not isinstance(change, dict):
        errors.add(path, 'A change is an object with a "type" and its fields.')
        return
    kind = change.get("type")
    if kind not in CHANGE_FIELDS:
        errors.add(f"{path}.type", f"Unknown change type {kind!r}: use one of {', '.join(CHANGE_FIELDS)}.")
        return
    fields = CHANGE_FIELDS[kind]
    for name in sorted(set(change) - set(fields) - {"type"}):
        errors.add(f"{path}.{name}", f"A {kind} change has no field {name!r} (it has {', '.join(fields)}).")
    for name, required in fields.items():
        if required and change.get(name) in (None, ""):
            errors.add(f"{path}.{name}", "Required.")
    if "nodes" in fields and change.get("nodes") not in (None, ""):
        _nodes(change["nodes"], f"{path}.nodes", errors)
    if kind == "mig":
        preset, per_gpu = change.get("preset") or "", change.get("per_gpu") or []
        if bool(preset) == bool(per_gpu):
            errors.add(f"{path}.preset", "Give either a preset or a layout per GPU, one of the two.")
        if preset and (not isinstance(preset, str) or len(preset) > 60):
            errors.add(f"{path}.preset", 'A preset\'s name, such as "all-3g.40gb" or "all-balanced".')
        if per_gpu:
            _per_gpu(per_gpu, f"{path}.per_gpu", errors)
    elif kind == "time_slicing" and change.get("replicas") is not None:
        _whole(change["replicas"], f"{path}.replicas", errors, 1, MAX_REPLICAS, "Replicas per GPU (1 turns it off)")
    elif kind == "quota":
        for name in ("team", "class_id"):
            if change.get(name) is not None and not _is_int(change[name]):
                errors.add(f"{path}.{name}", "An id (a whole number).")
        ok = [
            _whole(change[name], f"{path}.{name}", errors, 0, MAX_UNITS, name.capitalize())
            for name in ("guaranteed", "limit")
            if change.get(name) is not None
        ]
        if len(ok) == 2 and all(ok) and change["limit"] < change["guaranteed"]:
            errors.add(f"{path}.limit", "The limit cannot be below the guarantee.")
    elif kind == "add_nodes":
        if change.get("like") is not None and not (isinstance(change["like"], str) and 0 < len(change["like"]) <= 253):
            errors.add(f"{path}.like", "The name of an existing node to copy.")
        if change.get("count") is not None:
            _whole(change["count"], f"{path}.count", errors, 1, MAX_ADD, "How many nodes")


def _per_gpu(per_gpu, path: str, errors: _Errors) -> None:
    if not isinstance(per_gpu, list) or len(per_gpu) > 16:
        errors.add(path, "A list with one layout for every GPU or one per GPU (at most 16), each {profile: count}.")
        return
    for index, layout in enumerate(per_gpu):
        if layout is None:
            continue  # MIG off on that GPU
        if not isinstance(layout, dict) or len(layout) > 8:
            errors.add(f"{path}[{index}]", 'A layout is {profile: count}, e.g. {"3g.40gb": 2}; null leaves MIG off.')
            continue
        for profile, count in layout.items():
            if not (isinstance(profile, str) and len(profile) <= 30) or not _is_int(count) or not 0 <= count <= 7:
                errors.add(f"{path}[{index}]", f"{profile!r}: a profile name and a count from 0 to 7.")


def _options(data, errors: _Errors) -> tuple[engine.Options, dict]:
    if data in (None, ""):
        data = {}
    if not isinstance(data, dict):
        errors.add("options", f"An object with {', '.join(OPTION_FIELDS)}.")
        data = {}
    for name in sorted(set(data) - set(OPTION_FIELDS)):
        errors.add(f"options.{name}", f"Unknown option (the options are {', '.join(OPTION_FIELDS)}).")
    chosen = {"preemption": True, "borrowing": True, "suggest": 0}
    for name in ("preemption", "borrowing"):
        if name in data:
            if not isinstance(data[name], bool):
                errors.add(f"options.{name}", "true or false.")
            else:
                chosen[name] = data[name]
    if "suggest" in data and _whole(
        data["suggest"], "options.suggest", errors, 0, MAX_SUGGEST, "How many MIG layouts to suggest"
    ):
        chosen["suggest"] = data["suggest"]
    return options_from_json(chosen), chosen


def validate_request(data, *, now: datetime | None = None, cluster=None) -> PlanRequest:
    """``data``: {"days": n} or {"start", "end"}, "proposals": [{"name", "changes": [...]}], "options": {...}.
    Returns the PlanRequest, or raises PlanInvalid with every problem. ``cluster`` (model.Cluster) defaults to
    the cluster as it is now (planner.history.current_cluster), which the proposals are checked against."""
    now = now or timezone.now()
    errors = _Errors()
    if not isinstance(data, dict):
        raise PlanInvalid({"non_field_errors": ["Send an object: days (or start and end), proposals, options."]})
    for name in sorted(set(data) - {"days", "start", "end", "cluster", "proposals", "options"}):
        errors.add(name, "Unknown field (a plan takes days or start and end, cluster, proposals and options).")
    start, end = _window(data, errors, now)
    fleet: list = []  # (default cluster, every cluster's name), read once when a cluster has to be known

    def clusters() -> tuple[str, list[str]]:
        if not fleet:
            if cluster is not None and cluster.clusters:
                fleet.append((cluster.home, list(cluster.clusters)))
            else:
                fleet.append(history.cluster_names())
        return fleet[0]

    def known(value, path: str) -> str | None:
        """The cluster ``value`` names, or None after saying which names there are."""
        names = clusters()[1]
        if isinstance(value, str) and value.strip() in names:
            return value.strip()
        shown = ", ".join(names) or "none registered"
        errors.add(path, f"No cluster named {value!r}: name one of {shown}.")
        return None

    where = data.get("cluster")
    scope = "" if where in (None, "") else known(where, "cluster")
    raw = data.get("proposals", [])
    shaped: list[tuple[int, dict]] = []
    if not isinstance(raw, list):
        errors.add("proposals", "A list of proposals, each {name, changes}.")
        raw = []
    elif len(raw) > MAX_PROPOSALS:
        errors.add("proposals", f"At most {MAX_PROPOSALS} proposals in one run; {len(raw)} were given.")
        raw = raw[:MAX_PROPOSALS]
    names: dict[str, int] = {}
    for index, proposal in enumerate(raw):
        path = f"proposals[{index}]"
        before = len(errors)
        if not isinstance(proposal, dict):
            errors.add(path, "A proposal is an object: {name, changes}.")
            continue
        for name in sorted(set(proposal) - {"name", "cluster", "changes"}):
            errors.add(f"{path}.{name}", "Unknown field (a proposal has a name, a cluster and changes).")
        at = proposal.get("cluster")
        if at not in (None, ""):
            at = known(at, f"{path}.cluster")
            if at is not None and scope and at != scope:
                errors.add(
                    f"{path}.cluster",
                    f"This run replays cluster {scope} only; a proposal for {at} would change nothing in it (replay "
                    f"the whole fleet, or make the proposal for {scope}).",
                )
        name = proposal.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            errors.add(f"{path}.name", f"Name the proposal (at most {MAX_NAME} characters).")
        elif name.strip().lower() == "baseline":
            errors.add(f"{path}.name", '"baseline" is the cluster as it is; call the proposal something else.')
        elif name.strip().lower() in names:
            errors.add(f"{path}.name", f"Proposal {names[name.strip().lower()] + 1} has this name already.")
        else:
            names[name.strip().lower()] = index
        changes = proposal.get("changes")
        if not isinstance(changes, list) or not changes:
            errors.add(f"{path}.changes", "Give the proposal at least one change.")
        elif len(changes) > MAX_CHANGES:
            errors.add(f"{path}.changes", f"At most {MAX_CHANGES} changes in one proposal.")
        else:
            for c_index, change in enumerate(changes):
                _change(change, f"{path}.changes[{c_index}]", errors)
        if len(errors) == before:
            at = at or scope or clusters()[0]  # no cluster named: the run's, or the default cluster
            shaped.append((index, {"name": name.strip(), "cluster": at, "changes": changes}))
    options, options_json = _options(data.get("options"), errors)
    built = []
    if shaped:
        cluster = cluster if cluster is not None else history.current_cluster()
        for index, proposal_json in shaped:
            try:
                proposal = proposals.from_json(proposal_json)
            except proposals.Invalid as invalid:
                for problem in invalid.problems:
                    errors.add(f"proposals[{index}]", problem)
                continue
            for problem in proposals.validate(cluster, proposal):
                errors.add(f"proposals[{index}]", problem)
            built.append(proposal)
    if errors:
        raise PlanInvalid(dict(errors))
    return PlanRequest(
        start=start,
        end=end,
        proposals=built,
        proposals_json=[proposals.to_json(p) for p in built],
        options=options,
        options_json=options_json,
        cluster=scope or "",
    )


def options_from_json(data: dict) -> engine.Options:
    """The engine's options for a stored run (its ``options`` as validate_request stored them)."""
    return engine.Options(
        preemption=bool(data.get("preemption", True)),
        borrowing=bool(data.get("borrowing", True)),
        suggest=int(data.get("suggest", 0)),
        # The cycle's own settings: the replay admits, preempts and shares as the cycle does here.
        cycle_s=float(settings.PORTAL_JOB_CYCLE_INTERVAL),
        grace_s=float(settings.PORTAL_PREEMPTION_GRACE),
        half_life_s=float(settings.PORTAL_FAIR_SHARE_HALF_LIFE),
    )
