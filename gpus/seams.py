"""What the inventory needs to know about the work above it, filled in by the jobs app at start-up.

The inventory sits below jobs and never imports it, yet reconfiguring a node must say which quotas and queued
jobs a vanishing resource class strands, and a drain that times out must say which workloads held it up. The
jobs app registers both answers in its ``AppConfig.ready``; without them the inventory says less, never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ClassClaims:
    """What refers to one resource class: the quotas on it (their ids and teams), the jobs queued for it, and the work
    that asks for it and has not ended (queued, admitted or running): how many (``unfinished``) and the first
    ``NAMED_WORK`` as a person knows each ("#6 train (batch job, alice)"), what a layout that takes the class out of
    the fleet would strand."""

    quota_ids: tuple[int, ...] = ()
    quota_teams: tuple[str, ...] = ()
    queued: int = 0
    unfinished: int = 0
    work: tuple[str, ...] = ()


#: The most unfinished workloads a ClassClaims names one by one (the rest are counted).
NAMED_WORK = 10


#: resource class ids → what refers to each (classes nothing refers to may be left out)
ClaimsFn = Callable[[Iterable[int]], dict[int, ClassClaims]]
#: pods (as the cluster returns them) → "namespace/name" → how a person knows the workload ("#12 train")
DescribeFn = Callable[[list[dict]], dict[str, str]]


@dataclass(frozen=True)
class PodWork:
    """What one pod on a node is, for an admin about to drain it: the portal's job, notebook or service replica
    (with its owner and whether a drain requeues it) or, when the portal knows nothing of it, just its name."""

    label: str
    url: str = ""
    owner: str = ""
    team: str = ""
    #: The portal stops and requeues it when a drain's grace period ends; otherwise it holds the drain up.
    requeued: bool = False
    #: How many of the node's pods are this workload's (a service's replicas, a gang's ranks): listed once.
    pods: int = 1


#: pods → "namespace/name" → what each is (pods the portal does not know may be left out)
ClassifyFn = Callable[[list[dict]], dict[str, PodWork]]
#: (cluster id, names of its present nodes) → the portal's active work there, as people know it ("#12 train")
WorkOnNodesFn = Callable[[int, list[str]], list[str]]


@dataclass
class WorkSeam:
    claims: ClaimsFn | None = None
    describe_pods: DescribeFn | None = None
    classify_pods: ClassifyFn | None = None
    work_on_nodes: WorkOnNodesFn | None = None


seam = WorkSeam()


def register(
    *,
    claims: ClaimsFn,
    describe_pods: DescribeFn,
    classify_pods: ClassifyFn | None = None,
    work_on_nodes: WorkOnNodesFn | None = None,
) -> None:
    seam.claims = claims
    seam.describe_pods = describe_pods
    seam.classify_pods = classify_pods
    seam.work_on_nodes = work_on_nodes


def claims_on(class_ids: Iterable[int]) -> dict[int, ClassClaims]:
    ids = list(class_ids)
    if seam.claims is None or not ids:
        return {}
    return seam.claims(ids)


def describe_pods(pods: list[dict]) -> dict[str, str]:
    if seam.describe_pods is None or not pods:
        return {}
    return seam.describe_pods(pods)


def classify_pods(pods: list[dict]) -> dict[str, PodWork]:
    """Every pod's PodWork: the jobs app's answer where it knows the pod, else the pod's namespace/name (the pods of
    one workload get equal answers; ``by_workload`` lists them once)."""
    known = seam.classify_pods(pods) if seam.classify_pods is not None and pods else {}
    return {pod_key(pod): known.get(pod_key(pod)) or PodWork(label=pod_key(pod)) for pod in pods}


def pod_key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def by_workload(items: list[PodWork]) -> list[PodWork]:
    """Each workload once, in the order first seen, with ``pods`` counting its pods on the node."""
    counts: dict[PodWork, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + item.pods
    return [replace(item, pods=count) for item, count in counts.items()]
