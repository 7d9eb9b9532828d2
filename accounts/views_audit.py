"""The audit log for admins (issue 18): filter by actor, team, action, object, cluster and date range, page through it,
and export exactly the filtered rows as CSV. Each object links to its page, and each change reads as the fields
that changed, before → after (accounts.audit_display); the CSV keeps the stored JSON.

Only admins see it (others get 404, as for every admin page). Leads do not see their team's log here: the log
also holds admins' changes to the team (quotas, members) with before/after values an admin may not want shown;
a lead who needs it asks an admin for an export filtered by the team.

The cluster filter takes a cluster's name as the records keep it (core.audit), not a choice among the registered
clusters: the log outlives a cluster that was removed, and this floor does not know the fleet. The Cluster column
shows when some record on the page names a cluster.

The CSV streams (the log grows without bound) and every cell that a spreadsheet would read as a formula
(starting with = + - @, a tab or a carriage return) is prefixed with a single quote.
"""

from __future__ import annotations

import csv
import functools
import json
from datetime import UTC, datetime, time, timedelta

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from core import audit
from core.models import AuditEvent

from . import audit_display
from .models import Team

PAGE_SIZE = 50
CSV_HEADER = [
    "when", "actor", "action", "action_label", "team", "cluster", "object_type", "object_id", "object", "before",
    "after", "request_id",
]  # fmt: skip
#: What a spreadsheet takes for the start of a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value) -> str:
    """A cell as text that no spreadsheet evaluates: formula starts get a leading single quote."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, help_text="User name (exact), or system.")
    team = forms.ModelChoiceField(
        queryset=Team.objects.order_by("slug"), required=False, to_field_name="slug", empty_label="Any team"
    )
    action = forms.ChoiceField(required=False)
    cluster = forms.SlugField(
        required=False, max_length=63, help_text="Cluster name (exact), as the records name it.",
        error_messages={"invalid": "A cluster's name has only lower-case letters, digits and hyphens."},
    )  # fmt: skip
    object_type = forms.CharField(required=False, label="Object type", help_text="e.g. jobs.Quota or portal.Team.")
    object_id = forms.CharField(required=False, label="Object id")
    start = forms.DateField(required=False, label="From", help_text="First day, YYYY-MM-DD (UTC).")
    end = forms.DateField(required=False, label="To", help_text="Last day, YYYY-MM-DD (UTC), inclusive.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        verbs = sorted(audit.registered_verbs().items(), key=lambda item: item[1])
        self.fields["action"].choices = [("", "Any action"), *[(value, label) for value, label in verbs]]

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and start > end:
            self.add_error("end", "The last day is before the first; swap them.")
        return data

    def filter(self, events):
        data = self.cleaned_data
        if data.get("actor"):
            events = events.filter(actor_name=data["actor"].strip())
        if data.get("team"):
            events = events.filter(team=data["team"])
        if data.get("action"):
            events = events.filter(action=data["action"])
        if data.get("cluster"):
            events = events.filter(cluster=data["cluster"])
        if data.get("object_type"):
            events = events.filter(object_type__iexact=data["object_type"].strip())
        if data.get("object_id"):
            events = events.filter(object_id=data["object_id"].strip())
        if data.get("start"):
            events = events.filter(when__gte=datetime.combine(data["start"], time.min, tzinfo=UTC))
        if data.get("end"):
            events = events.filter(when__lt=datetime.combine(data["end"] + timedelta(days=1), time.min, tzinfo=UTC))
        return events


def _staff_only(view):
    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _filtered(request) -> tuple[AuditFilterForm, object]:
    form = AuditFilterForm(request.GET or None)
    events = AuditEvent.objects.select_related("team").order_by("-when", "-id")
    if form.is_bound and form.is_valid():
        events = form.filter(events)
    elif form.is_bound:
        events = events.none()
    return form, events


@_staff_only
def audit_list(request):
    form, events = _filtered(request)
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    links = audit_display.object_links(page.object_list)
    for event in page.object_list:
        event.action_label = audit.verb_label(event.action)
        event.object_url = links.get(event.pk)
        event.change = audit_display.change(event.before, event.after)
    query = request.GET.copy()
    query.pop("page", None)
    show_cluster = any(event.cluster for event in page.object_list)
    context = {"form": form, "page": page, "querystring": query.urlencode(), "show_cluster": show_cluster}
    return render(request, "accounts/audit_list.html", context, status=400 if form.errors else 200)


class _Echo:
    def write(self, value):
        return value


def _json(value) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def csv_rows(events):
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_HEADER)
    for event in events.iterator(chunk_size=500):
        yield writer.writerow(
            [
                csv_safe(v)
                for v in (
                    event.when.isoformat(),
                    event.actor_name,
                    event.action,
                    audit.verb_label(event.action),
                    event.team.slug if event.team else "",
                    event.cluster,
                    event.object_type,
                    event.object_id,
                    event.object_repr,
                    _json(event.before),
                    _json(event.after),
                    event.request_id,
                )
            ]
        )


@_staff_only
def audit_csv(request):
    form, events = _filtered(request)
    if form.errors:
        return render(request, "accounts/audit_list.html", {"form": form, "page": None}, status=400)
    response = StreamingHttpResponse(csv_rows(events), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response
