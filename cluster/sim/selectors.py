"""Taints/tolerations, node affinity and pod anti-affinity: the matching rules shared by the API and the scheduler
(label selector strings: cluster/label_selectors.py).

Not a component: pure functions over object fields.
"""

from __future__ import annotations

from typing import Any

from ..base import KubeObject


def toleration_matches(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    return any(toleration_matches(toleration, taint) for toleration in tolerations)


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = [str(value) for value in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def node_affinity_matches(spec: dict[str, Any], node: KubeObject) -> bool:
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in terms:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue  # an empty term matches nothing
        if all(_expression_matches(expression, labels) for expression in expressions) and all(
            _expression_matches(expression, fields) for expression in field_expressions
        ):
            return True
    return False


def preferred_node_affinity_weight(spec: dict[str, Any], node: KubeObject) -> int:
    """kube-scheduler's NodeAffinity score (v1.20) before normalising: the summed weights of the pod's
    preferredDuringSchedulingIgnoredDuringExecution terms whose matchExpressions the node's labels satisfy."""
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    labels = node["metadata"].get("labels") or {}
    total = 0
    for term in preferred:
        expressions = (term.get("preference") or {}).get("matchExpressions") or []
        if expressions and all(_expression_matches(expression, labels) for expression in expressions):
            total += int(term.get("weight") or 0)
    return total


def label_selector_object_matches(selector: dict[str, Any] | None, labels: dict[str, str] | None) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against labels; an empty selector matches all."""
    labels = labels or {}
    selector = selector or {}
    if any(labels.get(key) != str(value) for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(expression, labels) for expression in selector.get("matchExpressions") or [])


def anti_affinity_conflict(
    spec: dict[str, Any], namespace: str, node: KubeObject, nodes: dict[str, KubeObject], placed: list
) -> bool:
    """Whether placing a pod with ``spec`` on ``node`` breaks one of its required pod anti-affinity terms: an
    existing pod (``placed``: (node name, namespace, labels) of every pod that is not finished) matching the
    term's selector sits on a node with the same value of the term's topologyKey."""
    terms = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    for term in terms:
        key = term.get("topologyKey") or ""
        value = (node["metadata"].get("labels") or {}).get(key)
        if value is None:
            continue  # a node without the key is its own domain
        spaces = term.get("namespaces") or [namespace]
        for other_node, other_namespace, other_labels in placed:
            other = nodes.get(other_node)
            if other is None or other_namespace not in spaces:
                continue
            if (other["metadata"].get("labels") or {}).get(key) == value and label_selector_object_matches(
                term.get("labelSelector"), other_labels
            ):
                return True
    return False


def preferred_anti_affinity_weight(
    pod: KubeObject, node: KubeObject, nodes: dict[str, KubeObject], placed: list[KubeObject]
) -> int:
    """InterPodAffinity's scoring for preferred pod anti-affinity: the summed weights of the pod's preferred
    anti-affinity terms matched by pods already placed in the node's topology domain (same value of the term's
    topologyKey). The scheduler takes it off the node's score, so replicas spread across nodes."""
    terms = ((pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    total = 0
    for term in terms:
        affinity_term = term.get("podAffinityTerm") or {}
        key = affinity_term.get("topologyKey") or ""
        domain = (node["metadata"].get("labels") or {}).get(key)
        if domain is None:
            continue
        namespaces = affinity_term.get("namespaces") or [pod["metadata"].get("namespace")]
        for other in placed:
            other_node = nodes.get(other["spec"].get("nodeName") or "")
            if (
                other_node is not None
                and other["metadata"].get("namespace") in namespaces
                and (other_node["metadata"].get("labels") or {}).get(key) == domain
                and label_selector_object_matches(affinity_term.get("labelSelector"), other["metadata"].get("labels"))
            ):
                total += int(term.get("weight") or 0)
    return total
