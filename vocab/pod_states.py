"""What a pod or container state means, and the sentence a person reads: one table for every kind of workload
and the node smoke test.

Kubernetes says why a pod is not running in three places, all read here:

- a container's ``state.waiting.reason`` (kubelet: ``ContainerCreating``, ``ErrImagePull``, ``ImagePullBackOff``,
  ``InvalidImageName``, ``CreateContainerConfigError``, ``CrashLoopBackOff``, ...) with its ``message``;
- the pod's ``PodScheduled`` condition when it is False (kube-scheduler: ``Unschedulable``, ``SchedulingGated``);
- the pod's events, for what shows nowhere else: a Secret volume that cannot be set up leaves the container
  ``ContainerCreating`` and says so only in a ``FailedMount`` event; an image pull's real error (401, not found)
  is in the ``Failed`` event, while ``ImagePullBackOff``'s own message only says it backs off. The caller reads the
  events (``needs_event`` says which) and passes the event's reason and message here.

A container that ended says why in ``state.terminated.reason`` (``OOMKilled``: the kernel's OOM killer, exit 137;
``Error``; ``Completed``), and a Job past its ``activeDeadlineSeconds`` carries a Failed condition with reason
``DeadlineExceeded`` (kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup).

Each reason has a verdict: FAIL (no wait cures it: the workload fails now), EXPLAIN (it waits until a person
acts: the sentence says who and what) or WAIT (the cluster is getting there, or may: the sentence gives the
cluster's own words). The words name only what the caller passes in a ``Subject``; lookups the table needs (the
team's registry login, which claims are unbound) are functions the caller provides, asked only when the reason
needs them. Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from .images import registry_of
from .names import NGC_API_KEY_USERNAME, NGC_REGISTRY


class Verdict(StrEnum):
    FAIL = "fail"  # no wait cures it: the workload fails now
    EXPLAIN = "explain"  # it waits until a person acts: say who and what
    WAIT = "wait"  # the cluster is getting there, or may: keep waiting, in the cluster's words


@dataclass(frozen=True)
class RegistryLogin:
    """The team's credential for a registry, as the words name it (never its secret)."""

    username: str
    set_at: datetime


def _no_login(host: str) -> RegistryLogin | None:
    return None


def _no_claims() -> list[str]:
    return []


@dataclass(frozen=True)
class Subject:
    """What the sentences may name about the workload whose pod it is. ``login(host)``: the team's credential
    for a registry (None: it has none); ``unbound_claims()``: the claims it mounts that are not bound yet (or all
    it mounts when that is not known). Both are asked only when the reason needs them."""

    namespace: str = ""
    team: str = ""
    image: str = ""
    memory_mb: int = 0
    max_runtime_seconds: int = 0
    login: Callable[[str], RegistryLogin | None] = field(default=_no_login, compare=False)
    unbound_claims: Callable[[], list[str]] = field(default=_no_claims, compare=False)


@dataclass(frozen=True)
class Meaning:
    """What a reason means: the verdict, the sentence a person reads, and the reason it is recorded under."""

    reason: str
    verdict: Verdict
    sentence: str


# -- reading a pod ----------------------------------------------------------------------------------------------


def container_state(pod: dict | None) -> tuple[str, dict]:
    """("running" | "waiting" | "terminated" | "", details) of the pod's container (its last termination when
    it reports no state)."""
    if not pod:
        return "", {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for kind in ("terminated", "running", "waiting"):
            if kind in (status.get("state") or {}):
                return kind, status["state"][kind]
        last = (status.get("lastState") or {}).get("terminated")
        if last:
            return "terminated", last
    return "", {}


def waiting_reason(pod: dict | None) -> tuple[str, str]:
    """(reason, message) of why a pod that has not started waits: its container's waiting reason, else its
    PodScheduled condition when False; ("", "") when it says nothing (yet)."""
    if not pod:
        return "", ""
    kind, detail = container_state(pod)
    if kind == "waiting":
        return detail.get("reason", "") or "", detail.get("message", "") or ""
    if kind:
        return "", ""
    scheduled = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None
    )
    if scheduled and scheduled.get("status") == "False":
        return scheduled.get("reason", "") or "", scheduled.get("message", "") or ""
    return "", ""


#: The pod event that tells more than a waiting reason does: waiting reason -> (event reason, words the event's
#: message contains). ImagePullBackOff's message only says it backs off; the Failed event says why the pull
#: failed. A Secret volume that cannot be set up shows only as a FailedMount event while the container is
#: ContainerCreating.
EVENTS = {
    "ImagePullBackOff": ("Failed", ("Failed to pull",)),
    "ContainerCreating": ("FailedMount", ("MountVolume.SetUp failed", "secret")),
}


def needs_event(reason: str) -> tuple[str, tuple[str, ...]] | None:
    """(event reason, words) of the pod event that tells more about ``reason`` (None: the reason says it all)."""
    return EVENTS.get(reason)


# -- the sentences ----------------------------------------------------------------------------------------------

_SECRET_MISSING = re.compile(r'secret "([^"]+)" not found')
_SECRET_KEY_MISSING = (
    re.compile(r"couldn't find key (\S+) in Secret [^/\s]+/(\S+)"),  # an env var's secretKeyRef
    re.compile(r"references non-existent secret key: (\S+)"),  # a Secret volume's items
)
_CONFIGMAP_MISSING = re.compile(r'configmap "([^"]+)" not found')
_CLAIM_NOT_FOUND = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
_CLAIM_UNBOUND = "unbound immediate PersistentVolumeClaims"
_REFUSED_WORDS = ("401", "403", "unauthorized", "denied", "forbidden")


def config_error_sentence(subject: Subject, message: str) -> str:
    """CreateContainerConfigError / FailedMount in words: which secret or key is missing, and who can fix it."""
    missing = _SECRET_MISSING.search(message)
    key = _SECRET_KEY_MISSING[0].search(message) or _SECRET_KEY_MISSING[1].search(message)
    configmap = _CONFIGMAP_MISSING.search(message)
    if missing:
        what = f"secret {missing.group(1)} does not exist in namespace {subject.namespace}"
        fix = f"A lead of team {subject.team} can create it on the team's Secrets page; the job starts when it exists."
    elif key:
        secret = key.group(2) if key.re.groups > 1 else "it uses"
        what = f"key {key.group(1)} is missing from the secret {secret}"
        fix = "A lead can rotate the secret with that key included; the job starts when it is there."
    elif configmap:
        what = f"config map {configmap.group(1)} does not exist in namespace {subject.namespace}"
        fix = "An admin can restore it; the job starts when it exists."
    else:
        what, fix = "a secret it uses cannot be read", "Check the team's secrets."
    return f"Waiting: the pod cannot start because {what}. {fix} Kubernetes: {message}"


def pull_failure_sentence(subject: Subject, reason: str, message: str) -> str:
    """ErrImagePull / ImagePullBackOff / InvalidImageName in words: which registry refused or lacked the image,
    and what to check."""
    host = registry_of(subject.image)
    lowered = message.lower()
    if any(word in lowered for word in _REFUSED_WORDS):
        login = subject.login(host)
        if not subject.team:
            hint = f"Check the pull secret the pod uses for {host}."
        elif login is None:
            hint = (
                f"Team {subject.team} has no registry credential for {host}: a lead can add one on the team's "
                "Registry credentials page"
                + (f" (user {NGC_API_KEY_USERNAME}, password an NGC API key)." if host == NGC_REGISTRY else ".")
            )
        else:
            hint = (
                f"The team's credential for {host} (user {login.username}, set {login.set_at:%Y-%m-%d %H:%M} UTC) "
                "was sent and refused: check that the token is still valid and may pull this repository, then "
                "rotate it."
            )
        return (
            f"The registry {host} refused to let this job pull {subject.image} ({reason}). {hint} Kubernetes: {message}"
        )
    if "not found" in lowered or "manifest unknown" in lowered:
        return (
            f"The registry {host} has no image {subject.image} ({reason}): check the repository name and tag. "
            f"Kubernetes: {message}"
        )
    return f"The image {subject.image} cannot be pulled from {host} ({reason}): {message}"


def claim_sentence(subject: Subject, message: str) -> str | None:
    """The scheduler's message about a pending pod's claims in words (None: it is about something else).

    kube-scheduler places a pod only once every claim it mounts exists and (Immediate binding) is bound to a
    volume; until then the pod stays Pending with ``persistentvolumeclaim "x" not found`` or ``... pod has unbound
    immediate PersistentVolumeClaims`` (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#binding)."""
    if missing := _CLAIM_NOT_FOUND.search(message or ""):
        return (
            f"Waiting for volume {missing.group(1)}: the claim does not exist in namespace {subject.namespace}, so "
            "Kubernetes cannot place the pod. Ask an admin to restore it, or cancel this job and submit it without "
            f"that volume. Kubernetes: {message}"
        )
    if _CLAIM_UNBOUND not in (message or ""):
        return None
    unbound = subject.unbound_claims()
    what = (
        f"volume{'s' if len(unbound) > 1 else ''} {', '.join(sorted(unbound))}" if unbound else "the volumes it mounts"
    )
    return (
        f"Waiting for {what} to be bound: a claim it mounts is not bound to a volume yet (Pending), and Kubernetes "
        "places the pod only once it is. The job starts by itself when the claim binds; the Volumes page shows each "
        f"claim's phase, and an admin can check why it is not bound (no matching volume or storage class). "
        f"Kubernetes: {message}"
    )


def _pending(reason: str, message: str) -> str:
    return f"Pending in the cluster: {reason}" + (f": {message}" if message else "")


def _crash_loop(subject: Subject, reason: str, message: str) -> str:
    text = (
        "The container keeps exiting and Kubernetes waits longer before each restart (CrashLoopBackOff); its log "
        "says why."
    )
    return f"{text} Kubernetes: {message}" if message else text


def _generic(subject: Subject, reason: str, message: str) -> str:
    return claim_sentence(subject, message) or _pending(reason, message)


def _config(subject: Subject, reason: str, message: str) -> str:
    return config_error_sentence(subject, message)


#: Waiting reason (a container's, the scheduler's, or a FailedMount event's) -> (verdict, sentence). A reason
#: not here keeps waiting with the cluster's own words (``_generic``).
WAITING: dict[str, tuple[Verdict, Callable[[Subject, str, str], str]]] = {
    # The image can never be pulled as named: kubelet backs off for ever, and no wait cures it.
    "ImagePullBackOff": (Verdict.FAIL, pull_failure_sentence),
    "InvalidImageName": (Verdict.FAIL, pull_failure_sentence),
    # The first failed pull: kubelet retries (then backs off); say why it failed now.
    "ErrImagePull": (Verdict.EXPLAIN, pull_failure_sentence),
    # A secret, a key or a config map the container needs is missing: it starts once a person creates it.
    "CreateContainerConfigError": (Verdict.EXPLAIN, _config),
    "FailedMount": (Verdict.EXPLAIN, _config),
    # A restarting container (a Deployment's replica; batch pods never restart) that keeps exiting.
    "CrashLoopBackOff": (Verdict.EXPLAIN, _crash_loop),
    # The cluster is getting there: the scheduler looks for room, kubelet sets the pod up.
    "Unschedulable": (Verdict.WAIT, _generic),
    "SchedulingGated": (Verdict.WAIT, _generic),
    "ContainerCreating": (Verdict.WAIT, _generic),
    "PodInitializing": (Verdict.WAIT, _generic),
}


def waiting(reason: str, message: str = "", subject: Subject | None = None) -> Meaning:
    """What a pod that waits for ``reason`` (with the cluster's ``message``) means, and its sentence."""
    subject = subject or Subject()
    verdict, words = WAITING.get(reason, (Verdict.WAIT, _generic))
    sentence = words(subject, reason, message)
    if words is _generic and _CLAIM_NOT_FOUND.search(message or ""):
        verdict = Verdict.EXPLAIN  # a claim that does not exist waits for a person, not for the cluster
    return Meaning(reason, verdict, sentence)


#: Why a container or workload ended -> its sentence; any other ended with its exit code.
ENDED: dict[str, Callable[[Subject], str]] = {
    "OOMKilled": lambda s: f"Killed for running out of memory (limit {s.memory_mb} MiB); ask for more memory.",
    "DeadlineExceeded": lambda s: (
        f"Stopped by Kubernetes after its maximum runtime of {s.max_runtime_seconds // 60} minutes "
        "(activeDeadlineSeconds)."
    ),
}


def ended(reason: str, exit_code: int | None, condition_message: str = "", subject: Subject | None = None) -> Meaning:
    """What a failed container or workload means: its reason's sentence, else its exit code and the workload's
    Failed condition in Kubernetes' words. Always FAIL: an ended container does not come back."""
    subject = subject or Subject()
    words = ENDED.get(reason)
    if words is not None:
        return Meaning(reason, Verdict.FAIL, words(subject))
    text = f"Failed with exit code {exit_code}." if exit_code is not None else "Failed."
    if condition_message:
        text += f" Kubernetes: {condition_message}"
    return Meaning(reason, Verdict.FAIL, text)
