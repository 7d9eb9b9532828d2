"""A job's pods in words: the jobs side of the one table (vocab.pod_states) that every kind uses.

``why_waiting`` says what a pod of the job that waits means (fail, explain, keep waiting) and the sentence, after
reading the pod event the table asks for; ``why_failed`` says it for an ended container. The subject of the
sentences is the job: its team and namespace, its image and the team's login for its registry, its memory and
maximum runtime, and its claims that are not bound yet (the last two lookups asked only when the reason needs
them). A batch job, a notebook, a rank of a gang and a replica of a service read the same sentence for the same
pod state; a gang or a service says which rank or replica first ("Rank 3: ...")."""

from __future__ import annotations

from cluster.base import ClusterBackend, ClusterError
from jobs.models import Job, RegistryCredential, TeamVolume
from vocab import pod_states
from vocab.pod_states import Meaning, RegistryLogin, Subject


def subject(job: Job) -> Subject:
    """What the table's sentences may name about ``job``."""

    def login(host: str) -> RegistryLogin | None:
        credential = RegistryCredential.objects.filter(team_id=job.team_id, registry=host).first()
        if credential is None:
            return None
        return RegistryLogin(credential.username, credential.rotated_at or credential.created_at)

    def unbound_claims() -> list[str]:
        mounted = [mount["claim"] for mount in job.volumes or []]
        unbound = TeamVolume.objects.filter(team_id=job.team_id, name__in=mounted).exclude(phase="Bound")
        return list(unbound.values_list("name", flat=True)) or mounted

    return Subject(
        namespace=job.team.namespace,
        team=job.team.name,
        image=job.image,
        memory_mb=job.memory_mb,
        max_runtime_seconds=job.max_runtime_seconds or 0,
        login=login,
        unbound_claims=unbound_claims,
    )


def why_waiting(
    job: Job, reason: str, message: str, backend: ClusterBackend | None = None, pod_name: str = ""
) -> Meaning:
    """What the job's pod ``pod_name``, waiting for ``reason``, means. With a backend and a pod, the pod's event
    the table names tells more: why a pull failed behind ImagePullBackOff; a Secret volume that cannot be mounted
    behind ContainerCreating (read only for a job that mounts secret files)."""
    wanted = pod_states.needs_event(reason)
    if wanted and backend is not None and pod_name:
        event_reason, words = wanted
        if event_reason != "FailedMount" or job.secret_files:
            text = newest_event(backend, job.team.namespace, pod_name, event_reason, *words)
            if text and event_reason == "FailedMount":
                reason, message = event_reason, text
            elif text:
                message = text
    return pod_states.waiting(reason, message, subject(job))


def why_failed(job: Job, reason: str, exit_code: int | None, condition_message: str = "") -> Meaning:
    """What the job's ended container (or failed workload) means, in words."""
    return pod_states.ended(reason, exit_code, condition_message, subject(job))


def newest_event(backend: ClusterBackend, namespace: str, pod_name: str, reason: str, *words: str) -> str:
    """The message of the pod's newest Event with ``reason`` that contains all ``words`` ("" when there is none
    or the events cannot be read now)."""
    try:
        events = backend.pod_events(namespace, pod_name)
    except ClusterError:
        return ""
    for event in reversed(events):
        text = str(event.get("message", ""))
        if event.get("reason") == reason and all(word in text for word in words):
            return text
    return ""
