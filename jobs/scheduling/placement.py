"""Placement: which node (and which GPUs on it) a task goes to. Pure Python, no Django, no I/O.

The model is per node and per GPU: every GPU has a number of free thousandths ("milli", 1000 = a whole
GPU), and the node has free CPU (millicores) and memory (MiB). A demand asks for

- ``gpus == 0``: CPU and memory only;
- ``gpus == 1, milli < 1000``: a share of one GPU, packed next to other shares on that GPU;
- ``milli == 1000``: ``gpus`` whole GPUs, all on one node;

optionally restricted to some GPU models. The admission cycle (jobs.scheduling) uses the same engine with
one "GPU" per advertised unit of a resource (a whole GPU, a MIG slice, a time-sliced replica), so the
accounting, the scoring and the memo are the ones the trace replay (bench/replay.py) measures.

Scoring is fragmentation-aware, after Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent" (USENIX ATC '23). For a node state and a typical task *m*,
the *fragment* is the free GPU milli that *m* cannot use there: all of it when *m* does not fit at all (CPU,
memory, model or GPUs short), else the free milli of the GPUs with less free than *m* needs per GPU. The
node's expected fragmentation F is the mean fragment over the workload's distribution of task types. FGD
places each task where F grows least.

The portal's policy (``POLICY_PORTAL``) keeps that measure and changes two things, and the engine adds a
third; each is measured on the trace in docs/benchmarks.md:

1. Scarcity. A task type restricted to some GPU models weighs more, in proportion to how small its pool is
   (all GPUs / GPUs of its models). On a model a constrained type cannot use, all free GPU is its fragment,
   so a flexible task placed there lowers F: FGD already steers flexible tasks off the constrained pools.
   Weighting by scarcity makes that pull as strong as the competition for each pool, which is what lifts
   allocation on the constrained trace.
2. Packing. The score adds a small multiple of the GPU milli the node is left with (best fit). Many
   placements tie or nearly tie on fragmentation (CPU-only tasks always do, and shares often do); the pull
   breaks those ties towards the fullest node, and ties on both go to the node left with the least CPU.
3. Speed. Node states are memoised by signature (model, tag, free CPU, free memory, sorted free milli per
   GPU); nodes in the same state form one group, so a decision looks at each distinct state once, not at
   every node, and F and the score of a task type on a state are computed once for the whole run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

WHOLE = 1000

POLICY_FGD = "fgd"
POLICY_PORTAL = "portal"
POLICY_BESTFIT = "bestfit"
POLICY_RANDOM = "random"
POLICIES = (POLICY_PORTAL, POLICY_FGD, POLICY_BESTFIT, POLICY_RANDOM)

#: Weight of "GPU milli left free on the node" next to the growth of expected fragmentation (both in milli)
#: in the portal's score: for shares and CPU-only tasks (which otherwise tie often and should fill the
#: nodes with the least GPU left), and a little less for whole GPUs (which want nodes left whole). Chosen
#: on a few seeds of the four trace variants (docs/benchmarks.md).
PACKING_SHARED = 0.03
PACKING_WHOLE = 0.02

#: (model, tag, cpu free, memory free, free milli per GPU sorted ascending)
Signature = tuple[str, Hashable, int, int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Demand:
    gpus: int = 0
    #: Thousandths of each GPU; below 1000 only for a single shared GPU.
    milli: int = WHOLE
    cpu_m: int = 0
    memory_mb: int = 0
    #: GPU models the task may run on; empty: any.
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.gpus < 0 or not 0 < self.milli <= WHOLE or (self.gpus > 1 and self.milli != WHOLE):
            raise ValueError(f"A demand is whole GPUs, or a share of one GPU; got {self.gpus} × {self.milli}.")

    @property
    def gpu_milli(self) -> int:
        return self.gpus * self.milli


@dataclass(slots=True)
class Node:
    name: str
    model: str
    #: Free milli of each GPU, in device order.
    gpu_free: list[int]
    cpu_free_m: int
    memory_free_mb: int
    #: The caller's own eligibility key (team, driver...), part of the signature; see ``Placer.choose``.
    tag: Hashable = None

    @property
    def signature(self) -> Signature:
        return (self.model, self.tag, self.cpu_free_m, self.memory_free_mb, tuple(sorted(self.gpu_free)))


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    #: Device indices on the node the demand takes (empty for a CPU-only demand).
    gpu_indices: tuple[int, ...]
    score: tuple


def fits(sig: Signature, demand: Demand) -> bool:
    model, _tag, cpu, memory, gpus = sig
    if cpu < demand.cpu_m or memory < demand.memory_mb:
        return False
    if demand.gpus == 0:
        return True
    if demand.models and model not in demand.models:
        return False
    return sum(1 for free in gpus if free >= demand.milli) >= demand.gpus


def fragment(sig: Signature, demand: Demand) -> int:
    """Free GPU milli on a node in state ``sig`` that a task like ``demand`` cannot use (FGD's definition)."""
    gpus = sig[4]
    if not fits(sig, demand):
        return sum(gpus)
    if demand.gpus == 0:
        return 0
    return sum(free for free in gpus if free < demand.milli)


def after(sig: Signature, demand: Demand) -> list[Signature]:
    """The states a node in ``sig`` can be left in by placing ``demand`` (one per distinct GPU choice)."""
    model, tag, cpu, memory, gpus = sig
    cpu, memory = cpu - demand.cpu_m, memory - demand.memory_mb
    if demand.gpus == 0:
        return [(model, tag, cpu, memory, gpus)]
    if demand.milli == WHOLE:
        rest = list(gpus)
        for _ in range(demand.gpus):
            rest.remove(WHOLE)
        return [(model, tag, cpu, memory, tuple(sorted([*rest, *([0] * demand.gpus)])))]
    out = []
    for value in sorted(set(gpus)):
        if value >= demand.milli:
            rest = list(gpus)
            rest.remove(value)
            rest.append(value - demand.milli)
            out.append((model, tag, cpu, memory, tuple(sorted(rest))))
    return out


@dataclass
class Workload:
    """The distribution of task types that fragmentation is measured against: (demand, weight), weights
    summing to 1."""

    types: list[tuple[Demand, float]]

    @classmethod
    def from_demands(
        cls, demands: Iterable[Demand], pools: dict[str, int] | None = None, coverage: float = 1.0
    ) -> Workload:
        """Task types weighted by how often they occur, keeping the most common types that cover ``coverage``
        of the weight.

        With ``pools`` (GPUs per model), a type restricted to some models weighs more in proportion to how
        small its pool is (all GPUs / GPUs of its models): free GPU stranded on a model a constrained type can
        use costs more than free GPU anyone can use, because fewer nodes can stand in for it.
        """
        weights: dict[Demand, float] = {}
        total = sum(pools.values()) if pools else 0
        for d in demands:
            w = 1.0
            if pools and d.gpus and d.models:
                eligible = sum(n for model, n in pools.items() if model in d.models)
                w = total / eligible if eligible else 1.0
            weights[d] = weights.get(d, 0.0) + w
        ranked = sorted(weights.items(), key=lambda kv: -kv[1])
        whole = sum(w for _, w in ranked) or 1.0
        kept, acc = [], 0.0
        for d, w in ranked:
            if acc >= coverage * whole:
                break
            kept.append((d, w))
            acc += w
        return cls([(d, w / acc) for d, w in kept])


class Placer:
    """A set of nodes grouped by state, and a policy choosing among the groups.

    ``choose(demand)`` returns where the demand would go and ``take(choice, demand)`` records it. Nodes can
    be changed from outside (another resource of the node was taken) and re-grouped with ``update``.

    States are interned to small integers, and indexed by what a demand needs, so a decision only looks at
    states that can hold it: states with ``k`` whole GPUs free (for whole-GPU demands), states whose best
    partly used GPU has ``v`` milli free (for shares), and states with no GPU free (CPU-only demands go there
    first: it cannot fragment anything).
    """

    def __init__(
        self,
        nodes: Iterable[Node],
        workload: Workload,
        policy: str = POLICY_PORTAL,
        seed: int = 0,
        rank: Callable[[Node], tuple] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"Unknown placement policy {policy!r}; one of {', '.join(POLICIES)}.")
        self.policy = policy
        self.workload = workload
        self.rng = random.Random(seed)
        #: Tie-break between states of equal score, from the state's first node (default: its name).
        self.rank = rank or (lambda node: (node.name,))
        self.nodes: dict[str, Node] = {}
        #: state id → the nodes in that state
        self.groups: dict[int, dict[str, Node]] = {}
        self._ids: dict[Signature, int] = {}
        self._sigs: list[Signature] = []
        self._of: dict[str, int] = {}
        self._by_whole: dict[int, dict[int, None]] = {}
        self._by_partial: dict[int, dict[int, None]] = {}
        self._full: dict[int, None] = {}
        self._frag: dict[int, float] = {}
        self._demand_ids: dict[Demand, int] = {}
        self._best: dict[tuple[int, int], tuple | None] = {}
        # The workload, flattened for F: per type (weight, cpu, memory, models, gpu shape index).
        self._shapes: list[tuple[int, int]] = []
        self._types: list[tuple[float, int, int, frozenset, int]] = []
        shape_ids: dict[tuple[int, int], int] = {}
        for d, w in workload.types:
            shape = (d.gpus, d.milli if d.gpus else 0)
            if shape not in shape_ids:
                shape_ids[shape] = len(self._shapes)
                self._shapes.append(shape)
            self._types.append((w, d.cpu_m, d.memory_mb, d.models if d.gpus else frozenset(), shape_ids[shape]))
        self._gpu_memo: dict[tuple[int, ...], list[int]] = {}
        self._weight_memo: dict[tuple[str, int, int], tuple] = {}
        self._allow: Callable[[Hashable], bool] | None = None
        self._allowed: dict[int, bool] = {}
        #: States that gained a node since ``renew_order`` last ran.
        self._touched: set[int] = set()
        for node in nodes:
            self.add(node)

    # -- state ---------------------------------------------------------------------------------------------
    def _intern(self, sig: Signature) -> int:
        sid = self._ids.get(sig)
        if sid is None:
            sid = self._ids[sig] = len(self._sigs)
            self._sigs.append(sig)
        return sid

    def _index(self, sid: int) -> dict[int, None]:
        gpus = self._sigs[sid][4]
        whole = gpus.count(WHOLE)
        if whole:
            return self._by_whole.setdefault(whole, {})
        best = max(gpus, default=0)
        return self._by_partial.setdefault(best, {}) if best else self._full

    def add(self, node: Node) -> None:
        self.nodes[node.name] = node
        sid = self._intern(node.signature)
        self._of[node.name] = sid
        group = self.groups.get(sid)
        if group is None:
            group = self.groups[sid] = {}
            self._index(sid)[sid] = None
        group[node.name] = node
        self._touched.add(sid)

    def renew_order(self) -> None:
        """Put the nodes of each state in name order, as an engine built afresh over them has them (a state's
        first node is the one a choice takes). An engine kept between admission cycles calls this at the start
        of each, so it chooses among nodes in the same state as the cycle's freshly built engine would."""
        for sid in self._touched:
            group = self.groups.get(sid)
            if group is not None and len(group) > 1:
                self.groups[sid] = dict(sorted(group.items()))
        self._touched.clear()

    def remove(self, name: str) -> Node | None:
        node = self.nodes.pop(name, None)
        if node is not None:
            sid = self._of.pop(name)
            group = self.groups[sid]
            del group[name]
            if not group:
                del self.groups[sid]
                del self._index(sid)[sid]
        return node

    def update(self, node: Node) -> None:
        """Re-group a node whose free resources or tag changed outside ``take``."""
        if node.name in self.nodes:
            self.remove(node.name)
        self.add(node)

    def signature(self, name: str) -> Signature:
        return self._sigs[self._of[name]]

    def states(self) -> Iterable[tuple[Signature, dict[str, Node]]]:
        """Each distinct node state with the nodes in it (for counting what fits without visiting every node)."""
        for sid, group in self.groups.items():
            yield self._sigs[sid], group

    # -- scoring -------------------------------------------------------------------------------------------
    def _gpu_table(self, gpus: tuple[int, ...]) -> list[int]:
        """Per workload GPU shape: the fragment it leaves on these GPUs, or -1 when it does not fit them."""
        table = self._gpu_memo.get(gpus)
        if table is None:
            table = []
            for count, milli in self._shapes:
                if count == 0:
                    table.append(0)
                elif sum(1 for free in gpus if free >= milli) >= count:
                    table.append(sum(free for free in gpus if free < milli))
                else:
                    table.append(-1)
            self._gpu_memo[gpus] = table
        return table

    def _weights(self, model: str, cpu: int, memory: int) -> tuple[tuple[tuple[int, float], ...], float]:
        """For a node of ``model`` with this much CPU and memory free: the workload's weight per GPU shape among
        the types that could run there, and the weight of those that cannot (CPU, memory or model). Many
        states share these, so F costs one pass over the few GPU shapes instead of over every task type."""
        key = (model, cpu, memory)
        found = self._weight_memo.get(key)
        if found is None:
            per_shape = [0.0] * len(self._shapes)
            unfit = 0.0
            for w, cpu_m, memory_mb, models, shape in self._types:
                if cpu_m > cpu or memory_mb > memory or (models and model not in models):
                    unfit += w
                else:
                    per_shape[shape] += w
            found = self._weight_memo[key] = (tuple((i, w) for i, w in enumerate(per_shape) if w), unfit)
        return found

    def frag(self, sig: Signature) -> float:
        """Expected fragment of a node in state ``sig`` over the workload (FGD's F), memoised per state."""
        sid = self._intern(sig)
        value = self._frag.get(sid)
        if value is None:
            model, _tag, cpu, memory, gpus = sig
            total = sum(gpus)
            value = 0.0
            if total:
                table = self._gpu_table(gpus)
                shapes, unfit = self._weights(model, cpu, memory)
                value = unfit * total
                for shape, w in shapes:
                    part = table[shape]
                    value += w * (total if part < 0 else part)
            self._frag[sid] = value
        return value

    def _score(self, sid: int, did: int, demand: Demand) -> tuple | None:
        """The best score of ``demand`` on a node in state ``sid`` (lower is better) and the state it
        leaves, or None when it does not fit. Memoised: nodes in one state share it for the whole run."""
        key = (sid, did)
        if key in self._best:
            return self._best[key]
        sig = self._sigs[sid]
        best = None
        if fits(sig, demand):
            before = self.frag(sig) if self.policy in (POLICY_FGD, POLICY_PORTAL) else 0.0
            for nxt in after(sig, demand):
                if self.policy == POLICY_FGD:
                    # Rounded so that float noise in F does not decide ties; ties go to ``rank`` (the name).
                    score = (round(self.frag(nxt) - before, 6),)
                elif self.policy == POLICY_PORTAL:
                    # Fragmentation growth, plus a small pull towards the node left with the least free GPU.
                    packing = PACKING_WHOLE if demand.gpus and demand.milli == WHOLE else PACKING_SHARED
                    score = (round(self.frag(nxt) - before + packing * sum(nxt[4]), 6), nxt[2])
                elif self.policy == POLICY_BESTFIT:
                    # Least free left, GPU first then CPU (the paper's baseline weighs them; GPU dominates).
                    score = (sum(nxt[4]), nxt[2])
                else:
                    score = (0,)
                if best is None or score < best[0]:
                    best = (score, nxt)
        self._best[key] = best
        return best

    def _candidates(self, demand: Demand) -> list[dict[int, None]]:
        """The index buckets whose states may hold ``demand``, most promising first."""
        if demand.gpus == 0:
            if self.policy == POLICY_RANDOM:
                return [self._full, *self._by_partial.values(), *self._by_whole.values()]
            # A node with no GPU free loses nothing to a CPU-only task: look there first, elsewhere if none.
            return [self._full]
        out = [bucket for whole, bucket in self._by_whole.items() if whole >= demand.gpus]
        if demand.milli < WHOLE:
            out += [bucket for best, bucket in self._by_partial.items() if best >= demand.milli]
        return out

    def choose(self, demand: Demand, allow: Callable[[Hashable], bool] | None = None) -> Choice | None:
        """Where ``demand`` goes: the best-scored state among nodes whose tag ``allow`` accepts, then the
        ``rank`` of the state's first node. None when nothing fits."""
        did = self._demand_ids.setdefault(demand, len(self._demand_ids))
        found = self._choose(demand, did, allow, self._candidates(demand))
        if found is None and demand.gpus == 0 and self.policy != POLICY_RANDOM:
            found = self._choose(demand, did, allow, [*self._by_partial.values(), *self._by_whole.values()])
        return found

    def _choose(self, demand, did, allow, buckets) -> Choice | None:
        cpu_m, memory_mb, models = demand.cpu_m, demand.memory_mb, demand.models
        sigs, score_of, memo = self._sigs, self._score, self._best
        best = best_score = best_rank = None
        candidates = []
        if allow is not None and allow is not self._allow:
            # What ``allow`` said of each state, kept while the same filter asks again (a gang's ranks, each
            # domain's tries): a state's tag never changes, so neither does the answer.
            self._allow, self._allowed = allow, {}
        allowed = self._allowed
        for bucket in buckets:
            for sid in bucket:
                model, tag, cpu, memory, _gpus = sigs[sid]
                if cpu < cpu_m or memory < memory_mb or (models and model not in models):
                    continue
                if allow is not None:
                    ok = allowed.get(sid)
                    if ok is None:
                        ok = allowed[sid] = allow(tag)
                    if not ok:
                        continue
                scored = memo.get((sid, did), memo)
                if scored is memo:
                    scored = score_of(sid, did, demand)
                if scored is None:
                    continue
                if self.policy == POLICY_RANDOM:
                    candidates.append((sid, scored))
                    continue
                score = scored[0]
                if best_score is not None and score > best_score:
                    continue
                rank = self.rank(next(iter(self.groups[sid].values())))
                if best_score is None or score < best_score or rank < best_rank:
                    best, best_score, best_rank = (sid, scored[1]), score, rank
        if self.policy == POLICY_RANDOM:
            if not candidates:
                return None
            # Uniform over nodes, not states: weigh each state by how many nodes are in it.
            sizes = [len(self.groups[sid]) for sid, _ in candidates]
            sid, (score, nxt) = self.rng.choices(candidates, weights=sizes)[0]
            node = self.rng.choice(list(self.groups[sid].values()))
            return Choice(node.name, _indices(node, nxt, demand), score)
        if best is None:
            return None
        sid, nxt = best
        node = next(iter(self.groups[sid].values()))
        return Choice(node.name, _indices(node, nxt, demand), best_score)

    def take(self, choice: Choice, demand: Demand) -> Node:
        node = self.nodes[choice.node]
        self.remove(node.name)
        for i in choice.gpu_indices:
            node.gpu_free[i] -= demand.milli
        node.cpu_free_m -= demand.cpu_m
        node.memory_free_mb -= demand.memory_mb
        self.add(node)
        return node

    def place(self, demand: Demand, allow: Callable[[Hashable], bool] | None = None) -> Choice | None:
        choice = self.choose(demand, allow)
        if choice is not None:
            self.take(choice, demand)
        return choice


def _indices(node: Node, nxt: Signature, demand: Demand) -> tuple[int, ...]:
    """Device indices that turn ``node`` into state ``nxt``: the lowest-numbered GPUs that are whole for a
    whole-GPU demand; for a share, the lowest-numbered GPU whose free milli is the one the chosen state
    took from."""
    if demand.gpus == 0:
        return ()
    if demand.milli == WHOLE:
        return tuple([i for i, free in enumerate(node.gpu_free) if free == WHOLE][: demand.gpus])
    before = sorted(node.gpu_free)
    remaining = list(nxt[4])
    for value in before:  # the value in ``before`` that is not in ``nxt`` is the GPU the share went to
        if value in remaining:
            remaining.remove(value)
        else:
            return (node.gpu_free.index(value),)
    raise AssertionError("the chosen state does not follow from the node's")  # pragma: no cover
