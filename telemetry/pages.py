"""What telemetry adds to the inventory pages (registered with gpus.pages in TelemetryConfig.ready): a
sparkline per node in the node list; per GPU and MIG instance on the node page, with the node's chart."""

from __future__ import annotations

from urllib.parse import urlencode

from gpus.models import Node

from . import samples


def node_list_sparklines(request, nodes: list) -> None:
    sparks = samples.node_sparklines([(n.cluster_id, n.name) for n in nodes])
    for node in nodes:
        node.util_spark = sparks.get((node.cluster_id, node.name))


def node_detail_charts(request, node, gpus: list[dict]) -> dict:
    uuids = [g["gpu"].uuid for g in gpus if g["gpu"].uuid]
    # A GPU's samples are those its own node reported (an agent cannot plant samples on another node's GPU).
    sparks = samples.sparklines("gpu_uuid", uuids, node=(node.cluster_id, node.name))
    instances = samples.instance_sparklines(uuids, node=(node.cluster_id, node.name))
    for g in gpus:
        g["spark"] = sparks.get(g["gpu"].uuid)
        g["instances"] = [
            {"gi": gi, "profile": profile, "values": values}
            for (uuid, gi, profile), values in sorted(instances.items(), key=lambda kv: kv[0][1])
            if uuid == g["gpu"].uuid
        ]
    return _node_chart(request, node, gpus)


def cluster_chart(request, cluster) -> dict:
    """A cluster's page: the mean utilisation of its GPUs that the viewer may see (admins: all of them)."""
    where = None
    if not request.user.is_staff:
        visible = Node.objects.visible_to(request.user).filter(cluster=cluster).values_list("cluster_id", "name")
        where = samples.nodes_q(visible)
    context = samples.chart_context(request, {"cluster_id": cluster.pk, "gpu_instance_id__isnull": True}, where=where)
    context.update(chart_title="Utilisation", chart_label=f"Mean utilisation of the GPUs of cluster {cluster.name}")
    return context


def _node_chart(request, node, gpus: list[dict]) -> dict:
    """The node page's chart: the node's mean, or one GPU (?gpu=<UUID>) or one MIG instance of it (&gi=<id>)."""
    here = {"cluster_id": node.cluster_id, "node_name": node.name}
    scope = {**here, "gpu_instance_id__isnull": True}
    title, label = "Utilisation", "Mean utilisation of this node's GPUs"
    wanted, gi = request.GET.get("gpu", ""), request.GET.get("gi", "")
    chosen = next((g for g in gpus if g["gpu"].uuid and g["gpu"].uuid == wanted), None)
    if chosen is not None:
        scope = {**here, "gpu_uuid": wanted, "gpu_instance_id__isnull": True}
        title = label = f"GPU {chosen['gpu'].index} utilisation"
        instance = next((i for i in chosen["instances"] if str(i["gi"]) == gi), None)
        if instance is not None:
            scope = {**here, "gpu_uuid": wanted, "gpu_instance_id": instance["gi"]}
            title = label = f"GPU {chosen['gpu'].index} · MIG {instance['profile']} #{instance['gi']} utilisation"
    context = samples.chart_context(request, scope, default_range="1h")
    # A node of a cluster named in the address (?cluster=, where names collide) keeps it in every link.
    base = {"cluster": request.GET["cluster"]} if request.GET.get("cluster") else {}
    query = base | {k: v for k, v in (("gpu", wanted if chosen else ""), ("gi", gi if chosen else "")) if v}
    context.update(
        chart_title=title, chart_label=label, chart_query=urlencode(query), chart_base=urlencode(base),
        chart_back=chosen is not None,
    )  # fmt: skip
    return context
