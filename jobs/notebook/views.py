"""Notebook pages: list and launch, one notebook with its countdowns, and the Extend / Stop / Start again actions."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.models import Team
from cluster import get_backend
from gpus.models import Cluster, ResourceClass
from jobs import access, workload_templates
from jobs.choices import TemplateKind, WorkspaceKind
from jobs.forms import VolumeRowsMixin
from jobs.models import NotebookPolicy
from jobs.notebook import sessions as notebooks
from jobs.notebook import workspace
from jobs.notebook.api.serializers import NotebookSerializer
from jobs.notebook.workspace import portal_access
from jobs.notebook.workspaces import WORKSPACES, workspace_problems
from jobs.render import NOTEBOOK_HOME
from jobs.views import is_live_poll, read_template
from telemetry import samples
from vocab.durations import WORDS, duration_text

#: The session's token is shown once, on the page the launch or start redirects to.
TOKEN_SESSION_KEY = "notebook-token-{}"


class NotebookLaunchForm(VolumeRowsMixin, forms.Form):
    #: The home volume is mounted there; other volumes go elsewhere.
    reserved_mount_paths = (NOTEBOOK_HOME,)
    blank_volume_rows = 1

    team = forms.ModelChoiceField(queryset=Team.objects.none())
    name = forms.CharField(max_length=30, help_text="Lower-case letters, digits and '-'; part of the URL.")
    workspace = forms.ChoiceField(choices=(), initial=WorkspaceKind.JUPYTER, required=False, label="Workspace")
    image = forms.CharField(max_length=255, required=False)
    resource_class = forms.ModelChoiceField(queryset=ResourceClass.objects.none(), label="GPU")
    count = forms.IntegerField(min_value=1, max_value=8, initial=1)
    cpu = forms.IntegerField(min_value=1, max_value=64, initial=4, label="CPU cores")
    memory_gib = forms.IntegerField(min_value=1, max_value=512, initial=16, label="Memory (GiB)")
    volume_gib = forms.IntegerField(min_value=1, max_value=1024, label="Home volume (GiB)")
    ttl_hours = forms.FloatField(min_value=0.1, required=False, label="Maximum age (hours)")
    idle_minutes = forms.IntegerField(min_value=1, required=False, label="Idle timeout (minutes)")
    clusters = forms.CharField(
        label="Clusters, most preferred first", required=False, max_length=500,
        help_text="",  # names the fleet's clusters: set in __init__
    )  # fmt: skip

    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        fleet = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
        self.fields["clusters"].help_text = (
            f"Comma-separated, from {fleet}. The first session runs on the first with room and its home volume "
            "stays there: later sessions run on that cluster. Empty: the portal chooses."
        )
        teams = access.visible_teams(user)
        self.fields["team"].queryset = teams
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()
        self.fields["resource_class"].queryset = (
            ResourceClass.objects.visible_to(user).filter(quotas__team__in=teams).distinct()
        )
        self.fields["resource_class"].label_from_instance = lambda rc: f"{rc.display_name} · {rc.free} free now"
        self.fields["resource_class"].help_text = "The number free is cluster-wide; your team's quota still applies."
        offered = [kind for kind in WORKSPACES.values() if not workspace_problems(kind.kind, portal_access())]
        self.fields["workspace"].choices = [(kind.kind, kind.label) for kind in offered]
        self.fields["workspace"].help_text = (
            "What runs in it: JupyterLab, VS Code in the browser (code-server) or RStudio Server."
            if len(offered) > 1
            else "VS Code (code-server) and RStudio need the portal's one-click sign-in; this portal does not use it."
        )
        self.fields["image"].help_text = (
            "Empty: the workspace's own image ("
            + "; ".join(f"{kind.label}: {kind.default_image()}" for kind in offered)
            + ")."
        )
        self.fields["image"].widget.attrs["list"] = "notebook-images"  # the admin's list, any other image allowed
        self.fields["volume_gib"].initial = settings.PORTAL_NOTEBOOK_VOLUME_GIB
        self._show_limits([NotebookPolicy.for_team(team) for team in teams.order_by("name")])

    def _show_limits(self, policies: list[NotebookPolicy]) -> None:
        """Each team's default and maximum for the maximum age and the idle timeout, in the fields' help; the
        fields come filled with the default (and the browser holds them to the maximum) when every team the
        person may launch for has the same policy, else they stay empty: empty means the chosen team's default."""
        ttl, idle = self.fields["ttl_hours"], self.fields["idle_minutes"]

        def words(default: int, most: int) -> str:
            return f"Default {duration_text(default, WORDS)}, at most {duration_text(most, WORDS)}"

        limits = [(p.team.name, words(p.ttl_seconds, p.max_ttl_seconds),
                   words(p.idle_timeout_seconds, p.max_idle_timeout_seconds)) for p in policies]  # fmt: skip
        if len({(p.ttl_seconds, p.max_ttl_seconds, p.idle_timeout_seconds, p.max_idle_timeout_seconds)
                for p in policies}) == 1:  # fmt: skip
            policy = policies[0]
            ttl.initial = _number(policy.ttl_seconds / 3600)
            ttl.widget.attrs["max"] = _number(policy.max_ttl_seconds / 3600)
            idle.initial = policy.idle_timeout_seconds // 60
            idle.widget.attrs["max"] = policy.max_idle_timeout_seconds // 60
            ttl.help_text, idle.help_text = f"{limits[0][1]}.", f"{limits[0][2]}."
        elif policies:
            ttl.help_text = "; ".join(f"{team}: {text.lower()}" for team, text, _ in limits) + ". Empty: the default."
            idle.help_text = "; ".join(f"{team}: {text.lower()}" for team, _, text in limits) + ". Empty: the default."

    def clean(self):
        """The volume rows are checked like jobs.notebook.sessions.launch_notebook checks them, each problem on its
        row."""
        data = super().clean()
        data["volumes"] = self.clean_volume_rows(data.get("team"))
        return data

    def clean_clusters(self) -> list[str]:
        return [name.strip() for name in (self.cleaned_data.get("clusters") or "").split(",") if name.strip()]


def _number(value: float) -> int | float:
    """A whole number without its ".0" (a form field shows 4, not 4.0)."""
    return int(value) if float(value).is_integer() else round(value, 2)


def _seconds_left(deadline, now):
    return None if deadline is None else max(0, int((deadline - now).total_seconds()))


def _template_initial(request, ref: str) -> dict:
    """The launch form's initial values from the notebook template ``ref`` ("TEAM/NAME" or "TEAM/NAME@VERSION"):
    its spec read as POST /api/v1/notebooks/ reads it. A template that no longer reads says why; the form starts
    with its usual values."""
    if (read := read_template(request, ref, TemplateKind.NOTEBOOK, NotebookSerializer)) is None:
        return {}
    version, body = read
    team, name = version.template.team, version.template.name
    data = body.validated_data
    initial = {
        "team": team.pk, "name": data["name"], "workspace": data.get("workspace"), "image": data.get("image") or "",
        "resource_class": data["resource_class"].pk, "count": data["count"],
        "cpu": max(1, round(data["cpu_millicores"] / 1000)), "memory_gib": max(1, round(data["memory_mb"] / 1024)),
        "clusters": ", ".join(data.get("clusters") or []),
        "volumes": [{"claim": m["claim"], "mount_path": m["mount_path"], "read_only": bool(m.get("read_only"))}
                    for m in data.get("volumes") or []],
    }  # fmt: skip
    if data.get("volume_gib"):
        initial["volume_gib"] = data["volume_gib"]
    if data.get("ttl_seconds"):
        initial["ttl_hours"] = _number(data["ttl_seconds"] / 3600)
    if data.get("idle_timeout_seconds"):
        initial["idle_minutes"] = max(1, data["idle_timeout_seconds"] // 60)
    if data.get("env"):
        messages.warning(
            request, f"Template {name} sets environment variables, which this form has no place for: launch it with "
            f"`gpuportal submit --template {name}` (or the API) to keep them.",
        )  # fmt: skip
    messages.info(
        request, f"Filled in from template {name} (version {version.number}) of team {team.name}: give it a new name."
    )
    return initial


@login_required
def notebook_list(request):
    items = access.visible_notebooks(request.user).select_related("team", "owner", "resource_class", "session")
    initial = _template_initial(request, request.GET["template"]) if request.GET.get("template") else {}
    form = NotebookLaunchForm(request.user, initial=initial)
    if request.method == "POST":
        form = NotebookLaunchForm(request.user, request.POST)
        if form.is_valid():
            data = form.cleaned_data
            fields = {
                "name": data["name"], "workspace": data["workspace"], "image": data["image"], "count": data["count"],
                "cpu_millicores": data["cpu"] * 1000, "memory_mb": data["memory_gib"] * 1024,
                "volume_gib": data["volume_gib"], "volumes": data["volumes"], "clusters": data["clusters"],
                "ttl_seconds": int(data["ttl_hours"] * 3600) if data["ttl_hours"] else None,
                "idle_timeout_seconds": data["idle_minutes"] * 60 if data["idle_minutes"] else None,
            }  # fmt: skip
            try:
                session = notebooks.launch_notebook(request.user, data["team"], data["resource_class"], fields)
            except PermissionDenied as error:
                form.add_error("team", str(error))
            except ValidationError as error:
                for field, errors in error.message_dict.items():
                    name = {"ttl_seconds": "ttl_hours", "idle_timeout_seconds": "idle_minutes"}.get(field, field)
                    if name == "volumes":
                        form.add_volume_errors(errors)
                    else:
                        form.add_error(name if name in form.fields else None, errors)
            else:
                request.session[TOKEN_SESSION_KEY.format(session.notebook.pk)] = session.token
                messages.success(request, f"Notebook {session.notebook.name} is queued; it starts when admitted.")
                return redirect(session.notebook)
    return render(
        request,
        "jobs/notebook_list.html",
        {
            "notebooks": items.distinct(),
            "form": form,
            "images": [image for kind in WORKSPACES.values() for image in kind.images()],
            "volume_choices": form.volume_choices(),
            "current": "notebooks",
        },
    )


@login_required
def notebook_detail(request, pk: int):
    notebook = get_object_or_404(
        access.visible_notebooks(request.user).select_related("team", "owner", "resource_class", "session"), pk=pk
    )
    now = timezone.now()
    token, token_waiting = None, False
    if notebook.owner_id == request.user.pk:
        token = request.session.pop(TOKEN_SESSION_KEY.format(notebook.pk), None)
        # Someone else started it: its token waits for the owner to collect (jobs.notebook.sessions.collect_token).
        token_waiting = token is None and bool(notebook.owner_token_salt)
    events = notebook.session.events.all() if notebook.session_id else []
    policy = NotebookPolicy.for_team(notebook.team)
    ttl_left = _seconds_left(notebook.expires_at, now) if notebook.is_active else None
    idle_left = _seconds_left(notebook.idle_deadline, now) if notebook.is_active else None
    context = {
        "notebook": notebook,
        "policy": policy,
        "can_manage": access.can_manage_notebook(request.user, notebook),
        "can_save_template": workload_templates.can_manage(request.user, notebook.team),
        # The time left, in words on the server, the same on the first render and on every live refresh.
        "ttl_left": None if ttl_left is None else duration_text(ttl_left),
        "idle_left": None if idle_left is None else duration_text(idle_left),
        "extend_refusal": notebooks.extend_refusal(notebook, policy) if notebook.is_active else "",
        # With the ingress asking the portal ("portal" access) the owner opens it in one click: no token to copy.
        "portal_access": workspace.portal_access(),
        "token": None if workspace.portal_access() else token,
        "token_waiting": token_waiting and not workspace.portal_access(),
        "ttl_text": duration_text(notebook.ttl_seconds, WORDS),
        "idle_text": duration_text(notebook.idle_timeout_seconds, WORDS),
        "max_ttl_text": duration_text(policy.max_ttl_seconds, WORDS),
        "events": events,
        "current": "notebooks",
        # Refresh the status, countdowns and timeline while the notebook runs or waits.
        "live_every": settings.PORTAL_LIVE_POLL_SECONDS if notebook.is_active else 0,
    }
    if notebook.session_id and notebook.session.started_at and not is_live_poll(request):  # the chart is not live
        context.update(
            samples.chart_context(
                request,
                {"job_id": notebook.session_id},
                default_range=samples.covering_range(notebook.session.started_at),
                threshold=settings.PORTAL_IDLE_THRESHOLD_PCT,
            )
        )
    return render(request, "jobs/notebook_detail.html", context)


def _act(request, pk: int, action):
    notebook = get_object_or_404(access.visible_notebooks(request.user).select_related("team"), pk=pk)
    try:
        message = action(notebook)
    except PermissionDenied as error:
        messages.error(request, str(error))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, message)
    return redirect(notebook)


@login_required
@require_POST
def notebook_extend(request, pk: int):
    def extend(notebook):
        notebook = notebooks.extend_notebook(request.user, notebook)
        return f"Notebook {notebook.name} now runs until {notebook.expires_at:%Y-%m-%d %H:%M} UTC."

    return _act(request, pk, extend)


@login_required
@require_POST
def notebook_stop(request, pk: int):
    def stop(notebook):
        notebooks.stop_by_person(request.user, notebook, request.POST.get("reason", ""), get_backend())
        return f"Notebook {notebook.name} is stopped; its GPUs are free and its home volume is kept."

    return _act(request, pk, stop)


@login_required
@require_POST
def notebook_start(request, pk: int):
    def start(notebook):
        session = notebooks.start_notebook(request.user, notebook)
        if session.notebook.owner_id == request.user.pk:
            request.session[TOKEN_SESSION_KEY.format(notebook.pk)] = session.token
        return f"Notebook {notebook.name} is starting again on the same home volume."

    return _act(request, pk, start)


@login_required
@require_POST
def notebook_token(request, pk: int):
    """The owner collects the token of a session a lead or admin started: shown once, on the page it redirects to."""
    notebook = get_object_or_404(access.visible_notebooks(request.user), pk=pk)
    try:
        token = notebooks.collect_token(request.user, notebook)
    except PermissionDenied as error:
        messages.error(request, str(error))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        request.session[TOKEN_SESSION_KEY.format(notebook.pk)] = token
    return redirect(notebook)


@login_required
@require_POST
def notebook_open(request, pk: int):
    """The owner's Open ("portal" access): a one-time ticket, and on to the notebook's address, which trades it for
    the notebook's own cookie (jobs.notebook.workspace)."""
    notebook = get_object_or_404(
        access.visible_notebooks(request.user).select_related("team", "owner", "session", "cluster"), pk=pk
    )
    if not workspace.portal_access():
        messages.error(request, "Notebooks here are signed into with their token; open the address and enter it.")
        return redirect(notebook)
    try:
        url = workspace.open_url(request.user, notebook)
    except PermissionDenied as error:
        messages.error(request, str(error))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        return redirect(url)
    return redirect(notebook)


@csrf_exempt  # the ingress asks with the method of the request it guards (a POST to Jupyter's API, too)
def workspace_auth(request, uri: str = ""):
    """The ingress's authorisation endpoint for notebooks: 204, 401 or 403 with no body (jobs.notebook.workspace).
    ``uri``: the original path Envoy's ext_authz appends to the endpoint's."""
    query = request.META.get("QUERY_STRING", "")
    path_uri = f"/{uri}" + (f"?{query}" if query else "") if uri else ""
    answer = workspace.authorise(request.headers, request.COOKIES, path_uri)
    response = HttpResponse(status=answer.status)
    if answer.cookie is not None:
        name, value = answer.cookie
        response.set_cookie(
            name, value, max_age=settings.PORTAL_WORKSPACE_COOKIE_SECONDS, path=answer.path,
            secure=answer.secure, httponly=True, samesite="Lax",
        )  # fmt: skip
    response["Cache-Control"] = "no-store"
    return response
