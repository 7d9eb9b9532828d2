"""Where a job or notebook may mount things, and the shape of the secrets it refers to: the mount-path rules
(one rule for volumes and secret files alike), volume mounts, /dev/shm, and secret names, keys, values and
references with the browser form's text formats for them. Split out of jobs.validation (which it builds on for
environment variable names); shared by the browser forms, the REST serializers and the services.

Every message says what to change. Nothing here writes to the database.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError

from jobs.models import TeamVolume
from jobs.validation import validate_env
from vocab.names import is_dns1123_subdomain

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
    names = [m["claim"] for m in mounts if isinstance(m, dict) and is_dns1123_subdomain(m.get("claim"))]
    # A claim name may exist on several clusters (a dataset published on each): every copy is known.
    known: dict[str, list[TeamVolume]] = {}
    if team is not None and names:  # no claim named: nothing to look up (building the query costs ~1 ms of CPU)
        for row in TeamVolume.objects.filter(team=team, name__in=names).select_related("cluster").order_by("pk"):
            known.setdefault(row.name, []).append(row)
    where: dict[str, set[str]] = {}
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
        if not is_dns1123_subdomain(claim):
            problems.append(
                (index, f"'{claim[:60]}' is not a Kubernetes claim name (lowercase letters, digits, '-' and '.', "
                 "starting and ending with a letter or digit).")
            )  # fmt: skip
            continue
        copies = known.get(claim)
        if not copies:
            where_ns = f" in namespace {team.namespace}" if team is not None else ""
            problems.append(
                (index, f"team {getattr(team, 'name', '?')} has no volume '{claim}'{where_ns}. The Volumes page "
                 "lists the claims the portal has seen (it looks every minute).")
            )  # fmt: skip
            continue
        where[claim] = {row.cluster.name for row in copies if row.phase != "Lost"}
        volume = next((row for row in copies if row.phase != "Lost"), copies[0])
        if volume.phase == "Lost":
            problems.append((index, f"the volume behind '{claim}' is gone (claim Lost); ask an admin to restore it."))
        elif volume.read_only_only and not mount.get("read_only", False):
            what = "a published dataset" if volume.dataset_id else "offered ReadOnlyMany only"
            problems.append((index, f"'{claim}' is {what}; mount it read-only."))
    if len(where) > 1 and not set.intersection(*where.values()):
        shown = "; ".join(f"{claim} on {' and '.join(sorted(places))}" for claim, places in sorted(where.items()))
        problems.append(
            (None, f"These volumes are on different clusters ({shown}). Work runs on one cluster, so every volume "
             "it mounts must be on that cluster: mount volumes of one cluster only.")
        )  # fmt: skip
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
    if not is_dns1123_subdomain(name):
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
    if len(key) > 253 or not SECRET_KEY.fullmatch(key) or key in (".", ".."):
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
    the team's secrets (jobs.storage.secrets.check_secret_refs)."""
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
    names, directories and key names never hold spaces (is_dns1123_subdomain, mount_path_problems, SECRET_KEY), so the
    words split back into the same items."""
    return "\n".join(" ".join([i["secret"], i["path"], *(i.get("keys") or [])]) for i in items or [])
