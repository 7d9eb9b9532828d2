"""Checks on what a person or pipeline submits, shared by the browser form and the REST serializer.

Every message says what to change. Nothing here writes to the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError

from gpus.models import Node, ResourceClass
from vocab.names import CPU_RESOURCE, KUBERNETES_RESERVED_LABEL_DOMAINS, MEMORY_RESOURCE
from vocab.quantity import mebibytes, millicores

from .access import max_priority
from .choices import ACTIVE_STATES, Priority
from .models import Job, Quota, TeamVolume
from .render import ARRAY_INDEX_ENV, ARRAY_SIZE_ENV, PORTAL_LABEL_DOMAIN

# The reference grammar of the container image distribution spec (docker/distribution reference.go):
# [registry[:port]/]path-component[/path-component...][:tag][@digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: Variables the NVIDIA container runtime reads to decide which devices a container sees. A job setting
#: them could reach GPUs it was not allocated, so they are refused (the device plugin sets them).
RESERVED_ENV_PREFIXES = ("NVIDIA_", "CUDA_VISIBLE_DEVICES")
#: Variables the portal sets on every task of a job array (jobs.render): the task's index and the array's size.
PORTAL_ENV_NAMES = (ARRAY_INDEX_ENV, ARRAY_SIZE_ENV)

# Label grammar, from the Kubernetes documentation ("Labels and Selectors", Syntax and character set,
# https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set) and
# apimachinery's IsQualifiedName / IsValidLabelValue: a key is an optional DNS-subdomain prefix (at most 253
# characters) and '/', then a name of at most 63 characters that begins and ends with a letter or digit, with
# '-', '_', '.' between; a value is empty or the same shape as a name.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_LABELS = 32
MAX_WORKING_DIR = 255

#: CUDA toolkit in NVIDIA's NGC framework containers by release (YY.MM), from the NGC PyTorch / TensorFlow
#: container release notes ("Container Version ... CUDA ..."). Only releases whose version is certain.
NGC_RELEASE_CUDA = {
    "23.01": "12.0",
    "23.02": "12.0",
    "23.03": "12.1",
    "23.04": "12.1",
    "23.05": "12.1",
    "23.06": "12.1",
    "23.07": "12.1",
    "23.08": "12.2",
    "23.09": "12.2",
    "23.10": "12.2",
    "23.11": "12.3",
    "23.12": "12.3",
    "24.01": "12.3",
    "24.02": "12.3",
    "24.03": "12.4",
    "24.04": "12.4",
    "24.05": "12.4",
    "24.06": "12.5",
    "24.07": "12.5",
    "24.08": "12.6",
    "24.09": "12.6",
    "24.10": "12.6",
    "24.11": "12.6",
    "24.12": "12.6",
    "25.01": "12.8",
    "25.02": "12.8",
    "25.03": "12.8",
}
NGC_FRAMEWORKS = ("pytorch", "tensorflow", "jax", "tritonserver", "nemo")


_PATH_ONLY = re.compile(
    rf"^(?P<domain>)(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)


def parse_image(reference: str) -> re.Match:
    reference = (reference or "").strip()
    match = IMAGE_REFERENCE.match(reference) if len(reference) <= 255 else None
    domain = match.group("domain") if match else None
    if match and domain and not ("." in domain or ":" in domain or domain == "localhost"):
        # As in Docker: a first component without '.' or ':' (and not localhost) is part of the repository
        # path (nvidia/cuda is Docker Hub's nvidia/cuda), so it must be lowercase like the rest.
        match = _PATH_ONLY.match(reference)
    if not match:
        raise ValidationError(
            f"'{reference}' is not a container image reference. Use [registry/]repository[:tag][@digest] in lowercase, "
            "for example nvcr.io/nvidia/pytorch:24.01-py3 or nvidia/cuda:12.2.2-runtime-ubuntu22.04.",
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
    if not name or len(name) > 40 or not JOB_NAME.match(name):
        raise ValidationError(
            "Use 1 to 40 lowercase letters, digits and '-', starting and ending with a letter or digit "
            "(it becomes part of the Kubernetes Job name).",
            code="name",
        )


def validate_env(env: list[dict]) -> None:
    """``env`` is a list of {"name", "value"}; names are shell identifiers, unique, not NVIDIA's own."""
    seen: set[str] = set()
    for item in env:
        name, value = item.get("name", ""), item.get("value", "")
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ValidationError(
                f"'{name}' is not a valid environment variable name: use letters, digits and '_', not starting "
                "with a digit.",
                code="env",
            )
        if name.startswith(RESERVED_ENV_PREFIXES):
            raise ValidationError(
                f"{name} is set by the NVIDIA device plugin to the GPUs the job was allocated; a job may not set it.",
                code="env",
            )
        if name in PORTAL_ENV_NAMES:
            raise ValidationError(
                f"{name} is set by the portal on the tasks of a job array; a job may not set it.", code="env"
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
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
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
    if len(name) > 63 or not _LABEL_NAME.match(name):
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
        elif len(value) > 63 or (value and not _LABEL_NAME.match(value)):
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

    A working directory is not a mount, so mount_path_problems' rules do not apply: a job may well start in /tmp,
    /home/user, /scratch (the portal's scratch directory) or a volume's mount path. Like a mount path it must be
    absolute and may not use '..' (the path must say where it is without resolving it)."""
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


def class_limits(resource_class: ResourceClass) -> ClassLimits:
    nodes = (
        Node.objects.present()
        .filter(product_label=resource_class.product_label)
        .only("allocatable", "cuda_version", "name")
    )
    limits = ClassLimits(0, 0, 0, 0, "")
    for node in nodes:
        units = int(node.allocatable.get(resource_class.resource_name, 0) or 0)
        if units <= 0:
            continue
        limits.nodes += 1
        limits.max_units = max(limits.max_units, units)
        try:
            limits.max_cpu_m = max(limits.max_cpu_m, millicores(node.allocatable.get(CPU_RESOURCE, 0)))
            memory = mebibytes(node.allocatable.get(MEMORY_RESOURCE, 0))
            limits.max_memory_mb = max(limits.max_memory_mb, memory)
        except ValueError:
            pass
        if node.cuda_version and version_tuple(node.cuda_version) > version_tuple(limits.max_cuda or "0.0"):
            limits.max_cuda = node.cuda_version
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
) -> dict[str, list[str]]:
    """Field → messages for a request that could never run (or a priority above the user's role). Empty when
    it may be queued."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

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
    quota = Quota.objects.filter(team=team, resource_class=resource_class).first()
    if quota is None or quota.limit == 0:
        add(
            "resource_class",
            f"Team {team.name} has no quota for {resource_class.display_name}; ask an admin for one or pick a "
            "class your team has quota for.",
        )
        return errors
    if count > quota.limit:
        add(
            "count",
            f"{count} is more than team {team.name}'s limit of {quota.limit} for {resource_class.display_name}; "
            f"ask for at most {quota.limit}.",
        )
    limits = class_limits(resource_class)
    if limits.nodes == 0:
        add("resource_class", f"No node currently offers {resource_class.display_name}.")
        return errors
    if count > limits.max_units:
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


def active_units(team, resource_class) -> int:
    return sum(
        Job.objects.filter(team=team, resource_class=resource_class, state__in=ACTIVE_STATES).values_list(
            "count", flat=True
        )
    )


# -- volume mounts ---------------------------------------------------------------------------------------------

#: Directories a mount may neither be nor sit under: the image's system tree (mounting over it would replace the
#: programs and libraries the container runs), the kernel's pseudo file systems, and /dev/shm and /scratch, which
#: the portal mounts itself on every workload (jobs.render).
SYSTEM_DIRECTORIES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin",
    "/sys", "/usr", "/var/run", "/var/lib", "/scratch",
)  # fmt: skip
#: Directories a mount may go under but not replace: hiding them would hide the image's own files there.
SYSTEM_PATHS = ("/home", "/mnt", "/opt", "/srv", "/tmp", "/var")  # noqa: S108 - refused mount points, not temp files
#: Characters a mount path may use: letters, digits and "._-" in each component. No ':' (volumeMounts refuse it
#: on some runtimes), no spaces, no shell or glob characters, nothing that needs quoting.
_PATH_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
MAX_MOUNT_PATH = 200
MAX_MOUNTS = 16
#: What a claim name is (a DNS-1123 subdomain, Kubernetes' rule for object names).
CLAIM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Keys a mount in the API may have; anything else (hostPath, nfs, emptyDir, ...) is refused, not ignored.
MOUNT_KEYS = frozenset({"claim", "mount_path", "read_only"})


#: Where a workload mounts something already: paths alone (a notebook's home), or path → what is there.
Reserved = tuple[str, ...] | dict[str, str]


def mount_path_problems(paths: list, reserved: Reserved = ()) -> list[tuple[int, str]]:
    """Every problem with these mount paths as (index into ``paths``, sentence that says what to fix). The one rule
    for every path a user mounts something at: job and notebook volumes and secret files alike.

    A path must be absolute and plain (no '.', '..', '//', trailing '/', or characters outside letters, digits and
    "._-"), must not be '/', a system directory or under one (SYSTEM_DIRECTORIES), nor one of the directories the
    image keeps its own files in (SYSTEM_PATHS; a directory under them is fine), nor at or under a ``reserved``
    path (what the workload mounts already: a notebook's home, a secret's files), and each path may be used once.
    Pure: no database."""
    problems: list[tuple[int, str]] = []
    seen: set[str] = set()
    taken = dict(reserved) if isinstance(reserved, dict) else {path: "" for path in reserved or ()}
    for index, path in enumerate(paths):
        if not isinstance(path, str) or not path:
            problems.append((index, "give the path to mount the volume at, e.g. /data."))
            continue
        shown = path if len(path) <= 60 else path[:57] + "…"
        if len(path) > MAX_MOUNT_PATH:
            problems.append((index, f"the path is longer than {MAX_MOUNT_PATH} characters; use a shorter one."))
            continue
        if not path.startswith("/"):
            problems.append(
                (index, f"'{shown}' is relative; give an absolute path such as /data/{shown.lstrip('./')}.")
            )
            continue
        if path == "/":
            problems.append(
                (index, "a volume cannot be mounted over the container's root; use a directory like /data.")
            )
            continue
        parts = path[1:].split("/")
        if any(part in ("", ".", "..") for part in parts):
            problems.append(
                (index, f"'{shown}' has an empty, '.' or '..' component (or a trailing '/'); write the plain "
                 "path, e.g. /data/imagenet.")
            )  # fmt: skip
            continue
        if not all(_PATH_COMPONENT.fullmatch(part) for part in parts):
            problems.append(
                (index, f"'{shown}' has characters other than letters, digits, '.', '_' and '-' (or a part "
                 "starting with '.' or '-'); rename it, e.g. /data/imagenet.")
            )  # fmt: skip
            continue
        blocked = next(
            (d for d in (*SYSTEM_DIRECTORIES, *taken) if path == d or path.startswith(d.rstrip("/") + "/")), None
        )
        if blocked:
            if taken.get(blocked):
                owner = taken[blocked]
            else:
                owner = "the portal" if blocked in ("/scratch", *taken) else "the container's system"
            problems.append(
                (index, f"'{shown}' is {'' if path == blocked else 'inside '}{blocked}, which belongs to {owner}; "
                 "mount under a directory of your own such as /data or /checkpoints.")
            )  # fmt: skip
            continue
        if path in SYSTEM_PATHS:
            problems.append(
                (index, f"'{shown}' would hide what the image keeps in {path}; mount in a directory of its own, "
                 f"e.g. {path}/data.")
            )  # fmt: skip
            continue
        if path in seen:
            problems.append((index, f"'{shown}' is used by an earlier mount too; give each volume its own path."))
            continue
        seen.add(path)
    return problems


def _numbered(problems: list[tuple[int | None, str]]) -> list[str]:
    """ "Mount N: ..." sentences for a list of (index, problem) pairs (None: about the mounts as a whole)."""
    return [text if index is None else f"Mount {index + 1}: {text}" for index, text in problems]


def check_mount_paths(mounts: list, reserved: Reserved = ()) -> list[str]:
    """Every problem with these mount paths, in order, as sentences (empty: all good); the rules are
    mount_path_problems'. ``mounts``: paths, named "Mount N" in the sentences, or (name, path) pairs."""
    names = [item[0] if isinstance(item, tuple) else f"Mount {n}" for n, item in enumerate(mounts, start=1)]
    paths = [item[1] if isinstance(item, tuple) else item for item in mounts]
    return [f"{names[index]}: {text}" for index, text in mount_path_problems(paths, reserved)]


def volume_mount_problems(team, mounts: list, reserved: Reserved = ()) -> list[tuple[int | None, str]]:
    """Every problem with a job's or notebook's ``mounts`` ([{"claim", "mount_path", "read_only"}]) for ``team``,
    as (index of the mount, or None for the list as a whole; sentence). Forms put each next to its row.

    Besides the paths (mount_path_problems): each claim must be a plain claim name (no namespace, no volume type)
    that the volume inventory has seen in the team's namespace, not Lost, and a claim that is read-only only (a
    published dataset, or a volume with only ReadOnlyMany) must be mounted read-only."""
    problems: list[tuple[int | None, str]] = []
    if not isinstance(mounts, list):
        return [(None, 'Give volumes as a list of {"claim": ..., "mount_path": ..., "read_only": ...} objects.')]
    if len(mounts) > MAX_MOUNTS:
        problems.append((None, f"At most {MAX_MOUNTS} volumes per job; this one has {len(mounts)}."))
    # Only well-formed names are looked up (a NUL byte, say, is refused below and never reaches the database).
    names = [
        m["claim"]
        for m in mounts
        if isinstance(m, dict) and isinstance(m.get("claim"), str) and CLAIM_NAME.fullmatch(m["claim"])
    ]
    known = {v.name: v for v in TeamVolume.objects.filter(team=team, name__in=names)} if team is not None else {}
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            problems.append((index, 'give an object {"claim": ..., "mount_path": ..., "read_only": ...}.'))
            continue
        extra = sorted(set(mount) - MOUNT_KEYS)
        if extra:
            problems.append(
                (index, f"{', '.join(map(str, extra))} is not allowed. Only your team's PersistentVolumeClaims can "
                 "be mounted (give claim, mount_path and read_only); host paths and other volume types never are.")
            )  # fmt: skip
        claim = mount.get("claim")
        if not isinstance(mount.get("read_only", False), bool):
            problems.append((index, "read_only must be true or false."))
        if not isinstance(claim, str) or not claim:
            problems.append((index, "give the name of one of your team's volumes as claim."))
            continue
        if "/" in claim or ":" in claim:
            problems.append(
                (index, f"'{claim[:60]}' is not a claim name. A job can only mount claims of its own team's "
                 f"namespace{f' ({team.namespace})' if team is not None else ''}; give the claim's name alone.")
            )  # fmt: skip
            continue
        if len(claim) > 253 or not CLAIM_NAME.fullmatch(claim):
            problems.append(
                (index, f"'{claim[:60]}' is not a Kubernetes claim name (lowercase letters, digits, '-' and '.', "
                 "starting and ending with a letter or digit).")
            )  # fmt: skip
            continue
        volume = known.get(claim)
        if volume is None:
            where_ns = f" in namespace {team.namespace}" if team is not None else ""
            problems.append(
                (index, f"team {getattr(team, 'name', '?')} has no volume '{claim}'{where_ns}. The Volumes page "
                 "lists the claims the portal has seen (it looks every minute).")
            )  # fmt: skip
            continue
        if volume.phase == "Lost":
            problems.append((index, f"the volume behind '{claim}' is gone (claim Lost); ask an admin to restore it."))
        elif volume.read_only_only and not mount.get("read_only", False):
            what = "a published dataset" if volume.dataset_id else "offered ReadOnlyMany only"
            problems.append((index, f"'{claim}' is {what}; mount it read-only."))
    paths = [m.get("mount_path") if isinstance(m, dict) else None for m in mounts]
    problems.extend((i, text) for i, text in mount_path_problems(paths, reserved) if isinstance(mounts[i], dict))
    return problems


def check_volume_mounts(team, mounts: list, reserved: Reserved = ()) -> list[str]:
    """Every problem with a job's or notebook's ``mounts`` as "Mount N: ..." sentences (the API's 400 and the
    services' ValidationError); the rules are volume_mount_problems'."""
    return _numbered(volume_mount_problems(team, mounts, reserved))


def secret_file_dirs(secret_files) -> dict[str, str]:
    """Where a submission's secret files are mounted (path → what), which its volumes may neither take nor enter."""
    return {
        item["path"]: f"the files of secret {item.get('secret', '')}"
        for item in secret_files or []
        if isinstance(item, dict) and isinstance(item.get("path"), str)
    }


def mount_errors(team, fields: dict) -> dict[str, list[str]]:
    """Every problem with a submission's volumes and /dev/shm size, under the fields the form and the API name them
    (the one place both ask). A volume may not go where a secret's files are mounted, nor inside them."""
    errors: dict[str, list[str]] = {}
    if problems := check_volume_mounts(team, fields.get("volumes") or [], secret_file_dirs(fields.get("secret_files"))):
        errors["volumes"] = problems
    if problems := check_shm(fields.get("shm_mb"), fields["memory_mb"]):
        errors["shm_mb"] = problems
    return errors


def check_shm(shm_mb, memory_mb: int) -> list[str]:
    """A /dev/shm size asked for: from 64 MiB to PORTAL_SHM_MAX_FRACTION of the memory request (None: default)."""
    if shm_mb is None:
        return []
    most = int(memory_mb * settings.PORTAL_SHM_MAX_FRACTION)
    if shm_mb < 64 or shm_mb > most:
        return [
            f"The shared memory (/dev/shm) must be from 64 MiB to {most} MiB "
            f"({settings.PORTAL_SHM_MAX_FRACTION:.0%} of the {memory_mb} "
            "MiB memory request: its pages count against the job's memory). Ask for less, or more memory."
        ]
    return []


# -- secrets and mounts ----------------------------------------------------------------------------------------

#: A Secret's name: a DNS-1123 subdomain (Kubernetes object names).
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: A key of a Secret (IsConfigMapKey): letters, digits, '-', '_' and '.'.
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: Names the portal gives its own Secrets (registry credentials); a team secret may not take one.
PORTAL_SECRET_PREFIX = "portal-"
#: Limits on what a person may store: well under the API server's 1 MiB per Secret.
MAX_SECRET_KEYS = 50
MAX_SECRET_VALUE_BYTES = 256 * 1024
MAX_SECRET_TOTAL_BYTES = 512 * 1024
MAX_SECRET_REFS = 20


def secret_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a team secret (None: it can)."""
    if not isinstance(name, str) or not name:
        return "Give the secret a name."
    if len(name) > 253 or not SECRET_NAME.match(name):
        return (
            f"'{name}' is not a valid secret name: use lowercase letters, digits, '-' and '.', starting and ending "
            "with a letter or digit (at most 253 characters), e.g. wandb or hf-token."
        )
    if name.startswith(PORTAL_SECRET_PREFIX):
        return f"Names starting with '{PORTAL_SECRET_PREFIX}' are the portal's own; pick another name."
    return None


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a key of a secret (None: it can)."""
    if not isinstance(key, str) or not key:
        return "A key may not be empty."
    if len(key) > 253 or not SECRET_KEY.match(key) or key in (".", ".."):
        return (
            f"'{key}' is not a valid key: use letters, digits, '-', '_' and '.' (at most 253 characters), e.g. "
            "token or key.json."
        )
    return None


def secret_data_problems(data) -> list[str]:
    """Every problem with the key → value mapping a person wants to store (all at once)."""
    if not isinstance(data, dict):
        return ['Give the values as a {"key": "value"} object.']
    problems: list[str] = []
    if not data:
        problems.append("Give at least one key and value.")
    if len(data) > MAX_SECRET_KEYS:
        problems.append(f"At most {MAX_SECRET_KEYS} keys in one secret; this has {len(data)}.")
    total = 0
    for key, value in data.items():
        problem = secret_key_problem(key)
        if problem:
            problems.append(problem)
        if not isinstance(value, str):
            problems.append(f"The value of {key} must be text.")
            continue
        if value == "":
            problems.append(f"The value of {key} is empty; give a value or leave the key out.")
        size = len(value.encode())
        total += size
        if size > MAX_SECRET_VALUE_BYTES:
            problems.append(f"The value of {key} is {size} bytes; at most {MAX_SECRET_VALUE_BYTES} bytes per value.")
    if total > MAX_SECRET_TOTAL_BYTES:
        problems.append(f"The values add up to {total} bytes; at most {MAX_SECRET_TOTAL_BYTES} bytes per secret.")
    return problems


def secret_env_problems(items, env: list[dict]) -> list[str]:
    """The shape of ``secret_env`` ([{"name", "secret", "key"}]): names like environment variables, unique among
    themselves and the plain environment; secret and key names well formed. Whether they exist is checked with
    the team's secrets (jobs.secrets.check_secret_refs)."""
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return ['Give a list of {"name": ..., "secret": ..., "key": ...} objects.']
    problems: list[str] = []
    if len(items) > MAX_SECRET_REFS:
        problems.append(f"At most {MAX_SECRET_REFS} variables from secrets.")
    seen = {str(e.get("name")) for e in env or []}
    for item in items:
        unknown = set(item) - {"name", "secret", "key"}
        if unknown:
            problems.append(f"Unknown field(s) {', '.join(sorted(map(str, unknown)))}: give name, secret and key.")
        name, secret, key = item.get("name", ""), item.get("secret", ""), item.get("key", "")
        try:
            validate_env([{"name": name, "value": ""}])
        except ValidationError as error:
            problems.extend(error.messages)
        else:
            if name in seen:
                problems.append(f"{name} is given twice; give each variable once (as text or from a secret).")
            seen.add(name)
        for problem in (secret_name_problem(secret), secret_key_problem(key)):
            if problem:
                problems.append(f"{name or 'A variable'}: {problem}")
    return problems


def secret_file_problems(items, reserved: dict[str, str] | None = None) -> list[str]:
    """The shape of ``secret_files`` ([{"secret", "path", "keys"?}]) and their mount paths."""
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return ['Give a list of {"secret": ..., "path": ..., "keys": [...]} objects.']
    problems: list[str] = []
    if len(items) > MAX_SECRET_REFS:
        problems.append(f"At most {MAX_SECRET_REFS} secrets as files.")
    for item in items:
        unknown = set(item) - {"secret", "path", "keys"}
        if unknown:
            problems.append(f"Unknown field(s) {', '.join(sorted(map(str, unknown)))}: give secret, path and keys.")
        secret, keys = item.get("secret", ""), item.get("keys", [])
        problem = secret_name_problem(secret)
        if problem:
            problems.append(problem)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            problems.append(f"The keys of secret {secret} must be a list of key names (or left out for all).")
            continue
        if len(set(keys)) != len(keys):
            problems.append(f"A key of secret {secret} is listed twice.")
        problems.extend(p for k in keys if (p := secret_key_problem(k)))
    problems.extend(check_mount_paths([(f"Secret {i.get('secret', '')}", i.get("path", "")) for i in items], reserved))
    return problems


def parse_secret_env_text(text: str) -> list[dict]:
    """``NAME=secret/key`` lines (the browser form's format) as the list the model stores."""
    items = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, ref = line.strip().partition("=")
        secret, slash, key = ref.strip().partition("/")
        if not equals or not slash:
            raise ValidationError(f"Line {number}: write NAME=secret/key, e.g. WANDB_API_KEY=wandb/token.", code="env")
        items.append({"name": name.strip(), "secret": secret.strip(), "key": key.strip()})
    return items


def parse_secret_files_text(text: str) -> list[dict]:
    """``secret /path [key ...]`` lines (the browser form's format) as the list the model stores."""
    items = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = line.split()
        if len(words) < 2:
            raise ValidationError(
                f"Line {number}: write the secret, the directory and optionally keys, e.g. gcs /secrets/gcs key.json.",
                code="secret_files",
            )
        items.append({"secret": words[0], "path": words[1], "keys": words[2:]})
    return items


def format_secret_env_text(items) -> str:
    """The browser form's text for a stored ``secret_env`` (the reverse of parse_secret_env_text)."""
    return "\n".join(f"{i['name']}={i['secret']}/{i['key']}" for i in items or [])


def format_secret_files_text(items) -> str:
    """The browser form's text for stored ``secret_files`` (the reverse of parse_secret_files_text). Secret
    names, directories and key names never hold spaces (SECRET_NAME, mount_path_problems, SECRET_KEY), so the
    words split back into the same items."""
    return "\n".join(" ".join([i["secret"], i["path"], *(i.get("keys") or [])]) for i in items or [])
