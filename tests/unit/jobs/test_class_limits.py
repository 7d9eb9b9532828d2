"""What a resource class's present nodes can hold (jobs.validation.class_limits), which every submission checks:
the largest node's units, CPU and memory, the newest CUDA, and how many nodes hold G units each. Read with one
grouped query, whatever the number of nodes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpus.models import Node
from jobs.validation import class_limits
from tests.factories import ResourceClassFactory

GPU = "nvidia.com/gpu"
LABEL = "NVIDIA-H100-80GB-HBM3"


def node(name: str, *, gpus=None, cpu="96", memory="1000Gi", cuda="12.4", label=LABEL, gone=False) -> Node:
    allocatable = {"cpu": cpu, "memory": memory} | ({GPU: gpus} if gpus is not None else {})
    return Node(name=name, product_label=label, allocatable=allocatable, cuda_version=cuda,
                last_seen=timezone.now(), gone_at=timezone.now() if gone else None)  # fmt: skip


@pytest.fixture
def rc(db):
    return ResourceClassFactory(key=f"{GPU}@{LABEL}")


def test_the_largest_node_and_the_newest_cuda_from_every_present_node_of_the_class(rc):
    Node.objects.bulk_create(
        [node(f"h{i}", gpus="8") for i in range(5)]
        + [
            node("small", gpus="4", cpu="48", memory="500Gi", cuda="12.2"),
            node("big-cpu", gpus="2", cpu="192500m", memory="2000Gi", cuda="12.8"),
            node("int-gpus", gpus=8),  # a number in the JSON, not a string
            node("no-gpu", gpus=None, cpu="512"),  # offers none of the class: ignored
            node("zero", gpus="0", cpu="512"),
            node("gone", gpus="16", cpu="512", gone=True),  # left the cluster
            node("other", gpus="16", cpu="512", label="NVIDIA-A100-SXM4-80GB"),  # another class
        ]
    )
    limits = class_limits(rc)
    assert limits.nodes == 8
    assert limits.max_units == 8
    assert limits.max_cpu_m == 192_500
    assert limits.max_memory_mb == 2000 * 1024
    assert limits.max_cuda == "12.8"
    assert sorted(limits.units_per_node) == [2, 4, 8, 8, 8, 8, 8, 8]
    assert (limits.nodes_with(8), limits.nodes_with(4), limits.nodes_with(1), limits.nodes_with(9)) == (6, 7, 8, 0)


def test_no_node_of_the_class_gives_empty_limits(rc):
    Node.objects.bulk_create(
        [node("other", gpus="8", label="NVIDIA-A100-SXM4-80GB"), node("gone", gpus="8", gone=True)]
    )
    limits = class_limits(rc)
    assert (limits.nodes, limits.max_units, limits.max_cpu_m, limits.max_cuda) == (0, 0, 0, "")
    assert limits.units_per_node == []


def test_one_query_and_one_row_per_shape_however_many_nodes(rc):
    Node.objects.bulk_create([node(f"h{i}", gpus="8") for i in range(300)] + [node("s", gpus="4", cuda="12.2")])
    with CaptureQueriesContext(connection) as queries:
        limits = class_limits(rc)
    assert len(queries) == 1
    assert "GROUP BY" in queries[0]["sql"]  # the nodes are counted by the database, not decoded one by one here
    assert (limits.nodes, limits.nodes_with(8)) == (301, 300)
