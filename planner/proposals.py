"""Proposals: checking a proposed change to the cluster and applying it to a copy. Pure Python, no Django.

A proposal is a list of changes applied in order (planner.model): MIG layouts, time-slicing, quotas, nodes added
like an existing one, nodes removed. ``validate`` says every problem at once; ``apply`` returns a new Cluster
(the input is never changed) and raises ``Invalid`` with those problems.

What a node advertises after a change is what the portal's own carving plans (gpus.nodeconfig_plan) say it will
advertise, through the same pure rules of vocab.mig: a MIG layout is checked with the product's geometry
(``layout_problems``: the profiles it has, their instance limits, compute slices, slots) and advertised under the
mixed strategy (``advertised_after``: one ``nvidia.com/mig-<profile>`` per profile, GPUs left whole stay
``nvidia.com/gpu``); time-slicing advertises ``replicas × GPUs`` of ``nvidia.com/gpu`` under the product label
with ``-SHARED`` (the device plugin's default without renaming), a class whose share of a GPU is 1/replicas.
A proposal names its cluster (``Proposal.cluster``; "" for the default one): its changes' node names are that
cluster's nodes, looked up by their fleet keys (``model.Cluster.node_key``), and nodes it adds join that cluster.
Quota changes are fleet-wide, as quotas are.

Resource classes a change brings into being get negative ids and the portal's default names
(vocab.names.class_default_name); classes no node offers any more stay, with no capacity, so the work that asks
for them waits and is reported as never running.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, replace

from jobs.scheduling.snapshot import ClassView, QuotaView
from vocab import mig
from vocab.names import (
    GPU_RESOURCE,
    MIG_PRODUCT_INFIX,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_SINGLE,
    SHARED_PRODUCT_SUFFIX,
    class_default_name,
    is_mig_resource,
    mig_profile_of_resource,
)

from . import model

#: Bounds the portal's own forms use: time-slicing replicas per GPU (gpus.nodeconfig_plan) and nodes added at once.
MAX_REPLICAS = 64
MAX_ADDED_NODES = 1000

CHANGE_TYPES: dict[str, type] = {
    cls.TYPE: cls
    for cls in (model.MigChange, model.TimeSlicingChange, model.QuotaChange, model.AddNodes, model.RemoveNodes)
}


class Invalid(Exception):
    """A proposal that cannot be applied; ``problems`` are sentences saying what to fix, all of them at once."""

    def __init__(self, problems: list[str]):
        super().__init__(" ".join(problems))
        self.problems = problems


# -- JSON --------------------------------------------------------------------------------------------------------


def change_to_json(change: model.Change) -> dict:
    data = {"type": change.TYPE}
    for f in fields(change):
        value = getattr(change, f.name)
        if isinstance(value, tuple):
            value = [dict(v) if isinstance(v, dict) else v for v in value]
        data[f.name] = value
    if isinstance(change, model.MigChange):
        data["per_gpu"] = [None if v is None else dict(v) for v in change.per_gpu]
    return data


def to_json(proposal: model.Proposal) -> dict:
    changes = [change_to_json(c) for c in proposal.changes]
    return {"name": proposal.name, "cluster": proposal.cluster, "changes": changes}


def _int(value, where: str, problems: list[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{where} must be a whole number; got {value!r}.")
        return 0
    return value


def _names(value, where: str, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where} must be a list of node names.")
        return ()
    return tuple(value)


def change_from_json(data, where: str, problems: list[str]) -> model.Change | None:
    if not isinstance(data, dict):
        problems.append(f'{where} must be an object with a "type".')
        return None
    kind = data.get("type")
    cls = CHANGE_TYPES.get(kind)
    if cls is None:
        problems.append(f"{where}: unknown type {kind!r}; use one of {', '.join(CHANGE_TYPES)}.")
        return None
    known = {f.name for f in fields(cls)} | {"type"}
    unknown = sorted(set(data) - known)
    if unknown:
        problems.append(
            f"{where} ({kind}): unknown field(s) {', '.join(unknown)}; it takes {', '.join(sorted(known))}."
        )
    required = [f.name for f in fields(cls) if f.default is MISSING and f.name not in data]
    required = [name for name in required if name not in ("preset", "per_gpu")]
    if required:
        problems.append(f"{where} ({kind}): missing {', '.join(required)}.")
        return None
    before = len(problems)
    if cls is model.MigChange:
        preset = data.get("preset", "")
        if not isinstance(preset, str):
            problems.append(f'{where} (mig): preset must be a preset\'s name, e.g. "all-3g.40gb".')
            preset = ""
        per_gpu = data.get("per_gpu", [])
        layouts: list[dict | None] = []
        if not isinstance(per_gpu, list | tuple):
            problems.append(f"{where} (mig): per_gpu must be a list of layouts, one per GPU ({{profile: count}}).")
        else:
            for i, layout in enumerate(per_gpu):
                if layout is None:
                    layouts.append(None)
                elif isinstance(layout, dict) and all(isinstance(k, str) for k in layout):
                    at = f"{where} (mig): per_gpu[{i}]"
                    layouts.append({k: _int(v, f"{at}[{k!r}]", problems) for k, v in layout.items()})
                else:
                    problems.append(f"{where} (mig): per_gpu[{i}] must be {{profile: count}} or null (MIG off).")
        change = model.MigChange(_names(data["nodes"], f"{where} (mig): nodes", problems), preset, tuple(layouts))
    elif cls is model.TimeSlicingChange:
        change = model.TimeSlicingChange(
            _names(data["nodes"], f"{where} (time_slicing): nodes", problems),
            _int(data["replicas"], f"{where} (time_slicing): replicas", problems),
        )
    elif cls is model.QuotaChange:
        change = model.QuotaChange(
            *(_int(data[k], f"{where} (quota): {k}", problems) for k in ("team", "class_id", "guaranteed", "limit"))
        )
    elif cls is model.AddNodes:
        like = data["like"]
        if not isinstance(like, str):
            problems.append(f"{where} (add_nodes): like must be a node's name.")
            like = ""
        change = model.AddNodes(like, _int(data["count"], f"{where} (add_nodes): count", problems))
    else:
        change = model.RemoveNodes(_names(data["nodes"], f"{where} (remove_nodes): nodes", problems))
    return change if len(problems) == before else None


def from_json(data) -> model.Proposal:
    """A proposal from its JSON form ({"name": ..., "cluster": ..., "changes": [...]}; no cluster, as runs stored
    before the fleet have it: the default cluster); raises Invalid with every problem."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise Invalid(['A proposal is an object with a "name" and a list of "changes".'])
    name = data.get("name", "")
    if not isinstance(name, str) or not name.strip():
        problems.append("Give the proposal a name.")
        name = ""
    where = data.get("cluster") or ""
    if not isinstance(where, str):
        problems.append('"cluster" must be a cluster\'s name.')
        where = ""
    raw = data.get("changes", [])
    if not isinstance(raw, list):
        problems.append('"changes" must be a list.')
        raw = []
    changes = [change_from_json(item, f"Change {i + 1}", problems) for i, item in enumerate(raw)]
    if problems:
        raise Invalid(problems)
    return model.Proposal(name.strip(), [c for c in changes if c is not None], where)


# -- validating and applying ------------------------------------------------------------------------------------


def copy_cluster(cluster: model.Cluster) -> model.Cluster:
    return model.Cluster(
        nodes={
            name: replace(n, free=dict(n.free), allocatable=dict(n.allocatable), topology=dict(n.topology))
            for name, n in cluster.nodes.items()
        },
        shapes={name: replace(s) for name, s in cluster.shapes.items()},
        classes=dict(cluster.classes),
        quotas=dict(cluster.quotas),
        team_names=dict(cluster.team_names),
        patience=cluster.patience,
        home=cluster.home,
        clusters=cluster.clusters,
    )


def base_product(label: str) -> str:
    """The product label without time-slicing's "-SHARED" or the single strategy's "-MIG-<profile>"."""
    return label.split(MIG_PRODUCT_INFIX)[0].removesuffix(SHARED_PRODUCT_SUFFIX)


def mig_enabled(node) -> bool:
    return any(is_mig_resource(r) for r in node.allocatable)


def validate(cluster: model.Cluster, proposal: model.Proposal) -> list[str]:
    """Every problem of the proposal on this cluster, as sentences; [] when it can be applied."""
    return _apply(cluster, proposal)[1]


def apply(cluster: model.Cluster, proposal: model.Proposal) -> model.Cluster:
    """The cluster after the proposal's changes, as a new Cluster; raises Invalid with every problem."""
    out, problems = _apply(cluster, proposal)
    if problems:
        raise Invalid(problems)
    return out


def _apply(cluster: model.Cluster, proposal: model.Proposal) -> tuple[model.Cluster, list[str]]:
    out = copy_cluster(cluster)
    problems: list[str] = []
    at = proposal.cluster or cluster.home
    if cluster.clusters and at not in cluster.clusters:
        held = ", ".join(cluster.clusters)
        return out, [f"there is no cluster {at!r} in this replay; name one of {held}."]
    #: (resource, product label) → the share of a GPU a class created for it will have, and its name's parts
    made: dict[tuple[str, str], tuple[float, str, str, int]] = {}
    for i, change in enumerate(proposal.changes):
        where = f"Change {i + 1} ({getattr(change, 'TYPE', type(change).__name__)})"
        handler = _HANDLERS.get(type(change))
        if handler is None:
            problems.append(f"{where}: not a change the planner knows.")
            continue
        found = handler(out, change, made, at)
        problems.extend(f"{where}: {p}" for p in found)
        if isinstance(change, model.MigChange | model.TimeSlicingChange | model.AddNodes) and not found:
            _ensure_classes(out, made)
    return out, problems


def _missing_nodes(cluster: model.Cluster, names: tuple[str, ...], at: str) -> list[str]:
    if not names:
        return ["name at least one node."]
    missing = [n for n in names if cluster.node_key(at, n) not in cluster.nodes]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return [f"no node named {shown} in {_where(at)}."]
    if len(set(names)) != len(names):
        return ["a node is named twice."]
    return []


def _where(at: str) -> str:
    return f"cluster {at}" if at else "the cluster"


def _mig(cluster: model.Cluster, change: model.MigChange, made, at: str) -> list[str]:
    problems = _missing_nodes(cluster, change.nodes, at)
    if problems:
        return problems
    if bool(change.preset) == bool(change.per_gpu):
        return ["give either a preset for the nodes or a layout per GPU (per_gpu), not both or neither."]
    plans = []
    for name in change.nodes:
        key = cluster.node_key(at, name)
        node, shape = cluster.nodes[key], cluster.shapes.get(key)
        geometry = mig.product_geometry(shape.product) if shape else None
        if shape is None or geometry is None or not shape.mig_capable:
            product = shape.product if shape else "no known GPUs"
            problems.append(f"{name} has {product or 'no known GPUs'}, which cannot be partitioned with MIG.")
            continue
        if change.preset:
            presets = mig.preset_layouts(geometry)
            if change.preset not in presets:
                problems.append(
                    f"{change.preset} is not a GPU Operator preset for {geometry.key} ({name}); choose one of "
                    f"{', '.join(presets)}."
                )
                continue
            layout = presets[change.preset]
            per_gpu = [None if layout is None else dict(layout) for _ in range(shape.gpu_count)]
        else:
            if len(change.per_gpu) not in (1, shape.gpu_count):
                problems.append(
                    f"{name} has {shape.gpu_count} GPUs; give one layout for all of them or one per GPU "
                    f"({len(change.per_gpu)} given)."
                )
                continue
            layouts = list(change.per_gpu) * (shape.gpu_count if len(change.per_gpu) == 1 else 1)
            per_gpu = [None if layout is None else {p: n for p, n in layout.items() if n} for layout in layouts]
            bad = False
            for index, layout in enumerate(per_gpu):
                if layout is not None:
                    for problem in mig.layout_problems(geometry, layout):
                        if len(change.per_gpu) == 1:
                            if index == 0:
                                problems.append(f"{name}: {problem}")
                        else:
                            problems.append(f"{name} GPU {index}: {problem}")
                        bad = True
            if bad:
                continue
        # As the portal's carving plans it (gpus.nodeconfig_plan.plan_mig) for a node whose device plugin runs the
        # single strategy; any other node is advertised under the mixed strategy (the GPU Operator's usual choice).
        strategy = MIG_STRATEGY_SINGLE if shape.mig_strategy == MIG_STRATEGY_SINGLE else MIG_STRATEGY_MIXED
        resources, label, refused = mig.advertised_after(geometry, per_gpu, strategy, node.product_label)
        if refused:
            problems.extend(f"{name}: {p}" for p in refused)
            continue
        plans.append((node, shape, geometry, resources, label))
    if problems:
        return sorted(set(problems), key=problems.index)
    for node, shape, geometry, resources, label in plans:
        _advertise(node, resources, label)
        for resource in resources:
            single = single_strategy_profile(resource, label)
            if is_mig_resource(resource) or single:
                profile = geometry.profile(single or mig_profile_of_resource(resource))
                fraction = profile.compute / geometry.compute_slices if profile else 1.0
                made[(resource, label)] = (fraction, shape.product, "mig", profile.name if profile else resource)
            else:
                made[(resource, label)] = (1.0, shape.product, "gpu", "")
    return []


def single_strategy_profile(resource: str, label: str) -> str:
    """The MIG profile an ``nvidia.com/gpu`` of a single-strategy node is ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" →
    "1g.5gb"), or "" for any other resource."""
    if resource != GPU_RESOURCE or MIG_PRODUCT_INFIX not in label:
        return ""
    return label.split(MIG_PRODUCT_INFIX, 1)[1]


def _advertise(node, resources: dict[str, int], label: str) -> None:
    node.allocatable = dict(resources)
    node.free = dict(resources)
    node.product_label = label


def _time_slicing(cluster: model.Cluster, change: model.TimeSlicingChange, made, at: str) -> list[str]:
    problems = _missing_nodes(cluster, change.nodes, at)
    if not 1 <= change.replicas <= MAX_REPLICAS:
        problems.append(f"replicas must be between 1 (no sharing) and {MAX_REPLICAS} per GPU; got {change.replicas}.")
    if problems:
        return problems
    for name in change.nodes:
        key = cluster.node_key(at, name)
        node, shape = cluster.nodes[key], cluster.shapes.get(key)
        if shape is None or not shape.gpu_count:
            problems.append(f"{name} has no GPUs to share.")
        elif mig_enabled(node):
            problems.append(
                f"{name} has MIG enabled; time-slicing here would share MIG devices. Apply all-disabled first (a "
                "mig change before this one), then share the whole GPUs."
            )
    if problems:
        return problems
    for name in change.nodes:
        key = cluster.node_key(at, name)
        node, shape = cluster.nodes[key], cluster.shapes[key]
        base = base_product(node.product_label)
        if change.replicas > 1:
            label = base + SHARED_PRODUCT_SUFFIX
            made[(GPU_RESOURCE, label)] = (1 / change.replicas, shape.product, "shared", str(change.replicas))
        else:
            label = base
            made[(GPU_RESOURCE, label)] = (1.0, shape.product, "gpu", "")
        _advertise(node, {GPU_RESOURCE: change.replicas * shape.gpu_count}, label)
    return []


def _quota(cluster: model.Cluster, change: model.QuotaChange, made, at: str) -> list[str]:
    problems = []
    teams = set(cluster.team_names) | {team for team, _ in cluster.quotas}
    if change.team not in teams:
        problems.append(f"no team with id {change.team}.")
    if change.class_id not in cluster.classes:
        problems.append(f"no resource class with id {change.class_id} (a class a change creates has a negative id).")
    if change.guaranteed < 0 or change.limit < 0:
        problems.append("guaranteed and limit must be 0 or more.")
    elif change.guaranteed > change.limit:
        problems.append(f"the guarantee ({change.guaranteed}) cannot be above the limit ({change.limit}).")
    if problems:
        return problems
    old = cluster.quotas.get((change.team, change.class_id))
    cluster.quotas[(change.team, change.class_id)] = (
        replace(old, guaranteed=change.guaranteed, limit=change.limit)
        if old is not None
        else QuotaView(change.guaranteed, change.limit)
    )
    return []


def _add_nodes(cluster: model.Cluster, change: model.AddNodes, made, at: str) -> list[str]:
    problems = []
    like_key = cluster.node_key(at, change.like)
    if like_key not in cluster.nodes:
        problems.append(f"no node named {change.like!r} in {_where(at)} to copy.")
    if not 1 <= change.count <= MAX_ADDED_NODES:
        problems.append(f"count must be between 1 and {MAX_ADDED_NODES}; got {change.count}.")
    if problems:
        return problems
    like, shape = cluster.nodes[like_key], cluster.shapes.get(like_key)
    n = 0
    for _ in range(change.count):
        n += 1
        while f"{like_key}-new-{n}" in cluster.nodes:
            n += 1
        name = f"{like_key}-new-{n}"  # in the same cluster as the node it copies
        cluster.nodes[name] = replace(
            like,
            name=name,
            allocatable=dict(like.allocatable),
            free=dict(like.allocatable),
            cpu_free_m=like.cpu_capacity_m or like.cpu_free_m,
            memory_free_mb=like.memory_capacity_mb or like.memory_free_mb,
            topology=dict(like.topology),
        )
        if shape is not None:
            cluster.shapes[name] = replace(shape, name=name)
    return []


def _remove_nodes(cluster: model.Cluster, change: model.RemoveNodes, made, at: str) -> list[str]:
    problems = _missing_nodes(cluster, change.nodes, at)
    if problems:
        return problems
    for name in change.nodes:
        key = cluster.node_key(at, name)
        del cluster.nodes[key]
        cluster.shapes.pop(key, None)
    return []


_HANDLERS = {
    model.MigChange: _mig,
    model.TimeSlicingChange: _time_slicing,
    model.QuotaChange: _quota,
    model.AddNodes: _add_nodes,
    model.RemoveNodes: _remove_nodes,
}


def _ensure_classes(cluster: model.Cluster, made: dict) -> None:
    """A class for every (resource, product label) a changed node advertises: an existing one keeps its id (its
    share of a GPU follows the change: a time-sliced class's 1/replicas), a new one gets the next negative id."""
    by_key = {(c.resource_name, c.product_label): c for c in cluster.classes.values()}
    next_id = min([0, *cluster.classes]) - 1
    for key, (fraction, product, kind, extra) in made.items():
        resource, label = key
        replicas = int(extra) if kind == "shared" else 1
        name = class_default_name(product, kind, extra if kind == "mig" else "", replicas)
        found = by_key.get(key)
        if found is None:
            view = ClassView(next_id, resource, label, fraction, name)
            cluster.classes[next_id] = by_key[key] = view
            next_id -= 1
        elif abs(found.gpu_fraction - fraction) > 1e-9:
            cluster.classes[found.id] = by_key[key] = replace(found, gpu_fraction=fraction, name=name, offered=True)
        elif not found.offered:  # a class no node offers today that the proposal brings back
            cluster.classes[found.id] = by_key[key] = replace(found, offered=True)
    made.clear()
