"""The shapes the API sends and takes, as TypedDicts (the JSON stays plain dicts; these give type checkers and
readers the field names). ``JOB_SPEC_FIELDS`` and friends are what the client documents as request fields; a test
checks each against the portal's OpenAPI schema."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

JobState = Literal["queued", "admitted", "running", "preempting", "succeeded", "failed", "cancelled", "lost"]
JobKind = Literal["batch", "notebook", "distributed"]

#: States a job never leaves.
FINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "lost"})


class EnvVar(TypedDict):
    name: str
    value: str


class JobSpec(TypedDict, total=False):
    """What a job request may carry (POST /api/v1/jobs/, and a resubmission's overrides). ``env`` may also be a
    {"NAME": "value"} object. ``resource_class`` is an id or a key such as nvidia.com/gpu@NVIDIA-H100-80GB-HBM3."""

    team: str
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[EnvVar] | dict[str, str]
    secret_env: list[dict[str, str]]
    secret_files: list[dict[str, Any]]
    resource_class: int | str
    count: int
    cpu: float
    memory_mb: int
    priority: Literal["low", "normal", "high"]
    preemptible: bool
    max_runtime_seconds: int
    labels: dict[str, str]
    working_dir: str
    volumes: list[dict[str, Any]]
    shm_mb: int
    architecture: str
    #: Clusters of the fleet the job may run on, most preferred first (spill-over); empty: anywhere.
    clusters: list[str]
    #: "batch" (default) or "distributed": ``workers`` pods × ``count`` GPUs each, one node per worker.
    kind: Literal["batch", "distributed"]
    workers: int
    #: One of the portal's topology labels, with ``topology_mode`` "prefer" or "require" (both or neither).
    topology_key: str
    topology_mode: Literal["", "prefer", "require"]
    #: Whole-job restarts after a worker fails (distributed jobs, 0 to 10).
    max_retries: int
    #: How the job checkpoints: {"signal": "SIGUSR1", "grace_seconds": 300, "report": "api" or "token"}; preemption
    #: sends the signal and stops the job after the grace (docs/user-guide.md, "Checkpoints and preemption").
    checkpoint: dict[str, Any]
    #: Start from this workload template of the team's (NAME or NAME@VERSION); the other fields change its spec.
    template: str


class ArraySpec(JobSpec, total=False):
    """A job array (POST /api/v1/job-arrays/): a job's fields plus ``size`` and ``parallelism``."""

    size: int
    parallelism: int | None


class EstimatedStart(TypedDict):
    """A queued job's estimated start: likely between ``low`` and ``high`` (ISO 8601); ``high`` None: possibly later
    than the portal's horizon; both None: not within it. ``at``: when it was estimated; ``text``: in words."""

    low: str | None
    high: str | None
    at: str
    text: str
    #: On a fleet: the cluster it is likely to start on ("" on one cluster).
    cluster: str


class Job(TypedDict, total=False):
    """A job as the API answers it (the spec's fields plus what the portal sets)."""

    url: str
    id: int
    team: str
    owner: str
    kind: JobKind
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[EnvVar]
    resource_class: int
    resource_class_name: str
    count: int
    cpu: float
    memory_mb: int
    priority: str
    preemptible: bool
    max_runtime_seconds: int
    state: JobState
    #: The state in words, as the portal's pages show it (a stopped notebook's session: "Stopped").
    state_label: str
    wait_reason: str
    wait_message: str
    wait_detail: dict[str, Any]
    queue_position: int | None
    #: While queued, once estimated (None before and after).
    estimated_start: EstimatedStart | None
    node_name: str
    #: The cluster the job was placed on (None until placed).
    cluster: str | None
    #: The clusters its owner named, most preferred first (empty: wherever it can start soonest).
    clusters: list[str]
    workload_name: str
    exit_code: int | None
    failure_reason: str
    submitted_at: str
    admitted_at: str | None
    started_at: str | None
    finished_at: str | None
    gpu_units: float
    resubmitted_from: int | None
    labels: dict[str, str]
    working_dir: str
    array: int | None
    array_index: int | None
    checkpoint: dict[str, Any]
    #: When the job last reported a checkpoint (None: never).
    last_checkpoint_at: str | None
    #: Normalised GPU-seconds lost to preemption since the job's last checkpoints.
    preemption_lost_gpu_seconds: float


class JobWait(Job, total=False):
    """A long-poll's answer (Client.wait_for_change): the job, and whether the timeout passed with no change."""

    timed_out: bool


class JobArray(TypedDict, total=False):
    url: str
    id: int
    team: str
    owner: str
    name: str
    size: int
    parallelism: int | None
    created: str
    counts: dict[str, int]
    summary: str
    tasks: list[int]


class JobLog(TypedDict):
    """GET /api/v1/jobs/{id}/logs/: the tail of the log."""

    pod: str
    log: str
    kept: bool
    cut_bytes: int
    note: str


class NotebookSpec(TypedDict, total=False):
    """What launching a notebook takes (POST /api/v1/notebooks/)."""

    team: str
    name: str
    image: str
    resource_class: int | str
    count: int
    cpu: float
    memory_mb: int
    volume_gib: int
    env: list[EnvVar] | dict[str, str]
    volumes: list[dict[str, Any]]
    #: Where its sessions may run, most preferred first; the first session's cluster keeps its home volume.
    clusters: list[str]
    ttl_seconds: int
    idle_timeout_seconds: int
    #: What runs in it: Jupyter (the default), VS Code in the browser or RStudio (docs/user-guide.md, "Notebooks").
    workspace: Literal["jupyter", "code-server", "rstudio"]
    #: Start from this notebook template of the team's (NAME or NAME@VERSION); the other fields change its spec.
    template: str


class Notebook(TypedDict, total=False):
    id: int
    url: str
    team: str
    owner: str
    name: str
    image: str
    resource_class: int
    count: int
    state: Literal["active", "stopped"]
    status: str
    notebook_url: str
    session: int | None
    clusters: list[str]
    #: The cluster of its home volume, where its sessions run (None until the first session is placed).
    cluster: str | None
    created: str
    expires_at: str | None
    ttl_seconds_left: int | None
    idle_seconds_left: int | None
    stop_reason: str
    stopped_at: str | None
    #: Only in the answer to launch and start: the notebook's login token, shown once.
    token: str


class Probe(TypedDict, total=False):
    type: Literal["http", "tcp"]
    path: str
    port: int
    initial_delay_seconds: int
    period_seconds: int
    failure_threshold: int


class ServiceSpec(TypedDict, total=False):
    """What starting a service takes (POST /api/v1/services/); in a spec file with ``kind: service`` (the
    ``kind`` key is the client's, not sent)."""

    team: str
    name: str
    image: str
    command: list[str] | str
    args: list[str] | str
    env: list[EnvVar] | dict[str, str]
    secret_env: list[dict[str, str]]
    secret_files: list[dict[str, Any]]
    resource_class: int | str
    count: int
    cpu: float | str
    memory_mb: int
    priority: str | int
    labels: dict[str, str]
    working_dir: str
    volumes: list[dict[str, Any]]
    shm_mb: int | None
    architecture: str
    #: Where its replicas may run, most preferred first; all of them run on one cluster.
    clusters: list[str]
    port: int
    readiness: Probe
    liveness: Probe | None
    min_replicas: int
    max_replicas: int
    metric: Literal["cpu", "pods", "external"]
    metric_name: str
    metric_target: float
    #: Start from this service template of the team's (NAME or NAME@VERSION); the other fields change its spec.
    template: str


class TemplateVersion(TypedDict, total=False):
    """One saved spec of a workload template; versions are numbered from 1 and never change."""

    number: int
    #: As the create API of the template's kind takes it (without team).
    spec: dict[str, Any]
    created_by: str | None
    created_at: str
    #: The job it was saved from, if any.
    source_job: int | None


class WorkloadTemplate(TypedDict, total=False):
    """A team's workload template (GET /api/v1/teams/{slug}/templates/): what it makes and its versions, newest
    first; ``gpuportal submit --template NAME`` starts one."""

    team: str
    name: str
    #: What it makes: a job (distributed jobs and job arrays too), a notebook or a service.
    kind: Literal["job", "notebook", "service"]
    description: str
    created_at: str
    updated_at: str
    latest: int | None
    versions: list[TemplateVersion]


class Service(TypedDict, total=False):
    url: str
    id: int
    team: str
    owner: str
    name: str
    state: Literal["active", "paused", "stopped"]
    job: int
    job_state: str
    wait_reason: str
    wait_message: str
    image: str
    port: int
    min_replicas: int
    max_replicas: int
    granted_replicas: int
    borrowed_replicas: int
    revision: int
    size: str
    address: dict[str, str]
    health: dict[str, Any]
    rollout: dict[str, Any]
    hpa_desired: int | None
    replica_pods: list[dict[str, Any]]
    clusters: list[str]
    cluster: str | None


class ResourceClass(TypedDict, total=False):
    """What can be requested (GET /api/v1/resource-classes/): ``key`` is what a spec's ``resource_class`` takes."""

    id: int
    key: str
    display_name: str
    kind: Literal["gpu", "mig", "shared", "mps"]
    resource_name: str
    product: str
    profile: str
    #: How users share one device (an admin's choice on a DRA class); a unit is then 1/replicas of a device.
    sharing_strategy: Literal["none", "time-slicing", "mps"]
    replicas: int
    memory_mb: int
    gpu_fraction: float
    total: int
    allocatable: int
    in_use: int
    free: int
    node_count: int
    present: bool
    #: Per cluster with units of the class: {"cluster", "total", "free"}.
    clusters: list[dict[str, Any]]
    #: A DRA class's alternatives: keys of the classes a job may get instead, first choice first.
    alternatives: list[str]


class NodeInfo(TypedDict, total=False):
    """A node as GET /api/v1/nodes/ lists it (the fields the command line reads; the API sends more)."""

    name: str
    #: The cluster of the fleet the node belongs to.
    cluster: str
    product: str
    health: str
    ready: bool
    unschedulable: bool
    gpu_count: int
    #: Resource name → quantity the node advertises, e.g. {"nvidia.com/gpu": "8", "cpu": "64", …}.
    allocatable: dict[str, str]
    #: Resource name → units held by the portal's work now.
    gpu_in_use: dict[str, int]
    team: str | None


class GPUInfo(TypedDict, total=False):
    """A GPU as GET /api/v1/gpus/ lists it."""

    id: int
    node: str
    #: The cluster of the fleet its node belongs to.
    cluster: str
    index: int
    uuid: str
    product: str
    memory_mb: int | None
    mig_enabled: bool
    #: "exclusive", "time-slicing" or "mps".
    sharing: str
    replicas: int
    mig_partitions: list[dict[str, Any]]


class QuotaInfo(TypedDict, total=False):
    """A team's quota for one class (GET /api/v1/quotas/)."""

    id: int
    team: str
    resource_class: int
    resource_class_name: str
    resource_class_key: str
    guaranteed: int
    limit: int
    monthly_gpu_hours: str | None
    #: Cluster name → the most units the team may hold of the class on that cluster (the limit counts the fleet).
    cluster_caps: dict[str, int]
    used: int


class Usage(TypedDict):
    """GET /api/v1/usage/: GPU-hours per day (summed over the teams), per team and per member (with "team" and
    "user" keys in the rows of ``teams`` and ``members``)."""

    team: str
    start: str
    end: str
    days: list[dict[str, Any]]
    teams: list[dict[str, Any]]
    members: list[dict[str, Any]]


class PeopleUsage(TypedDict):
    """GET /api/v1/usage/people/: per month, team, person and resource class (``rows``), per person (``people``)
    and in all (``total``): "gpu_hours", "jobs", "used_gpu_hours", "idle_gpu_hours", "preempted_gpu_hours",
    "energy_kwh" and "joules_per_gpu_hour" (None without energy readings), and "co2e_kg" where the portal has a
    carbon factor (``carbon_g_per_kwh``). ``scope``: "me", a team's slug or "all"."""

    scope: str
    months: list[str]
    rows: list[dict[str, Any]]
    people: list[dict[str, Any]]
    total: dict[str, Any]
    carbon_g_per_kwh: float | None


class MemberShares(TypedDict):
    """GET /api/v1/teams/{slug}/member-shares/: fair share among a team's members. Each of ``members`` has "user",
    "role", "weight" (1: an equal share), "recent_gpus" (the decayed average of GPUs held), "use_share" and
    "weight_share" (fractions of the team's) and "ratio" (use_share / weight_share: 1 is exactly their share)."""

    team: str
    member_share: bool
    half_life_seconds: float
    members: list[dict[str, Any]]


class Me(TypedDict):
    username: str
    is_admin: bool
    teams: list[dict[str, str]]


#: The request fields the client documents for each kind of request (checked against the OpenAPI schema).
JOB_SPEC_FIELDS: tuple[str, ...] = tuple(JobSpec.__annotations__)
ARRAY_SPEC_FIELDS: tuple[str, ...] = (*JOB_SPEC_FIELDS, "size", "parallelism")
NOTEBOOK_SPEC_FIELDS: tuple[str, ...] = tuple(NotebookSpec.__annotations__)
SERVICE_SPEC_FIELDS: tuple[str, ...] = tuple(ServiceSpec.__annotations__)
#: The spec file's ``kind`` that makes ``gpuportal services create`` (and Client.submit) start a service.
SERVICE_KIND = "service"
#: Fields only an array request has: a spec with any of them goes to /api/v1/job-arrays/.
ARRAY_ONLY_FIELDS: frozenset[str] = frozenset({"size", "parallelism"})


class JobEvent(TypedDict, total=False):
    """One timeline event from an event stream (Client.events, Client.team_events)."""

    id: int
    job: int
    job_name: str
    #: The job's state when the portal sent the event.
    state: str
    #: The cluster the job was placed on (None until placed).
    cluster: str | None
    kind: str
    message: str
    at: str
    data: dict[str, Any]


#: The states a plan run ends in (Client.wait_plan returns once it is in one).
PLAN_FINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class PlanRun(TypedDict, total=False):
    """A capacity-planner run (Client.create_plan, get_plan, list_plans, cancel_plan, wait_plan)."""

    id: int
    url: str
    #: queued, running, succeeded, failed or cancelled.
    state: str
    state_display: str
    #: 0..1 while it runs, with what the replay is doing in ``message``.
    progress: float
    message: str
    cancel_requested: bool
    error: str
    created_by: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    window_start: str
    window_end: str
    #: The cluster the replay is limited to; "" for the whole fleet.
    cluster: str
    #: Each {name, cluster, changes}: the cluster its changes are made to.
    proposals: list[dict[str, Any]]
    options: dict[str, Any]
    #: The engine's figures once succeeded (not in lists): window, cluster, clusters, scenarios (with per-cluster
    #: figures), fidelity, seconds.
    results: dict[str, Any] | None
