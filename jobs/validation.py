"""Checks on what a person or pipeline submits, shared by the browser form and the REST serializer.

Every message says what to change. Nothing here writes to the database. Where things may be mounted and the
shape of secret references live in jobs.storage.mounts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Count, F, Q
from django.db.models.fields.json import KeyTextTransform

from gpus.choices import ResourceKind
from gpus.dra_requests import dra_class_problems, shared_count_problems
from gpus.models import Cluster, Node, ResourceClass
from jobs.access import max_priority
from jobs.choices import JobKind, Priority, TopologyMode
from jobs.devices import dra_devices, is_dra, resource_of
from jobs.models import Quota, TeamVolume
from jobs.render import (
    ARRAY_INDEX_ENV,
    ARRAY_SIZE_ENV,
    ATTEMPT_ENV,
    CHECKPOINT_TOKEN_ENV,
    CHECKPOINT_URL_ENV,
    LAST_CHECKPOINT_ENV,
    PORTAL_LABEL_DOMAIN,
    RESUMING_ENV,
    TORCHRUN_ENV,
)
from vocab.names import (
    CPU_RESOURCE,
    GPU_CLIQUE_LABEL,
    KUBERNETES_RESERVED_LABEL_DOMAINS,
    MEMORY_RESOURCE,
    ZONE_LABEL,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_name,
    is_label_value,
)
from vocab.quantity import mebibytes, millicores

# The reference grammar of the container image distribution spec (docker/distribution reference.go):
# [registry[:port]/]path-component[/path-component...][:tag][@digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"  # \w is ASCII: the patterns below are compiled with re.ASCII
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
# Matched whole (fullmatch): ``$`` would let a trailing newline through, and \w without re.ASCII any Unicode
# letter or digit; Kubernetes and the container runtimes refuse both (audit finding 7).
IMAGE_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
#: Kubernetes' rule for an environment variable name (apimachinery validation.IsEnvVarName): letters, digits,
#: '_', '-' and '.', not starting with a digit. Matched whole, ASCII only; "." and names starting ".." are refused
#: too (its hasChDirPrefix).
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*", re.ASCII)

#: Variables the NVIDIA container runtime reads to decide which devices a container sees. A job setting
#: them could reach GPUs it was not allocated, so they are refused (the device plugin sets them).
RESERVED_ENV_PREFIXES = ("NVIDIA_", "CUDA_VISIBLE_DEVICES")
#: Variables the portal sets itself (jobs.render): an array task's index and the array's size, the attempt, and
#: what a job checkpoints with.
PORTAL_ENV_NAMES = (ARRAY_INDEX_ENV, ARRAY_SIZE_ENV, ATTEMPT_ENV, RESUMING_ENV, LAST_CHECKPOINT_ENV,
                    CHECKPOINT_TOKEN_ENV, CHECKPOINT_URL_ENV)  # fmt: skip

# Label grammar, from the Kubernetes documentation ("Labels and Selectors", Syntax and character set,
# https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set) and
# apimachinery's IsQualifiedName / IsValidLabelValue: a key is an optional DNS-subdomain prefix (at most 253
# characters) and '/', then a name of at most 63 characters that begins and ends with a letter or digit, with
# '-', '_', '.' between; a value is empty or the same shape as a name.
MAX_LABELS = 32
MAX_WORKING_DIR = 255

#: CUDA toolkit in NVIDIA's NGC framework containers by release (YY.MM), from the NGC PyTorch / TensorFlow
#: container release notes ("Container Version ... CUDA ..."). Only releases whose version is certain.
NGC_RELEASE_CUDA = {
    "23.01": "12.0", "23.02": "12.0", "23.03": "12.1", "23.04": "12.1", "23.05": "12.1", "23.06": "12.1",
    "23.07": "12.1", "23.08": "12.2", "23.09": "12.2", "23.10": "12.2", "23.11": "12.3", "23.12": "12.3",
    "24.01": "12.3", "24.02": "12.3", "24.03": "12.4", "24.04": "12.4", "24.05": "12.4", "24.06": "12.5",
    "24.07": "12.5", "24.08": "12.6", "24.09": "12.6", "24.10": "12.6", "24.11": "12.6", "24.12": "12.6",
    "25.01": "12.8", "25.02": "12.8", "25.03": "12.8",
}  # fmt: skip
NGC_FRAMEWORKS = ("pytorch", "tensorflow", "jax", "tritonserver", "nemo")


_PATH_ONLY = re.compile(
    rf"(?P<domain>)(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII
)


def parse_image(reference: str) -> re.Match:
    """The reference's parts; ValidationError unless the whole text is one reference (callers strip what a person
    typed around it first: a reference with whitespace or a newline in it is refused, as Kubernetes does)."""
    reference = reference or ""
    match = IMAGE_REFERENCE.fullmatch(reference) if len(reference) <= 255 else None
    domain = match.group("domain") if match else None
    if match and domain and not ("." in domain or ":" in domain or domain == "localhost"):
        # As in Docker: a first component without '.' or ':' (and not localhost) is part of the repository
        # path (nvidia/cuda is Docker Hub's nvidia/cuda), so it must be lowercase like the rest.
        match = _PATH_ONLY.fullmatch(reference)
    if not match:
        raise ValidationError(
            f"{reference!r} is not a container image reference. Use [registry/]repository[:tag][@digest] in "
            "lowercase ASCII, for example nvcr.io/nvidia/pytorch:24.01-py3 or nvidia/cuda:12.2.2-runtime-ubuntu22.04.",
            code="image",
        )
    return match


def image_cuda_version(reference: str) -> str | None:
    """The CUDA version (major.minor) an image needs, for images whose version is known: NVIDIA's CUDA images
    (``nvidia/cuda:12.4.1-…``) and NGC framework containers (``nvcr.io/nvidia/pytorch:24.01-py3``)."""
    try:
        match = parse_image(reference)
    except ValidationError:
        return None
    path, tag = match.group("path"), match.group("tag") or ""
    path = path.removeprefix("library/")
    name = path.rsplit("/", 1)[-1]
    if path == "nvidia/cuda":
        version = re.match(r"^(\d+)\.(\d+)(?:\.\d+)?(?:-|$)", tag)
        return f"{version.group(1)}.{version.group(2)}" if version else None
    if name in NGC_FRAMEWORKS and (match.group("domain") or "") == "nvcr.io":
        release = re.match(r"^(\d\d\.\d\d)(?:-|$)", tag)
        return NGC_RELEASE_CUDA.get(release.group(1)) if release else None
    return None


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return ()


def validate_job_name(name: str) -> None:
    if not name or len(name) > 40 or not is_dns1123_label(name):
        raise ValidationError(
            "Use 1 to 40 lowercase letters, digits and '-', starting and ending with a letter or digit "
            "(it becomes part of the Kubernetes Job name).",
            code="name",
        )


def validate_env(env: list[dict]) -> None:
    """``env`` is a list of {"name", "value"}; names follow Kubernetes' rule, are unique and not NVIDIA's own."""
    seen: set[str] = set()
    for item in env:
        name, value = item.get("name", ""), item.get("value", "")
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or name == "." or name.startswith(".."):
            raise ValidationError(
                f"{name!r} is not a valid environment variable name: use ASCII letters, digits, '_', '-' and '.', "
                "not starting with a digit or '..' (Kubernetes' rule).",
                code="env",
            )
        if name.startswith(RESERVED_ENV_PREFIXES):
            raise ValidationError(
                f"{name} is set by the NVIDIA device plugin to the GPUs the job was allocated; a job may not set it.",
                code="env",
            )
        if name in PORTAL_ENV_NAMES:
            raise ValidationError(
                f"{name} is set by the portal (docs/user-guide.md lists what it sets); a job may not set it.",
                code="env",
            )
        if name in seen:
            raise ValidationError(f"{name} is given twice; give each variable once.", code="env")
        if not isinstance(value, str) or len(value) > 4096:
            raise ValidationError(f"The value of {name} must be text of at most 4096 characters.", code="env")
        seen.add(name)
    if len(env) > 100:
        raise ValidationError("At most 100 environment variables.", code="env")


def parse_env_text(text: str) -> list[dict]:
    """``NAME=value`` lines (the browser form's format) as the list the model stores."""
    env = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "=" not in line:
            raise ValidationError(f"Line {number}: write NAME=value.", code="env")
        name, value = line.split("=", 1)
        env.append({"name": name.strip(), "value": value})
    return env


def _label_key_problems(key) -> list[str]:
    if not isinstance(key, str) or not key:
        return [f"Label key {key!r} is empty or not text; give a key such as git-sha or example.com/run."]
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in prefix or (not prefix and key.startswith("/")):
        problems.append(f"Label key '{key}' has more than one '/' or an empty prefix; use [prefix/]name.")
        return problems
    if prefix:
        if not is_dns1123_subdomain(prefix):
            problems.append(
                f"The prefix '{prefix}' of label key '{key}' is not a DNS subdomain: use at most 253 lowercase "
                "letters, digits, '-' and '.', starting and ending with a letter or digit (example.com)."
            )
        reserved = (PORTAL_LABEL_DOMAIN, *KUBERNETES_RESERVED_LABEL_DOMAINS)
        owner = next((d for d in reserved if prefix == d or prefix.endswith("." + d)), None)
        if owner == PORTAL_LABEL_DOMAIN:
            problems.append(f"Label key '{key}': the prefix {prefix} is the portal's own; pick another prefix.")
        elif owner:
            problems.append(
                f"Label key '{key}': the prefix {prefix} is reserved for Kubernetes core components; pick another."
            )
    if not is_label_name(name):
        problems.append(
            f"The name '{name}' of label key '{key}' must be 1 to 63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit."
        )
    return problems


def validate_labels(labels) -> None:
    """Job labels: {key: value} in Kubernetes label grammar, none with the portal's or Kubernetes' prefixes.
    Every problem is reported at once."""
    if not isinstance(labels, dict):
        raise ValidationError('Give labels as an object of key: value texts, e.g. {"git-sha": "1a2b3c4"}.')
    problems: list[str] = []
    if len(labels) > MAX_LABELS:
        problems.append(f"At most {MAX_LABELS} labels; this job has {len(labels)}.")
    for key, value in labels.items():
        problems += _label_key_problems(key)
        if not isinstance(value, str):
            problems.append(f"The value of label '{key}' must be text (put numbers in quotes).")
        elif not is_label_value(value):
            problems.append(
                f"The value '{value}' of label '{key}' must be empty or 1 to 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit."
            )
    if problems:
        raise ValidationError(problems, code="labels")


def parse_labels_text(text: str) -> dict[str, str]:
    """``key=value`` lines (the browser form's format) as the mapping the model stores."""
    labels: dict[str, str] = {}
    problems = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "=" not in line:
            problems.append(f"Line {number}: write key=value.")
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if key in labels:
            problems.append(f"Line {number}: the label '{key}' is given twice; give each key once.")
        labels[key] = value
    if problems:
        raise ValidationError(problems, code="labels")
    return labels


def validate_working_dir(path: str) -> None:
    """The container's working directory: empty (the image's own), or an absolute path without '..'.

    A working directory is not a mount, so jobs.storage.mounts.mount_path_problems' rules do not apply: a job may well
    start in /tmp, /home/user, /scratch (the portal's scratch directory) or a volume's mount path. Like a mount path
    it must be absolute and may not use '..' (the path must say where it is without resolving it)."""
    if not path:
        return
    problems = []
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append(f"'{path}' is not an absolute path; start it with '/', e.g. /workspace.")
    elif len(path) > MAX_WORKING_DIR:
        problems.append(f"At most {MAX_WORKING_DIR} characters.")
    elif any(ord(c) < 32 or c == "\x7f" for c in path):
        problems.append("The path contains control characters (a newline, a tab); remove them.")
    elif ".." in path.split("/"):
        problems.append(f"'{path}' contains '..'; give the directory itself, e.g. /workspace/project.")
    if problems:
        raise ValidationError(problems, code="working_dir")


def priority_problem(user, team, priority: int) -> str | None:
    """Why ``user`` may not give a job of ``team`` this priority (jobs.access.max_priority), or None."""
    highest = max_priority(user, team)
    if priority > highest:
        return (
            f"Team members may give priority up to {Priority(highest).label}; {Priority(priority).label} needs a "
            f"lead of team {team.name} or an admin."
        )
    return None


def array_problems(size, parallelism) -> dict[str, list[str]]:
    """The array's own bounds (PORTAL_JOB_ARRAY_MAX_SIZE), all at once."""
    errors: dict[str, list[str]] = {}
    limit = settings.PORTAL_JOB_ARRAY_MAX_SIZE
    if not isinstance(size, int) or not 1 <= size <= limit:
        errors["array_size"] = [f"Give from 1 to {limit} tasks (the portal's limit for one array)."]
    if parallelism is not None and (not isinstance(parallelism, int) or parallelism < 1):
        errors["array_parallelism"] = ["Give at least 1 task at a time, or leave it empty for no cap."]
    elif parallelism is not None and isinstance(size, int) and parallelism > size:
        errors["array_parallelism"] = [f"At most the number of tasks ({size}); leave it empty for no cap."]
    return errors


def validate_argv(words: list, field: str) -> None:
    if len(words) > 200 or any(not isinstance(w, str) or len(w) > 4096 for w in words):
        raise ValidationError(
            f"{field} must be a list of at most 200 strings of at most 4096 characters each.", code=field
        )


@dataclass
class ClassLimits:
    """What the largest present node of a class can hold, and the newest CUDA any of them supports."""

    nodes: int
    max_units: int
    max_cpu_m: int
    max_memory_mb: int
    max_cuda: str
    #: Units of the class each node offers (one entry per node), for "how many nodes could hold G each".
    units_per_node: list[int] = field(default_factory=list)

    def nodes_with(self, units: int) -> int:
        return sum(1 for n in self.units_per_node if n >= units)


def class_limits(resource_class: ResourceClass) -> ClassLimits:
    """What the class's present nodes can hold. One grouped query: a row per distinct shape (units of the class,
    CPU, memory, CUDA) with how many nodes have it, read from the JSON by the database; a submission costs the same
    on a cluster of ten nodes as on one of thousands (it decoded every node's allocatable before). A DRA class's
    units are its devices on each node, counted as admission counts them (``_dra_limits``)."""
    if is_dra(resource_class):
        return _dra_limits(resource_class)
    shapes = (
        Node.objects.admissible()
        .filter(resource_class.nodes_q())
        .values(
            units=KeyTextTransform(resource_class.resource_name, "allocatable"),
            cpu=KeyTextTransform(CPU_RESOURCE, "allocatable"),
            memory=KeyTextTransform(MEMORY_RESOURCE, "allocatable"),
            cuda=F("cuda_version"),
        )
        .annotate(nodes=Count("pk"))
        .order_by()
    )
    limits = ClassLimits(0, 0, 0, 0, "")
    for shape in shapes:
        try:
            units = int(shape["units"] or 0)
        except (TypeError, ValueError):
            continue
        if units <= 0:
            continue
        limits.nodes += shape["nodes"]
        limits.max_units = max(limits.max_units, units)
        limits.units_per_node.extend([units] * shape["nodes"])
        try:
            limits.max_cpu_m = max(limits.max_cpu_m, millicores(shape["cpu"] or 0))
            limits.max_memory_mb = max(limits.max_memory_mb, mebibytes(shape["memory"] or 0))
        except ValueError:
            pass
        cuda = shape["cuda"]
        if cuda and version_tuple(cuda) > version_tuple(limits.max_cuda or "0.0"):
            limits.max_cuda = cuda
    return limits


def _dra_limits(resource_class: ResourceClass) -> ClassLimits:
    """``class_limits`` of a DRA class: each admissible node's devices of the class with nothing taken (whole GPUs,
    static MIG devices, or the instances of the profile its partitionable GPUs could hold), on the nodes whose
    devices are of the class's product (a node of the GPU Operator's DRA stack may have no GFD product label), in
    the class's cluster when it is scoped to one. Three queries."""
    nodes = Q(cluster_id=resource_class.cluster_id) if resource_class.cluster_id is not None else Q()
    devices = dra_devices(nodes & Q(pk__in=Node.objects.admissible().values("pk")))
    wanted = resource_of(resource_class)
    units = {
        node_id: found.allocatable().get(wanted, 0)
        for node_id, found in devices.items()
        if found.product_label == resource_class.product_label
    }
    limits = ClassLimits(0, 0, 0, 0, "")
    shapes = Node.objects.filter(pk__in=[n for n, u in units.items() if u > 0]).values_list(
        "pk", KeyTextTransform(CPU_RESOURCE, "allocatable"), KeyTextTransform(MEMORY_RESOURCE, "allocatable"),
        "cuda_version",
    )  # fmt: skip
    for node_id, cpu, memory, cuda in shapes:
        limits.nodes += 1
        limits.max_units = max(limits.max_units, units[node_id])
        limits.units_per_node.append(units[node_id])
        try:
            limits.max_cpu_m = max(limits.max_cpu_m, millicores(cpu or 0))
            limits.max_memory_mb = max(limits.max_memory_mb, mebibytes(memory or 0))
        except ValueError:
            pass
        if cuda and version_tuple(cuda) > version_tuple(limits.max_cuda or "0.0"):
            limits.max_cuda = cuda
    return limits


def architecture_problem(resource_class, architecture: str) -> str:
    """Why a job of ``resource_class`` cannot be pinned to ``architecture`` ("" when it can): the class's nodes
    (their kubernetes.io/arch) must include it."""
    archs = resource_class.architecture_list
    if architecture and archs and architecture not in archs:
        return (
            f"The {resource_class.display_name} nodes are {', '.join(archs)}, not {architecture}; pick "
            f"{' or '.join(archs)} or leave the architecture to any."
        )
    return ""


#: What one pod of any kind may ask for (the job form's and the API's bounds), whatever door the request came in.
MIN_CPU_MILLICORES, MAX_CPU_MILLICORES = 100, 256_000
MIN_MEMORY_MB, MAX_MEMORY_MB = 64, 4 * 1024 * 1024


def spec_shape_problems(*, image: str, cpu_millicores: int, memory_mb: int, env=None) -> dict[str, list[str]]:
    """Field → messages for the parts of a spec every kind shares (jobs, notebooks, services): the image
    reference's grammar, CPU and memory within bounds, the environment's names. Part of ``check_request``, so a
    notebook launched over the API is checked exactly as a job is (audit finding 6)."""
    errors: dict[str, list[str]] = {}
    if image:  # an empty image is the form's or serializer's "required"; no second message for it
        try:
            parse_image(image)
        except ValidationError as error:
            errors["image"] = list(error.messages)
    if not isinstance(cpu_millicores, int) or not MIN_CPU_MILLICORES <= cpu_millicores <= MAX_CPU_MILLICORES:
        errors["cpu"] = [
            f"Ask for {MIN_CPU_MILLICORES / 1000:g} to {MAX_CPU_MILLICORES // 1000} CPU cores, e.g. 4 or 0.5."
        ]
    if not isinstance(memory_mb, int) or not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
        errors["memory_mb"] = [f"Ask for {MIN_MEMORY_MB} to {MAX_MEMORY_MB} MiB of memory (1024 MiB = 1 GiB)."]
    if env:
        try:
            validate_env(env)
        except ValidationError as error:
            errors["env"] = list(error.messages)
    return errors


def check_request(
    *,
    team,
    resource_class: ResourceClass,
    count: int,
    cpu_millicores: int,
    memory_mb: int,
    image: str,
    user,
    priority: int | None = None,
    architecture: str = "",
    kind: str = JobKind.BATCH,
    workers: int = 1,
    env=None,
    clusters=None,
) -> dict[str, list[str]]:
    """Field → messages for a request that could never run (or a priority above the user's role). Empty when
    it may be queued. A distributed job (``kind``) asks for ``workers`` × ``count``: each worker on a node of
    its own, the whole W × G within the team's limit. The one path every kind's request goes through: its
    shape first (``spec_shape_problems``), then quota, placement and the drivers. A DRA class must be claimable
    on the ``clusters`` the work names (or somewhere in the fleet): gpus.dra_requests."""
    errors: dict[str, list[str]] = spec_shape_problems(
        image=image, cpu_millicores=cpu_millicores, memory_mb=memory_mb, env=env
    )

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    gang = kind == JobKind.DISTRIBUTED
    if kind not in (JobKind.BATCH, JobKind.DISTRIBUTED):
        add("kind", "Submit a batch or a distributed job here; notebooks are launched from the notebook pages.")
    if workers_problem := workers_problem_text(kind, workers):
        add("workers", workers_problem)
        workers = 1

    if priority is not None and (problem := priority_problem(user, team, priority)):
        add("priority", problem)

    if resource_class.hidden and not user.is_staff:
        add("resource_class", f"{resource_class.display_name} is not offered; pick another resource class.")
        return errors
    if not resource_class.present:
        add(
            "resource_class",
            f"No node advertises {resource_class.display_name} any more; pick one of the current resource classes.",
        )
        return errors
    named = clusters if isinstance(clusters, list) and all(isinstance(c, str) for c in clusters) else None
    for problem in dra_class_problems(resource_class, named):
        add("resource_class", problem)
    for problem in shared_count_problems(resource_class, count):
        add("count", problem)
    # One row at most (unique per team and class): get() reads it without the joins Quota's ordering needs.
    try:
        quota = Quota.objects.get(team=team, resource_class=resource_class)
    except Quota.DoesNotExist:
        quota = None
    if quota is None or quota.limit == 0:
        add(
            "resource_class",
            f"Team {team.name} has no quota for {resource_class.display_name}; ask an admin for one or pick a "
            "class your team has quota for.",
        )
        return errors
    if gang and resource_class.kind != ResourceKind.GPU:
        add("resource_class", whole_gpu_text(resource_class))
    if gang and workers * count > quota.limit:
        add(
            "workers",
            f"{workers} workers × {count} = {workers * count} {resource_class.display_name} is more than team "
            f"{team.name}'s limit of {quota.limit} for that class; ask for at most {quota.limit} in all "
            "(workers × GPUs per worker).",
        )
    elif count > quota.limit:
        add(
            "count",
            f"{count} is more than team {team.name}'s limit of {quota.limit} for {resource_class.display_name}; "
            f"ask for at most {quota.limit}.",
        )
    limits = class_limits(resource_class)
    if limits.nodes == 0:
        add("resource_class", f"No node currently offers {resource_class.display_name}.")
        return errors
    if gang and count > limits.max_units:
        add(
            "count",
            f"No node has {count} × {resource_class.display_name}; the largest has {limits.max_units}. Each worker "
            f"runs on one node: ask for at most {limits.max_units} per worker, and more workers if you need more.",
        )
    elif gang and workers > limits.nodes_with(count):
        able = limits.nodes_with(count)
        add(
            "workers",
            f"{workers} workers need {workers} nodes with {count} × {resource_class.display_name} each (one worker "
            f"per node), and only {able} node{'s' if able != 1 else ''} can hold that; ask for at most {able} "
            "workers, or fewer GPUs per worker.",
        )
    elif count > limits.max_units:
        add(
            "count",
            f"No single node can hold {count} × {resource_class.display_name}: the largest has {limits.max_units}. "
            f"Ask for at most {limits.max_units} (a job's GPUs all run on one node).",
        )
    if limits.max_cpu_m and cpu_millicores > limits.max_cpu_m:
        largest = limits.max_cpu_m / 1000
        add("cpu", f"No node of this class has {cpu_millicores / 1000:g} CPUs; the largest has {largest:g}.")
    if limits.max_memory_mb and memory_mb > limits.max_memory_mb:
        largest = limits.max_memory_mb
        add("memory_mb", f"No node of this class has {memory_mb} MiB of memory; the largest has {largest}.")
    if problem := architecture_problem(resource_class, architecture):
        add("architecture", problem)
    needed = image_cuda_version(image)
    if needed and limits.max_cuda and version_tuple(needed) > version_tuple(limits.max_cuda):
        add(
            "image",
            f"{image} needs CUDA {needed}, but the drivers on the {resource_class.display_name} nodes support at most "
            f"CUDA {limits.max_cuda}. Pick an image built for CUDA {limits.max_cuda} or older.",
        )
    return errors


# -- distributed jobs -----------------------------------------------------------------------------------------

MAX_RETRIES = 10


def workers_problem_text(kind: str, workers) -> str:
    """Why ``workers`` does not fit ``kind`` ("" when it does): 1 to PORTAL_MAX_WORKERS for a distributed job,
    1 for any other."""
    most = settings.PORTAL_MAX_WORKERS
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        return f"Give a whole number of workers from 1 to {most}."
    if kind != JobKind.DISTRIBUTED and workers != 1:
        return (
            "Only a distributed job has more than one worker; pick Distributed training as the kind, or ask for "
            "1 worker."
        )
    if workers > most:
        return f"At most {most} workers (this portal's limit for one distributed job); ask for fewer."
    return ""


def whole_gpu_text(resource_class) -> str:
    what = {
        ResourceKind.MIG: "a MIG slice",
        ResourceKind.SHARED: "a time-sliced share",
        ResourceKind.MPS: "an MPS share",
    }
    return (
        f"{resource_class.display_name} is {what.get(resource_class.kind, 'not a whole GPU')}: a distributed job "
        "needs whole GPUs, because NCCL between its workers' pods wants whole devices. Pick a whole-GPU class."
    )


def topology_words(key: str) -> str:
    """A topology label in plain words for the form's select (the label itself follows in brackets)."""
    words = {ZONE_LABEL: "Same zone", GPU_CLIQUE_LABEL: "Same NVLink domain (GPU clique)"}
    return f"{words[key]} ({key})" if key in words else key


def gang_problems(
    *, kind: str, topology_key: str, topology_mode: str, max_retries, array: bool = False, env=(), secret_env=()
) -> dict[str, list[str]]:
    """The distributed-only settings of a request, checked without the database, every problem at once:
    a topology key from PORTAL_TOPOLOGY_KEYS with a mode (prefer or require), both or neither; a retry limit
    from 0 to MAX_RETRIES; none of these on a job that is not distributed; no array of distributed jobs; no
    variable of torchrun's rendezvous (TORCHRUN_ENV, set by the portal on every worker) in ``env`` or
    ``secret_env``."""
    errors: dict[str, list[str]] = {}
    gang = kind == JobKind.DISTRIBUTED
    keys = list(settings.PORTAL_TOPOLOGY_KEYS)
    if topology_key and topology_key not in keys:
        offered = ", ".join(keys) if keys else "none (the operator configured no topology labels)"
        errors["topology_key"] = [f"'{topology_key}' is not a topology label of this portal; pick one of: {offered}."]
    elif topology_key and not gang:
        errors["topology_key"] = ["Only a distributed job has a topology; pick Distributed training, or leave it out."]
    elif topology_key and not topology_mode:
        errors["topology_mode"] = ["Say whether the workers should prefer or require one value of the label."]
    if topology_mode and topology_mode not in (TopologyMode.PREFER, TopologyMode.REQUIRE):
        errors["topology_mode"] = ["Pick prefer or require, or leave it empty for no topology constraint."]
    elif topology_mode and not topology_key:
        errors["topology_mode"] = ["Pick the topology label the workers should share, or leave the mode empty."]
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or not 0 <= max_retries <= MAX_RETRIES:
        errors["max_retries"] = [f"Give from 0 to {MAX_RETRIES} retries."]
    elif max_retries and not gang:
        errors["max_retries"] = [
            "Retries restart a distributed job after one of its workers fails; a batch job takes 0 (resubmit it "
            "instead)."
        ]
    if gang:
        for field, items in (("env", env), ("secret_env", secret_env)):
            taken = [i.get("name") for i in items or () if isinstance(i, dict) and i.get("name") in TORCHRUN_ENV]
            if taken:
                errors.setdefault(field, []).append(
                    f"{', '.join(taken)}: the portal sets {'these' if len(taken) > 1 else 'this'} on every worker of "
                    "a distributed job (torchrun's rendezvous: rank 0's address, the port, the number of nodes, "
                    "the node's rank, GPUs per node); leave it out."
                )
    if array and gang:
        errors["array_size"] = [
            "A distributed job cannot be a job array; submit one distributed job with more workers, or separate jobs."
        ]
    return errors


def volume_places(team, mounts) -> dict[str, set[str]]:
    """Claim → the clusters that hold it, for the volumes ``mounts`` names that the team has (not Lost)."""
    claims = {m.get("claim") for m in mounts or [] if isinstance(m, dict) and isinstance(m.get("claim"), str)}
    places: dict[str, set[str]] = {}
    if not claims or team is None:
        return places
    rows = TeamVolume.objects.filter(team=team, name__in=claims).exclude(phase="Lost")
    for claim, cluster in rows.values_list("name", "cluster__name"):
        places.setdefault(claim, set()).add(cluster)
    return places


def volume_clusters(team, mounts) -> set[str] | None:
    """The clusters that hold every volume ``mounts`` names (work mounting them runs there); None when it mounts
    none. Claims the team does not have are left to the mount checks."""
    places = volume_places(team, mounts)
    return set.intersection(*places.values()) if places else None


def cluster_problems(team, clusters, fields: dict) -> list[str]:
    """What is wrong with a job's, notebook's or service's cluster preferences (names of registered clusters, most
    preferred first): every problem at once. A cluster that is unreachable now may be named (the work waits for it,
    or spills to the next). Work that mounts volumes runs on the cluster that holds them (jobs.cycle.admit), so the
    list must name it; work that uses the team's secrets or registry credentials waits on any cluster of its list
    until the team's presence there is in step (jobs.storage.presence), which is not a problem of the input."""
    if not clusters:
        return []
    if not isinstance(clusters, list) or not all(isinstance(name, str) for name in clusters):
        return ["Give a list of cluster names, most preferred first."]
    known = dict(Cluster.objects.values_list("name", "connection"))
    problems = []
    unknown = [name for name in clusters if name not in known]
    if unknown:
        problems.append(f"No cluster {', '.join(map(repr, unknown))}; the fleet has {', '.join(sorted(known))}.")
    if len(set(clusters)) != len(clusters):
        problems.append("Name each cluster once.")
    places = volume_places(team, fields.get("volumes"))
    holding = set.intersection(*places.values()) if places else None
    if holding and not holding & set(clusters):
        where = "; ".join(
            f"{claim} is on cluster{'s' if len(on) > 1 else ''} {' and '.join(sorted(on))}"
            for claim, on in sorted(places.items())
        )
        problems.append(
            f"The clusters listed ({', '.join(clusters)}) hold none of the volumes this mounts ({where}), and work "
            f"runs where its volumes are: add {' or '.join(sorted(holding))} to the list, or mount volumes of a "
            "cluster the list names."
        )
    return problems
