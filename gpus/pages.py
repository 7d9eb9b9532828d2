"""Extension points of the inventory pages.

Floors above the inventory add to its pages by registering here at start-up (telemetry adds utilisation
sparklines and the node chart); the inventory never imports them. A page renders without any extension: the
template then simply has nothing extra to show.
"""

from __future__ import annotations

from collections.abc import Callable

#: fn(request, nodes): annotate the node rows shown on one page of the node list.
NodeListExtension = Callable[[object, list], None]
#: fn(request, node, gpus) -> extra context for the node page; ``gpus`` are the page's GPU rows (dicts), which
#: the extension may annotate.
NodeDetailExtension = Callable[[object, object, list[dict]], dict]
#: fn(request, cluster) -> extra context for a cluster's page.
ClusterDetailExtension = Callable[[object, object], dict]

_node_list: list[NodeListExtension] = []
_node_detail: list[NodeDetailExtension] = []
_cluster_detail: list[ClusterDetailExtension] = []


def extend_node_list(fn: NodeListExtension) -> NodeListExtension:
    if fn not in _node_list:
        _node_list.append(fn)
    return fn


def extend_node_detail(fn: NodeDetailExtension) -> NodeDetailExtension:
    if fn not in _node_detail:
        _node_detail.append(fn)
    return fn


def extend_cluster_detail(fn: ClusterDetailExtension) -> ClusterDetailExtension:
    if fn not in _cluster_detail:
        _cluster_detail.append(fn)
    return fn


def cluster_detail_context(request, cluster) -> dict:
    context: dict = {}
    for fn in _cluster_detail:
        context.update(fn(request, cluster))
    return context


def annotate_node_list(request, nodes: list) -> None:
    for fn in _node_list:
        fn(request, nodes)


def node_detail_context(request, node, gpus: list[dict]) -> dict:
    context: dict = {}
    for fn in _node_detail:
        context.update(fn(request, node, gpus))
    return context
