"""Browser forms for submitting jobs (a team's quota, usage and secret forms are in jobs.teams.forms). They check
the shape of what was typed; the services (jobs.actions) decide whether it may be queued or stored, and their
errors land on these fields."""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from accounts.models import Team
from core.api.bounds import is_id
from gpus.models import Cluster, ResourceClass
from jobs.checkpoints import SIGNALS, checkpoint_problems, normalised
from jobs.choices import Architecture, JobKind, Priority
from jobs.cycle.admit import NOWHERE, FleetKeys, Reach
from jobs.models import Quota, TeamSecret, TeamVolume
from jobs.storage.mounts import (
    check_shm,
    format_secret_env_text,
    format_secret_files_text,
    mount_path_problems,
    parse_secret_env_text,
    parse_secret_files_text,
    secret_env_problems,
    secret_file_dirs,
    secret_file_problems,
    volume_mount_problems,
)
from jobs.storage.secrets import check_secret_refs
from jobs.validation import (
    MAX_RETRIES,
    array_problems,
    check_request,
    cluster_problems,
    gang_problems,
    parse_env_text,
    parse_image,
    parse_labels_text,
    topology_words,
    validate_argv,
    validate_env,
    validate_job_name,
    validate_labels,
    validate_working_dir,
)

#: Offered as suggestions under the image field; any image reference may be typed.
IMAGE_SUGGESTIONS = [
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "nvcr.io/nvidia/tensorflow:24.01-tf2-py3",
    "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
    "nvidia/cuda:12.2.2-devel-ubuntu22.04",
    "pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime",
]

#: The kinds this form submits (notebooks have their own form), in plain words.
KIND_CHOICES = [
    (JobKind.BATCH.value, "Batch job (one pod)"),
    (JobKind.DISTRIBUTED.value, "Distributed training (workers on several nodes)"),
]
TOPOLOGY_MODE_CHOICES = [
    ("prefer", "Prefer: on one value when nodes allow, else anywhere"),
    ("require", "Require: wait until every worker fits on one value"),
]
WORKERS_HELP = (
    "Pods (ranks) of a distributed job, each on a node of its own with the GPUs above; together they hold "
    "workers × GPUs. Each gets MASTER_ADDR, MASTER_PORT, WORLD_SIZE (the workers), NODE_RANK (0, 1, …) and "
    "NPROC_PER_NODE (the GPUs per worker) for torchrun, and a large /dev/shm. A batch job has 1."
)

PREEMPTIBLE_HELP = (
    "May run on idle capacity above your team's guarantee and be stopped and requeued when a team with "
    "guaranteed quota needs it."
)


def split_words(text: str, field: str) -> list[str]:
    try:
        words = shlex.split(text or "")
    except ValueError as error:  # unbalanced quotes, a trailing backslash
        raise ValidationError(
            f"Could not split this into words ({error}). Close every quote, or put a value with spaces in quotes.",
            code=field,
        ) from None
    validate_argv(words, field)
    return words


@dataclass(frozen=True)
class _Work:
    """What ``Reach.clusters_of`` reads of a piece of work: the choices a form holds so far."""

    team_id: int
    clusters: tuple[str, ...]
    volumes: list[dict] | None
    secret_env: bool
    secret_files: tuple = ()


@dataclass
class VolumeChoices:
    """What a form's volume rows offer: ``volumes`` (TeamVolume rows, datasets included) on ``clusters``, the
    clusters the work may go to; ``where``: why some clusters are closed to it, in admission's words ("" when none
    is)."""

    clusters: list[str] = field(default_factory=list)
    volumes: list[TeamVolume] = field(default_factory=list)
    where: str = ""
    #: Whether the fleet has more than one cluster (with one, there is nothing to say about where).
    several: bool = False


def uses_text(text) -> bool:
    """Whether a text field of ``NAME=secret/key`` or ``secret /path`` lines names anything (blank lines and lines
    starting with # do not count, as parse_secret_env_text and parse_secret_files_text skip them)."""
    lines = str(text or "").splitlines()
    return any(line.strip() and not line.lstrip().startswith("#") for line in lines)


def volume_choices(teams, team=None, clusters=(), claims=(), uses_secrets: bool = False) -> VolumeChoices:
    """The volumes and published datasets a job, service or notebook form offers: those of ``team`` (None: of every
    team in ``teams``) that exist on a cluster where the work may go. That is jobs.cycle.admit's
    ``Reach.clusters_of`` (one rule with admission) for the work as chosen so far: the ``clusters`` picked (names the
    fleet does not know are left out; the submission names them), or with none picked every cluster the team's work
    may run on now (where its secrets and registry credentials are in step, for work that uses them or a team that
    has credentials: ``uses_secrets``); narrowed further, once ``claims`` are chosen, to the cluster that holds
    them, since a volume pins work to its cluster. When the work as chosen may go nowhere now, the picked clusters
    (or, for the volumes' sake, where the rest of it may go) are offered, and ``where`` says why.

    The submission's own check (jobs.validation.cluster_problems) stays the rule: it refuses a volume on none of the
    clusters picked, naming where it is."""
    fleet = FleetKeys()
    picked = tuple(name for name in clusters if name in fleet.ids)
    several = len(fleet.names) > 1
    if clusters and not picked:
        return VolumeChoices(several=several)
    reach = Reach.load(fleet)
    everywhere = sorted(name for pk, name in fleet.names.items() if pk not in fleet.unreachable)
    mounts = [{"claim": claim} for claim in claims if claim] or None

    def spread(work: _Work) -> tuple[list[str], str]:
        chosen, why = reach.clusters_of(work, fleet)
        return (everywhere if chosen == () else [] if chosen == NOWHERE else list(chosen)), why

    where: dict[int, list[str]] = {}
    sentence = ""
    for one in [team] if team is not None else list(teams):
        clusters_now, why = spread(_Work(one.pk, picked, mounts, uses_secrets))
        if not clusters_now:
            clusters_now = list(picked) if picked else spread(_Work(one.pk, (), None, uses_secrets))[0]
        where[one.pk] = clusters_now
        sentence = why if team is not None else ""
    rows = (
        TeamVolume.objects.filter(team_id__in=where, cluster__name__in={n for names in where.values() for n in names})
        .exclude(phase="Lost")
        .select_related("team", "cluster")
    )
    offered = [row for row in rows if row.cluster.name in where[row.team_id]]
    offered.sort(key=lambda row: (row.team.slug, where[row.team_id].index(row.cluster.name), row.name))
    shown = where[team.pk] if team is not None else sorted({n for names in where.values() for n in names})
    return VolumeChoices(shown, offered, sentence, several)


def form_volume_choices(teams, team, clusters_text, claims, uses_secrets: bool) -> VolumeChoices:
    """``volume_choices`` for what a form holds: the team field's value (an id among ``teams``; anything else is no
    team chosen), the clusters field's text (comma-separated), the claims of its volume rows. The form's own render
    and the page script's request (jobs.views.volume_choices) both read the form this way."""
    chosen = teams.filter(pk=int(team)).first() if is_id(str(team or "")) else None
    clusters = [name.strip() for name in str(clusters_text or "").split(",") if name.strip()]
    return volume_choices(teams, chosen, clusters, [str(claim).strip() for claim in claims], uses_secrets)


class VolumeRowsMixin:
    """Repeatable volume rows (claim, mount path, read-only) for a form, posted as parallel lists (volume_claim,
    volume_path, and volume_read_only carrying the index of each ticked row); blank rows are ignored.

    ``clean_volume_rows(team)`` checks the filled rows with jobs.storage.mounts.volume_mount_problems (the services'
    and the API's rules) and keeps each problem next to its row (``volume_rows()[i]["errors"]``), every problem at
    once; problems about the list as a whole, and a one-line summary that makes the form invalid, go under the
    "volumes" key of the form's errors. Shown by templates/jobs/_volume_rows.html."""

    VOLUME_ROW_FIELDS = ("volume_claim", "volume_path", "volume_read_only")
    #: Paths the workload mounts itself, which rows may not use (a notebook's home).
    reserved_mount_paths: tuple[str, ...] = ()
    #: Empty rows offered on a fresh form (the page script adds more).
    blank_volume_rows = 2

    def _typed_volume_rows(self) -> list[dict]:
        getlist = getattr(self.data, "getlist", None)
        if getlist is None:
            return []
        claims, paths, read_only = getlist("volume_claim"), getlist("volume_path"), getlist("volume_read_only")
        return [
            {
                "claim": (claims[index] if index < len(claims) else "").strip(),
                "mount_path": (paths[index] if index < len(paths) else "").strip(),
                "read_only": str(index) in read_only,  # a checkbox per row sends the row's index when ticked
            }
            for index in range(max(len(claims), len(paths)))
        ]

    def volume_rows(self) -> list[dict]:
        """The rows as typed ({"claim", "mount_path", "read_only", "errors"}), for (re-)showing the form."""
        row_errors = getattr(self, "_volume_row_errors", {})
        if not self.is_bound:
            blank = {"claim": "", "mount_path": "", "read_only": False}
            rows = [*(self.initial.get("volumes") or []), *([blank] * self.blank_volume_rows)]
        else:
            rows = self._typed_volume_rows() or [{"claim": "", "mount_path": "", "read_only": False}]
        return [{**row, "errors": row_errors.get(index, [])} for index, row in enumerate(rows)]

    def volume_choices(self) -> VolumeChoices:
        """What the volume rows offer for the form's choices as they stand (form_volume_choices): its team, its
        clusters, the claims of its rows and whether it names any of the team's secrets."""
        uses = any(uses_text(self[name].value()) for name in ("secret_env", "secret_files") if name in self.fields)
        claims = [row["claim"] for row in self.volume_rows()]
        teams, team = self.fields["team"].queryset, self["team"].value()
        if team is None and self.fields["team"].empty_label is None:  # a select without "none": its first is chosen
            team = next((one.pk for one in teams[:1]), None)
        return form_volume_choices(teams, team, self["clusters"].value(), claims, uses)

    def clean_volume_rows(self, team, reserved: dict[str, str] | None = None) -> list[dict]:
        """The filled rows as mounts ({"claim", "mount_path", "read_only"}); their problems recorded (with
        ``team`` None, e.g. no team chosen, only the paths are checked). ``reserved``: more paths the workload
        mounts (path → what), besides ``reserved_mount_paths``."""
        taken = {path: "" for path in self.reserved_mount_paths} | (reserved or {})
        filled = [
            (index, row) for index, row in enumerate(self._typed_volume_rows()) if row["claim"] or row["mount_path"]
        ]
        mounts = [
            {"claim": row["claim"], "mount_path": row["mount_path"], "read_only": row["read_only"]} for _, row in filled
        ]
        if team is None:
            problems = mount_path_problems([m["mount_path"] for m in mounts], taken)
        else:
            problems = volume_mount_problems(team, mounts, taken)
        self._volume_row_errors: dict[int, list[str]] = {}
        general = []
        for index, text in problems:
            if index is None:
                general.append(text)
            else:
                self._volume_row_errors.setdefault(filled[index][0], []).append(text[:1].upper() + text[1:])
        if self._volume_row_errors:
            numbers = [str(index + 1) for index in sorted(self._volume_row_errors)]
            which = f"row {numbers[0]}" if len(numbers) == 1 else f"rows {', '.join(numbers[:-1])} and {numbers[-1]}"
            general.append(f"Correct volume {which}: the problem is shown next to each.")
        if general:
            self.add_volume_errors(general)
        return mounts

    def add_volume_errors(self, messages: list[str]) -> None:
        """Errors about the volumes as a whole (shown above the rows, not at the top of the form)."""
        self._errors.setdefault("volumes", self.error_class()).extend(messages)


class DataSelect(forms.Select):
    """A select whose options carry data-* attributes computed from their model instance, for the page script
    (the job form offers only the resource classes the chosen team has quota for)."""

    def __init__(self, *args, option_data=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.option_data = option_data or (lambda instance: {})

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        instance = getattr(value, "instance", None)
        if instance is not None:
            option["attrs"].update({f"data-{k}": v for k, v in self.option_data(instance).items()})
        return option


class JobSubmitForm(VolumeRowsMixin, forms.Form):
    """What a person fills in to queue a job. ``submit_fields()`` gives jobs.actions.submit_job its fields."""

    #: Errors from jobs.actions.submit_job are keyed by these names; the rest match the form's own fields.
    SERVICE_FIELDS = {"cpu_millicores": "cpu", "max_runtime_seconds": "max_runtime_hours"}

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None, widget=DataSelect)
    name = forms.CharField(
        max_length=40,
        help_text="Lowercase letters, digits and '-', e.g. resnet50-train. It becomes part of the Kubernetes Job name.",
    )
    image = forms.CharField(
        max_length=255,
        help_text="A container image reference: [registry/]repository[:tag]. Pick a suggestion or type your own.",
    )
    command = forms.CharField(
        max_length=8000,
        help_text="One line, split into words like a shell does, e.g. python train.py --epochs 10.",
    )
    args = forms.CharField(
        label="Arguments",
        max_length=8000,
        required=False,
        help_text="Optional words appended after the image's entrypoint command.",
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="One NAME=value per line. Lines starting with # are ignored.",
    )
    secret_env = forms.CharField(
        label="Environment from secrets",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One NAME=secret/key per line, e.g. WANDB_API_KEY=wandb/token: the variable gets that key of the "
        "team's secret. The value never passes through the portal.",
    )
    secret_files = forms.CharField(
        label="Secrets as files",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One 'secret /directory [key ...]' per line, e.g. gcs /secrets/gcs key.json: each key becomes a "
        "read-only file in that directory (all keys when none are listed).",
    )
    kind = forms.ChoiceField(
        label="Kind",
        choices=KIND_CHOICES,
        initial=JobKind.BATCH,
        required=False,
        help_text="A distributed job runs its workers together (all start or none), e.g. torchrun across nodes.",
    )
    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.none(), empty_label=None, label="Resource class", widget=DataSelect
    )
    count = forms.IntegerField(
        label="GPUs (per worker)",
        min_value=1,
        max_value=64,
        initial=1,
        help_text="Units of the class, all on one node (for a distributed job: on each worker's node).",
    )
    workers = forms.IntegerField(label="Workers", min_value=1, initial=1, required=False, help_text=WORKERS_HELP)
    topology_key = forms.ChoiceField(
        label="Keep workers together",
        required=False,
        help_text="Optional: put every worker on nodes that share one value of this node label.",
    )
    topology_mode = forms.ChoiceField(
        label="How strictly",
        required=False,
        choices=[("", "—"), *TOPOLOGY_MODE_CHOICES],
        help_text="Needed when a label is picked: prefer starts sooner; require may wait longer.",
    )
    max_retries = forms.IntegerField(
        label="Retries",
        min_value=0,
        max_value=MAX_RETRIES,
        initial=0,
        required=False,
        help_text=f"0 to {MAX_RETRIES}: if a worker fails, every worker is stopped and the whole job starts again, "
        "this many times at most; then it is marked failed with the worker that failed.",
    )
    cpu = forms.DecimalField(
        label="CPU cores",
        min_value=Decimal("0.1"),
        max_value=Decimal(256),
        max_digits=6,
        decimal_places=3,
        initial=Decimal(2),
        help_text="Cores reserved for the job, e.g. 4 or 0.5.",
    )
    memory_mb = forms.IntegerField(
        label="Memory (MiB)", min_value=64, max_value=4 * 1024 * 1024, initial=8192, help_text="1024 MiB = 1 GiB."
    )
    priority = forms.TypedChoiceField(choices=Priority.choices, coerce=int, initial=Priority.NORMAL)
    preemptible = forms.BooleanField(required=False, help_text=PREEMPTIBLE_HELP)
    max_runtime_hours = forms.DecimalField(
        label="Maximum runtime (hours)", min_value=Decimal(0), max_digits=8, decimal_places=3, initial=Decimal(4)
    )
    checkpoint_signal = forms.ChoiceField(
        label="Checkpoint signal",
        required=False,
        choices=[("", "None declared"), *((name, name) for name in SIGNALS)],
        help_text="Optional: the signal the job checkpoints on. When it is preempted it gets this signal at once "
        "and the grace below before it is stopped and requeued.",
    )
    checkpoint_grace = forms.IntegerField(
        label="Checkpoint grace (seconds)",
        required=False,
        help_text="How long the job needs to write its checkpoint after the signal (30 s at least).",
    )
    checkpoint_report = forms.ChoiceField(
        label="Reports its checkpoints",
        required=False,
        choices=[("api", "With an API token you give it"), ("token", "With its own token (gpuportal checkpoint)")],
        initial="api",
        help_text="With its own token the portal gives the job PORTAL_CHECKPOINT_TOKEN and PORTAL_CHECKPOINT_URL; "
        "running `gpuportal checkpoint` inside it reports a checkpoint, and the token can do nothing else.",
    )
    labels = forms.CharField(
        label="Labels",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional, one key=value per line, e.g. git-sha=1a2b3c4 or example.com/run=42 (Kubernetes label "
        "grammar). They are put on the workload and its pods, and the job list can filter by them.",
    )
    working_dir = forms.CharField(
        label="Working directory",
        max_length=255,
        required=False,
        help_text="Optional absolute path the command starts in, e.g. /workspace; empty: the image's own.",
    )
    array_size = forms.IntegerField(
        label="Tasks (job array)",
        min_value=1,
        required=False,
        help_text="Optional: run this many copies as one job array. Each task is a job of its own that counts "
        "against quota; it sees its index (0, 1, …) in PORTAL_ARRAY_INDEX and the count in PORTAL_ARRAY_SIZE.",
    )
    array_parallelism = forms.IntegerField(
        label="At most at once",
        min_value=1,
        required=False,
        help_text="Optional: the most tasks of the array admitted at the same time. Empty: no cap.",
    )
    shm_mb = forms.IntegerField(
        label="Shared memory /dev/shm (MiB)",
        required=False,
        min_value=64,
        help_text="",  # says the operator's default (PORTAL_SHM_FRACTION): set in __init__
    )
    architecture = forms.ChoiceField(
        label="CPU architecture",
        choices=Architecture.choices,
        required=False,
        help_text="Pin the job to amd64 or arm64 nodes (the image must be built for it); Any runs it on any node "
        "of the class.",
    )
    clusters = forms.CharField(
        label="Clusters, most preferred first",
        required=False,
        max_length=500,
        help_text="",  # names the fleet's clusters: set in __init__
    )
    idempotency_key = forms.CharField(max_length=100, widget=forms.HiddenInput)
    #: The job this submission resubmits with changes ("Resubmit with changes" on its page).
    resubmit_of = forms.IntegerField(required=False, widget=forms.HiddenInput)

    #: How a spec field (jobs.actions.SUBMIT_FIELDS) is shown in this form: (form field, value → initial).
    #: A spec field not listed here has a form field of the same name and is shown as it is stored.
    SPEC_TO_FORM = {
        "command": ("command", lambda words: shlex.join(words or [])),
        "args": ("args", lambda words: shlex.join(words or [])),
        "env": ("env", lambda env: "\n".join(f"{e['name']}={e['value']}" for e in env or [])),
        "labels": ("labels", lambda labels: "\n".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))),
        "clusters": ("clusters", lambda names: ", ".join(names or [])),
        "secret_env": ("secret_env", format_secret_env_text),
        "secret_files": ("secret_files", format_secret_files_text),
        "architecture": ("architecture", lambda arch: arch or ""),
        "cpu_millicores": ("cpu", lambda m: Decimal(m) / 1000),
        "max_runtime_seconds": ("max_runtime_hours", lambda s: (Decimal(s) / 3600).quantize(Decimal("0.001"))),
    }

    #: Spec fields shown outside the form's fields: the repeatable volume rows read ``initial["volumes"]``
    #: (VolumeRowsMixin.volume_rows), a list of {"claim", "mount_path", "read_only"} as the job stores it; the
    #: checkpoint declaration is three fields, ``checkpoint_signal``, ``checkpoint_grace`` and ``checkpoint_report``
    #: (initial_from_job).
    SPEC_OUTSIDE_FIELDS = ("volumes", "checkpoint")

    @classmethod
    def initial_from_job(cls, job, spec_fields) -> dict:
        """The form's initial values for a copy of ``job`` ("Resubmit with changes"): every spec field, the team,
        the resource class, and the job it comes from."""
        initial = {"team": job.team_id, "resource_class": job.resource_class_id, "resubmit_of": job.pk}
        for spec in spec_fields:
            name, show = cls.SPEC_TO_FORM.get(spec, (spec, lambda value: value))
            initial[name] = show(getattr(job, spec))
        initial["volumes"] = [
            {"claim": m["claim"], "mount_path": m["mount_path"], "read_only": bool(m.get("read_only"))}
            for m in initial.get("volumes") or []
        ]
        declared = initial.pop("checkpoint", None) or {}
        if declared:
            initial["checkpoint_signal"] = declared.get("signal", "SIGTERM")
            initial["checkpoint_grace"] = declared.get("grace_seconds")
            initial["checkpoint_report"] = declared.get("report", "api")
        return initial

    def __init__(self, *args, user, teams, **kwargs):
        """``teams``: a queryset of the teams the user may submit for."""
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["shm_mb"].help_text = (
            f"Leave empty for the default ({settings.PORTAL_SHM_FRACTION:.0%} of the memory). It is in memory and "
            "counts against it."
        )
        fleet = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
        self.fields["clusters"].help_text = (
            f"Comma-separated, from {fleet}. It starts on the first with room and spills to the next; empty: "
            "wherever it can start soonest. Volumes pin it to their cluster."
        )
        team_list = list(teams)
        team_field, rc_field = self.fields["team"], self.fields["resource_class"]
        if len(team_list) == 1:
            team_field.widget = forms.HiddenInput()
            team_field.initial = team_list[0].pk
        else:
            team_field.widget.attrs["data-team-filter"] = rc_field.widget.attrs.get("id", "id_resource_class")
            team_field.widget.option_data = lambda team: {"slug": team.slug}
        team_field.queryset = teams  # after the widget: ModelChoiceField hands its choices to the widget then
        teams_by_class: dict[int, list[str]] = {}
        for team_slug, class_id in Quota.objects.filter(team__in=team_list, limit__gt=0).values_list(
            "team__slug", "resource_class_id"
        ):
            teams_by_class.setdefault(class_id, []).append(team_slug)
        classes = ResourceClass.objects.filter(present=True, pk__in=teams_by_class)
        if not user.is_staff:
            classes = classes.filter(hidden=False)
        rc_field.widget.option_data = lambda rc: {
            "teams": " ".join(teams_by_class.get(rc.pk, [])),
            "caveat": " ".join(filter(None, [rc.sharing_caveat, rc.architecture_note])),
        }
        rc_field.label_from_instance = lambda rc: f"{rc.display_name} · {rc.free} free now"
        rc_field.queryset = classes
        rc_field.help_text = "Only classes your team has quota for are offered; the number free is cluster-wide."
        self.fields["topology_key"].choices = [("", "Anywhere")] + [
            (key, topology_words(key)) for key in settings.PORTAL_TOPOLOGY_KEYS
        ]
        self.fields["workers"].max_value = settings.PORTAL_MAX_WORKERS
        self.fields["workers"].widget.attrs["max"] = settings.PORTAL_MAX_WORKERS
        max_hours = settings.PORTAL_JOB_MAX_RUNTIME_SECONDS / 3600
        self.fields[
            "max_runtime_hours"
        ].help_text = f"From 1 minute (0.017) to {max_hours:g} hours; the job is stopped if it runs longer."
        # No autocomplete="off": a browser does not restore such fields when the person comes Back to the form
        # after submitting, and an empty form is what they got (issue 31, item 15).
        for name in ("name", "image", "command", "args", "env", "secret_env", "secret_files"):
            self.fields[name].widget.attrs.update(autocapitalize="none", spellcheck="false")
        self.fields["image"].widget.attrs["list"] = "image-suggestions"
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)

    @property
    def team_secrets(self) -> list:
        """The secrets (names and keys) of the teams this form submits for, for the hint under the fields."""
        return list(TeamSecret.objects.filter(team__in=self.fields["team"].queryset).select_related("team"))

    @property
    def several_teams(self) -> bool:
        return not isinstance(self.fields["team"].widget, forms.HiddenInput)

    @property
    def image_suggestions(self) -> list[str]:
        return IMAGE_SUGGESTIONS

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        validate_job_name(name)
        return name

    def clean_image(self):
        image = self.cleaned_data["image"].strip()
        parse_image(image)
        return image

    def clean_command(self):
        words = split_words(self.cleaned_data["command"], "command")
        if not words:
            raise ValidationError("Give the command to run, e.g. python train.py.", code="command")
        return words

    def clean_args(self):
        return split_words(self.cleaned_data.get("args", ""), "args")

    def clean_env(self):
        env = parse_env_text(self.cleaned_data.get("env", ""))
        validate_env(env)
        return env

    def clean_labels(self):
        labels = parse_labels_text(self.cleaned_data.get("labels", ""))
        validate_labels(labels)
        return labels

    def clean_working_dir(self):
        path = self.cleaned_data.get("working_dir", "").strip()
        validate_working_dir(path)
        return path

    def clean_secret_env(self):
        items = parse_secret_env_text(self.cleaned_data.get("secret_env", ""))
        problems = secret_env_problems(items, [])
        if problems:
            raise ValidationError(problems)
        return items

    def clean_secret_files(self):
        items = parse_secret_files_text(self.cleaned_data.get("secret_files", ""))
        problems = secret_file_problems(items)
        if problems:
            raise ValidationError(problems)
        return items

    def clean_kind(self):
        return self.cleaned_data.get("kind") or JobKind.BATCH  # left out (an older form): a batch job

    def clean_workers(self):
        workers = self.cleaned_data.get("workers")
        return 1 if workers is None else workers

    def clean_clusters(self) -> list[str]:
        return [name.strip() for name in (self.cleaned_data.get("clusters") or "").split(",") if name.strip()]

    def clean_max_retries(self):
        retries = self.cleaned_data.get("max_retries")
        return 0 if retries is None else retries

    def clean_max_runtime_hours(self):
        hours = self.cleaned_data["max_runtime_hours"]
        seconds = int(hours * 3600)
        limit = settings.PORTAL_JOB_MAX_RUNTIME_SECONDS
        if not 60 <= seconds <= limit:
            raise ValidationError(
                f"Give a maximum runtime from 1 minute (0.017 hours) to {limit / 3600:g} hours.", code="max_runtime"
            )
        return hours

    def clean(self):
        """Also say now what jobs.actions.submit_job would refuse (no quota for the class, more units than the
        limit or any node holds, an image too new for the drivers), so one round shows every problem."""
        data = super().clean()
        # A volume may neither take nor enter a directory the job's secret files are mounted at (mount_errors).
        data["volumes"] = self.clean_volume_rows(data.get("team"), secret_file_dirs(data.get("secret_files")))
        # A malformed image does not hold the other checks back (ux-walk R5: one round shows every problem);
        # the CUDA check simply has no version to compare then.
        needed = ("team", "resource_class", "count", "cpu", "memory_mb")
        if all(name in data for name in needed):
            errors = check_request(
                team=data["team"],
                resource_class=data["resource_class"],
                count=data["count"],
                cpu_millicores=int(data["cpu"] * 1000),
                memory_mb=data["memory_mb"],
                image=data.get("image", ""),
                user=self.user,
                priority=data.get("priority"),
                architecture=data.get("architecture") or "",
                kind=data.get("kind") or JobKind.BATCH,
                workers=data.get("workers") or 1,
            )
            if problems := check_shm(data.get("shm_mb"), data["memory_mb"]):
                errors["shm_mb"] = problems
            if errors:
                self.add_service_errors(ValidationError(errors))
        if "team" in data and "secret_env" in data and "secret_files" in data:
            twice = sorted({i["name"] for i in data["secret_env"]} & {e["name"] for e in data.get("env") or []})
            for name in twice:
                self.add_error("secret_env", f"{name} is also in Environment; give each variable once.")
            errors = check_secret_refs(data["team"], data["secret_env"], data["secret_files"])
            if errors:
                self.add_service_errors(ValidationError(errors))
        if data.get("clusters") and "team" in data:
            if problems := cluster_problems(data["team"], data["clusters"], data):
                for problem in problems:
                    self.add_error("clusters", problem)
        if "kind" in data:
            gang = gang_problems(
                kind=data["kind"],
                topology_key=data.get("topology_key") or "",
                topology_mode=data.get("topology_mode") or "",
                max_retries=data.get("max_retries", 0),
                array=data.get("array_size") is not None,
            )
            if gang:
                self.add_service_errors(ValidationError(gang))
        signal, grace = data.get("checkpoint_signal") or "", data.get("checkpoint_grace")
        data["checkpoint"] = {}
        if signal or grace is not None:
            declared = {"signal": signal or "SIGTERM", "grace_seconds": grace,
                        "report": data.get("checkpoint_report") or "api"}  # fmt: skip
            if grace is None:
                self.add_error("checkpoint_grace", "Give the grace the job needs to checkpoint, or no signal.")
            elif problems := checkpoint_problems(declared):
                self.add_error("checkpoint_grace", problems)
            else:
                data["checkpoint"] = normalised(declared)
        size, parallelism = data.get("array_size"), data.get("array_parallelism")
        if parallelism is not None and size is None:
            self.add_error("array_parallelism", "Give the number of tasks too, or leave this empty.")
        elif size is not None:
            problems = array_problems(size, parallelism)
            if problems:
                self.add_service_errors(ValidationError(problems))
        return data

    def submit_fields(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "image": data["image"],
            "command": data["command"],
            "args": data["args"],
            "env": data["env"],
            "secret_env": data["secret_env"],
            "secret_files": data["secret_files"],
            "count": data["count"],
            "cpu_millicores": int(data["cpu"] * 1000),
            "memory_mb": data["memory_mb"],
            "priority": data["priority"],
            "preemptible": data["preemptible"],
            "max_runtime_seconds": int(data["max_runtime_hours"] * 3600),
            "labels": data["labels"],
            "working_dir": data["working_dir"],
            "volumes": data["volumes"],
            "shm_mb": data.get("shm_mb"),
            "architecture": data.get("architecture") or "",
            "clusters": data.get("clusters") or [],
            "kind": data["kind"],
            "workers": data["workers"],
            "topology_key": data.get("topology_key") or "",
            "topology_mode": data.get("topology_mode") or "",
            "max_retries": data["max_retries"],
            "checkpoint": data.get("checkpoint") or {},
        }

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the errors of jobs.actions.submit_job next to the fields they are about."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for key, messages in error.message_dict.items():
            field = self.SERVICE_FIELDS.get(key, key)
            if field == "volumes":
                self.add_volume_errors(messages)
            else:
                self.add_error(field if field in self.fields else None, messages)
