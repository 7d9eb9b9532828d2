"""MIG layouts proposed from demand (issue 15): for the MIG-capable nodes of each product, the carvings whose
instances best match what the window's work asked for, as proposals planner.engine replays (origin
"suggested") and the app can turn into carve previews. Pure Python, no Django.

Demand. Every job of the window that asks for a class of the product (a MIG profile under the mixed strategy,
or the whole GPU) adds its units from its submission for its run time: per profile, the share of the window
spent at each level of concurrent demand.

Candidates. Every full per-GPU layout the product's geometry allows (vocab.mig.place: each set of profiles, the
media-extension ones aside, that fits at its allowed slots and leaves no room for another instance) and MIG off
(a whole GPU).

Score (a quick fluid estimate, in normalised GPUs, lower is better): per profile, the expected demand above
its capacity (work that would wait) weighs ``UNCOVERED_WEIGHT`` times as much as the expected capacity no demand
uses (stranded), and compute a layout leaves out of every instance counts as stranded too. Three
searches, each keeping its best: the same layout on every node of the product; a mix, nodes given whole-node
layouts one at a time, each to the layout that lowers the score most; and the same mix one GPU at a time (a
node whose GPUs differ gets a per-GPU list). The best distinct results that differ from today's carving are
returned, best first; the replay then measures what they really do to waits and stranded capacity.

Over a fleet, each cluster's nodes of a product are searched apart (a proposal names one cluster), against the
demand of the work that ran on that cluster (``PastJob.cluster``).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

from vocab import mig
from vocab.names import GPU_RESOURCE, is_mig_resource, mig_profile_of_resource

from . import model
from .proposals import Invalid, apply, base_product, single_strategy_profile, validate

#: Demand not covered costs this many times capacity left idle: waiting work is worse than an idle slice.
UNCOVERED_WEIGHT = 3.0
#: Per GPU, a layout is this many instances of each profile; None is MIG off (one whole GPU).
Layout = tuple[tuple[str, int], ...] | None


def candidate_layouts(geometry: mig.MigProduct) -> list[Layout]:
    """Every layout one GPU of this product can carry (the media-extension profiles aside), and MIG off."""
    profiles = [p for p in geometry.profiles if not p.name.endswith("+me")]
    out: list[Layout] = [None]
    ranges = [range(0, p.max_instances + 1) for p in profiles]
    for counts in itertools.product(*ranges):
        if not any(counts):
            continue
        if sum(p.compute * n for p, n in zip(profiles, counts, strict=True)) > geometry.compute_slices:
            continue
        layout = {p.name: n for p, n in zip(profiles, counts, strict=True) if n}
        if mig.place(geometry, layout) is None:
            continue
        # Only full layouts: one that still has room for another instance leaves part of the GPU unused.
        if any(mig.place(geometry, {**layout, p.name: layout.get(p.name, 0) + 1}) is not None for p in profiles):
            continue
        out.append(tuple(sorted(layout.items())))
    return out


def _instances(layout: Layout) -> dict[str, int]:
    return {"": 1} if layout is None else dict(layout)


class Demand:
    """Concurrent demand for one profile over the window, as the share of time at each level (units)."""

    def __init__(self, shares: dict[int, float]) -> None:
        self.shares = shares
        self._short: dict[int, float] = {}
        self._idle: dict[int, float] = {}

    def short(self, capacity: int) -> float:
        """Expected units of demand above ``capacity`` (waiting)."""
        found = self._short.get(capacity)
        if found is None:
            found = self._short[capacity] = sum(
                w * (level - capacity) for level, w in self.shares.items() if level > capacity
            )
        return found

    def idle(self, capacity: int) -> float:
        """Expected units of ``capacity`` no demand uses (stranded)."""
        found = self._idle.get(capacity)
        if found is None:
            found = self._idle[capacity] = sum(
                w * (capacity - level) for level, w in self.shares.items() if level < capacity
            )
        return found


def demand_levels(
    history: model.History, cluster: model.Cluster, label: str, where: str | None = None
) -> dict[str, Demand]:
    """Profile ("" for the whole GPU) → its concurrent demand over the window, for the classes of the product
    label ``label`` (its base, before any carving): each job adds its units from its submission for its run time
    (the demand had it started at once). ``where``: only the work that ran on that cluster."""
    profile_of: dict[int, str] = {}
    for cls in cluster.classes.values():
        if base_product(cls.product_label) != label:
            continue
        if single := single_strategy_profile(cls.resource_name, cls.product_label):
            profile_of[cls.id] = single  # a single-strategy node's nvidia.com/gpu is a MIG device
        elif cls.resource_name == GPU_RESOURCE and not cls.product_label.endswith("-SHARED"):
            profile_of[cls.id] = ""
        elif is_mig_resource(cls.resource_name):
            profile_of[cls.id] = mig_profile_of_resource(cls.resource_name)
    changes: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job in history.jobs:
        profile = profile_of.get(job.class_id)
        if profile is None or (where is not None and (job.cluster or cluster.home) != where):
            continue
        begin = max(job.submitted, history.start)
        end = min(job.submitted + job.run_s, history.end)
        if end > begin:
            units = job.count * job.workers
            changes[profile] += [(begin, units), (end, -units)]
    out = {}
    duration = history.end - history.start
    for profile, steps in changes.items():
        steps.sort()
        at_level: Counter[int] = Counter()
        level, last = 0, history.start
        for t, delta in steps:
            at_level[level] += t - last
            level, last = level + delta, t
        at_level[level] += history.end - last
        out[profile] = Demand({value: spent / duration for value, spent in at_level.items() if spent > 0})
    return out


class Fit:
    """The fluid score of a capacity per profile against the demand: expected normalised GPUs of demand left
    waiting (× UNCOVERED_WEIGHT) plus expected normalised GPUs idle, including compute no instance uses."""

    def __init__(self, geometry: mig.MigProduct, demand: dict[str, Demand]) -> None:
        self.demand = demand
        self.fraction = {p.name: p.compute / geometry.compute_slices for p in geometry.profiles} | {"": 1.0}
        self.slices = geometry.compute_slices
        self.geometry = geometry

    def unused(self, layout: Layout) -> float:
        """Share of a GPU's compute this layout leaves out of every instance."""
        if layout is None:
            return 0.0
        used = sum(self.geometry.profile(p).compute * n for p, n in layout)
        return (self.slices - used) / self.slices

    def score(self, capacity: dict[str, int], unused: float) -> float:
        total = unused
        for profile in set(capacity) | set(self.demand):
            have = capacity.get(profile, 0)
            weight = self.fraction.get(profile, 1.0)
            demand = self.demand.get(profile)
            if demand is None:
                total += weight * have
            else:
                total += weight * (UNCOVERED_WEIGHT * demand.short(have) + demand.idle(have))
        return total


def _add(capacity: dict[str, int], layout: Layout, gpus: int, sign: int = 1) -> None:
    for profile, n in _instances(layout).items():
        capacity[profile] = capacity.get(profile, 0) + sign * n * gpus


def _uniform(fit: Fit, layout: Layout, gpus: int) -> float:
    capacity: dict[str, int] = {}
    _add(capacity, layout, gpus)
    return fit.score(capacity, fit.unused(layout) * gpus)


def _greedy(slots: list[int], candidates: list[Layout], fit: Fit) -> tuple[float, list[Layout]]:
    """Give each slot (a node's or a GPU's worth of GPUs) in turn the layout that lowers the score most."""
    capacity: dict[str, int] = {}
    unused = 0.0
    chosen: list[Layout] = []
    for gpus in slots:
        best = None
        for layout in candidates:
            _add(capacity, layout, gpus)
            value = fit.score(capacity, unused + fit.unused(layout) * gpus)
            _add(capacity, layout, gpus, -1)
            if best is None or value < best[0]:
                best = (value, layout)
        chosen.append(best[1])
        _add(capacity, best[1], gpus)
        unused += fit.unused(best[1]) * gpus
    return fit.score(capacity, unused), chosen


def _describe(layout: Layout) -> str:
    if layout is None:
        return "MIG off"
    return " + ".join(f"{n}×{p}" for p, n in layout)


def suggest(history: model.History, cluster: model.Cluster, count: int) -> list[model.Proposal]:
    """Up to ``count`` MIG carvings of the cluster's MIG-capable nodes fitted to the window's demand, best first,
    each a proposal of MigChanges (one per set of nodes given the same per-GPU layouts)."""
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for name, shape in sorted(cluster.shapes.items()):
        geometry = mig.product_geometry(shape.product)
        node = cluster.nodes.get(name)
        if shape.mig_capable and geometry is not None and node is not None and shape.gpu_count:
            groups[(node.cluster or cluster.home, geometry.key, base_product(node.product_label))].append(name)
    fleet = len({where for where, _, _ in groups}) > 1 or len(cluster.clusters) > 1
    options: list[tuple[float, str, str, list[model.MigChange]]] = []
    for (where, key, label), keys in groups.items():
        geometry = next(g for g in mig.CATALOGUE if g.key == key)
        demand = demand_levels(history, cluster, label, where if fleet else None)
        names = [cluster.node_name(k) for k in keys]
        gpus = {name: cluster.shapes[k].gpu_count for name, k in zip(names, keys, strict=True)}
        if not demand:
            continue
        candidates = candidate_layouts(geometry)
        fit = Fit(geometry, demand)
        found: list[tuple[float, list[list[Layout]]]] = []
        # 1. One layout everywhere.
        for layout in candidates:
            found.append((_uniform(fit, layout, sum(gpus.values())), [[layout] * gpus[n] for n in names]))
        # 2. Whole nodes, one at a time.
        value, per_node = _greedy([gpus[n] for n in names], candidates, fit)
        found.append((value, [[layout] * gpus[n] for n, layout in zip(names, per_node, strict=True)]))
        # 3. GPU by GPU.
        value, per_gpu = _greedy([1] * sum(gpus.values()), candidates, fit)
        per_gpu.sort(key=lambda layout: (layout is None, layout or ()))
        split, at = [], 0
        for n in names:
            split.append(per_gpu[at : at + gpus[n]])
            at += gpus[n]
        found.append((value, split))
        for value, assignment in found:
            changes = _changes(names, assignment)
            what = "; ".join(f"{len(c.nodes)} node(s) {_summary(c)}" for c in changes)
            options.append((value, f"{key} in {where}: {what}" if fleet else f"{key}: {what}", where, changes))
    # Best first within each product, the products taken in turn: fit scores measure each product's own demand,
    # so one product's many near-equal carvings must not crowd out the best carving of another.
    rank: dict[str, int] = defaultdict(int)
    ordered = []
    for value, what, where, changes in sorted(options, key=lambda o: (o[0], o[1])):
        group = what.split(":", 1)[0]
        ordered.append((rank[group], value, what, where, changes))
        rank[group] += 1
    out, seen = [], set()
    for _rank, _value, what, where, changes in sorted(ordered, key=lambda o: o[:3]):
        if what in seen or _is_current(cluster, changes, where):
            continue
        if validate(cluster, model.Proposal(what, changes, where)):
            continue  # the nodes' device plugin would refuse it (a single-strategy node takes one profile)
        seen.add(what)
        out.append(model.Proposal(f"Suggested {len(out) + 1}: {what}", changes, where))
        if len(out) >= count:
            break
    return out


def _changes(names: list[str], assignment: list[list[Layout]]) -> list[model.MigChange]:
    by_layouts: dict[tuple, list[str]] = defaultdict(list)
    for name, layouts in zip(names, assignment, strict=True):
        by_layouts[tuple(layouts)].append(name)
    changes = []
    for layouts, nodes in sorted(by_layouts.items(), key=lambda kv: kv[1][0]):
        uniform = len(set(layouts)) == 1
        per_gpu = [None if layout is None else dict(layout) for layout in (layouts[:1] if uniform else layouts)]
        changes.append(model.MigChange(tuple(nodes), per_gpu=tuple(per_gpu)))
    return changes


def _summary(change: model.MigChange) -> str:
    layouts = [None if g is None else tuple(sorted(g.items())) for g in change.per_gpu]
    if len(layouts) == 1:
        return _describe(layouts[0])
    counted = Counter(layouts)
    return ", ".join(f"{n} GPU(s) {_describe(layout)}" for layout, n in counted.most_common())


def _is_current(cluster: model.Cluster, changes: list[model.MigChange], where: str = "") -> bool:
    """Whether the nodes already advertise what the changes would make them advertise (under their own MIG
    strategy: proposals.apply says what that is)."""
    try:
        after = apply(cluster, model.Proposal("current?", changes, where))
    except Invalid:
        return False
    keys = [cluster.node_key(where, name) for change in changes for name in change.nodes]
    return all(
        {r: n for r, n in after.nodes[key].allocatable.items() if n}
        == {r: n for r, n in cluster.nodes[key].allocatable.items() if n}
        and after.nodes[key].product_label == cluster.nodes[key].product_label
        for key in keys
    )
