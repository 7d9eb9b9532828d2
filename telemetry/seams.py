"""What telemetry needs to know about workloads, filled in by the floor above (jobs) at start-up.

Telemetry sits below jobs and never imports it, yet a reading must say which workload it belongs to and the
utilisation API must answer "may this user see workload N". The jobs app registers both answers in its
``AppConfig.ready``; without them readings carry no workload and the ``job`` scope finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: (namespace, pod name) → (workload id, team id)
PodOwners = dict[tuple[str, str], tuple[int, int]]
#: node name → (workload id, team id), for nodes that run exactly one workload
SoleOwners = dict[str, tuple[int, int]]


@dataclass
class WorkloadSeam:
    #: Given the cluster and the nodes of it a batch of readings came from: who owns which pod, and which node runs
    #: one workload only.
    owners: Callable[[int, Iterable[str]], tuple[PodOwners, SoleOwners]] | None = None
    #: May ``user`` see workload ``workload_id``?
    visible: Callable[[object, int], bool] | None = None


seam = WorkloadSeam()


def register(*, owners, visible) -> None:
    seam.owners = owners
    seam.visible = visible


def owners_on(cluster_id: int, node_names: Iterable[str]) -> tuple[PodOwners, SoleOwners]:
    if seam.owners is None:
        return {}, {}
    return seam.owners(cluster_id, node_names)


def workload_visible(user, workload_id: int) -> bool:
    return seam.visible is not None and seam.visible(user, workload_id)
