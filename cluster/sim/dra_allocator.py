"""Structured allocation of devices to ResourceClaims on one node, as kube-scheduler's DRA plugin does it.

Not a component: the scheduler calls it for a pod's claims on each node it considers. Plain data in, plain data
out (after k8s.io/dynamic-resource-allocation/structured, the allocator the scheduler's DynamicResources plugin
runs):

* The node's inventory is every device in the ResourceSlices published for it (``spec.nodeName``), with the
  shared counter sets of its pools (partitionable devices: a slice of ``sharedCounters`` beside the slices of
  devices that ``consumesCounters`` from them).
* A device is free when no allocated claim holds it and, for a device that consumes counters, every counter it
  consumes still has that much left after what allocated devices of the same pool consume (so once a dynamic
  MIG 7g partition holds all of a GPU's memory slices, no other partition of that GPU and not the GPU itself fits).
* A device matches a request when it satisfies its DeviceClass's selectors and the request's selectors (CEL,
  cluster.dra_cel) and every NoSchedule/NoExecute taint of the device is tolerated by the request.
* Requests are satisfied in order: ``exactly`` (``allocationMode`` ExactCount with ``count``, default 1, or All:
  every matching device of the node, none of them taken, at least one) or ``firstAvailable``, whose subrequests
  are tried in order. Claim ``constraints`` with ``matchAttribute`` make the devices of the requests they name
  agree on that attribute. The search backtracks over devices and alternatives (bounded), like the real one.

The result per claim is ``status.allocation``: ``devices.results`` (request, driver, pool, device), the
configuration (the class's, then the claim's) and the node selector of a node-local allocation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from vocab.dra import ALLOCATION_MODE_ALL, CONFIG_SOURCE_CLAIM, CONFIG_SOURCE_CLASS
from vocab.names import NO_EXECUTE, NO_SCHEDULE
from vocab.quantity import parse_quantity

from ..base import KubeObject
from ..dra_cel import CelError, device_variable, selector_matches
from .selectors import tolerated

#: The reason kube-scheduler's DynamicResources filter gives a node where the claims do not fit.
CANNOT_ALLOCATE = "cannot allocate all claims"
#: Device choices the search tries per node at most before it gives up on the node (a bound, as the real
#: allocator's time limit).
MAX_STEPS = 20_000

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
CounterKey = tuple[str, str, str, str]  # (driver, pool, counter set, counter)


class AllocationError(Exception):
    """A claim that no node can satisfy as written (a class that does not exist, a selector that fails)."""


@dataclass
class Inventory:
    """The devices published for a node, in slice order, and the shared counters of their pools."""

    devices: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (driver, pool, device)
    counters: dict[CounterKey, Fraction] = field(default_factory=dict)


@dataclass
class InUse:
    """What allocated claims hold: devices, and counters consumed."""

    devices: set[DeviceKey] = field(default_factory=set)
    counters: Counter[CounterKey] = field(default_factory=Counter)


def inventories(slices: dict[str, KubeObject]) -> dict[str, Inventory]:
    """Per node name, its inventory; counter sets are per pool, whichever slice of the pool carries them."""
    by_node: dict[str, Inventory] = {}
    pool_counters: dict[tuple[str, str], dict[tuple[str, str], Fraction]] = {}
    for key in sorted(slices):
        spec = slices[key]["spec"]
        driver, pool = spec["driver"], spec["pool"]["name"]
        for counter_set in spec.get("sharedCounters") or []:
            for counter, value in (counter_set.get("counters") or {}).items():
                pool_counters.setdefault((driver, pool), {})[(counter_set["name"], counter)] = parse_quantity(
                    str(value["value"])
                )
        node = spec.get("nodeName")
        if node:
            inventory = by_node.setdefault(node, Inventory())
            inventory.devices.extend((driver, pool, device) for device in spec.get("devices") or [])
    for inventory in by_node.values():
        for driver, pool in {(d, p) for d, p, _ in inventory.devices}:
            for (counter_set, counter), value in (pool_counters.get((driver, pool)) or {}).items():
                inventory.counters[(driver, pool, counter_set, counter)] = value
    return by_node


def consumption(driver: str, pool: str, device: dict[str, Any]) -> Counter[CounterKey]:
    used: Counter[CounterKey] = Counter()
    for entry in device.get("consumesCounters") or []:
        for counter, value in (entry.get("counters") or {}).items():
            used[(driver, pool, entry["counterSet"], counter)] += parse_quantity(str(value["value"]))
    return used


def in_use(claims: dict[str, KubeObject], slices: dict[str, KubeObject]) -> InUse:
    """The devices allocated claims hold and the counters those devices consume."""
    published = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
        for s in slices.values()
        for d in s["spec"].get("devices") or []
    }
    used = InUse()
    for claim in claims.values():
        for result in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
            key = (result["driver"], result["pool"], result["device"])
            used.devices.add(key)
            if key in published:
                used.counters.update(consumption(*key[:2], published[key]))
    return used


def allocated_devices(allocation: dict[str, Any]) -> list[DeviceKey]:
    return [(r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []]


@dataclass
class _Request:
    claim: int  # index of the claim among the pod's claims
    name: str  # the request name, "main/sub" for a firstAvailable subrequest
    main: str
    spec: dict[str, Any]  # the ExactDeviceRequest or DeviceSubRequest
    candidates: list[int]  # indexes into the inventory's devices
    rank: int = 0  # the subrequest's position in its firstAvailable list


@dataclass
class Allocation:
    """The claims' ``status.allocation`` on one node, and how far down their prioritized lists it had to go (the
    sum of the chosen subrequests' positions: 0 when every first choice was had)."""

    allocations: list[dict[str, Any]]
    rank: int


class _Search:
    def __init__(self, inventory: Inventory, used: InUse, constraints: list[list[dict[str, Any]]]) -> None:
        self.inventory = inventory
        self.taken = set(used.devices)
        self.counters = Counter(used.counters)
        self.constraints = constraints
        self.steps = 0
        self.chosen: list[tuple[_Request, int]] = []

    def key(self, index: int) -> DeviceKey:
        driver, pool, device = self.inventory.devices[index]
        return driver, pool, device["name"]

    def fits(self, index: int) -> bool:
        driver, pool, device = self.inventory.devices[index]
        if (driver, pool, device["name"]) in self.taken:
            return False
        for counter, amount in consumption(driver, pool, device).items():
            if self.counters[counter] + amount > self.inventory.counters.get(counter, Fraction(0)):
                return False
        return True

    def agrees(self, request: _Request, index: int) -> bool:
        """The claim's matchAttribute constraints hold with this device added."""
        for constraint in self.constraints[request.claim]:
            names = constraint.get("requests") or []
            if names and request.main not in names and request.name not in names:
                continue
            attribute = constraint.get("matchAttribute")
            if not attribute:
                continue
            value = _attribute(self.inventory.devices[index], attribute)
            for other, other_index in self.chosen:
                if other.claim != request.claim:
                    continue
                if names and other.main not in names and other.name not in names:
                    continue
                if value is None or _attribute(self.inventory.devices[other_index], attribute) != value:
                    return False
            if value is None:
                return False
        return True

    def take(self, request: _Request, index: int) -> None:
        driver, pool, device = self.inventory.devices[index]
        self.taken.add((driver, pool, device["name"]))
        self.counters.update(consumption(driver, pool, device))
        self.chosen.append((request, index))

    def give_back(self) -> None:
        request, index = self.chosen.pop()
        driver, pool, device = self.inventory.devices[index]
        self.taken.discard((driver, pool, device["name"]))
        self.counters.subtract(consumption(driver, pool, device))

    def satisfy(self, requests: list[list[_Request]], position: int) -> bool:
        """Satisfy requests[position:], each a list of alternatives tried in order."""
        if position == len(requests):
            return True
        for alternative in requests[position]:
            mode = alternative.spec.get("allocationMode") or "ExactCount"
            if mode == ALLOCATION_MODE_ALL:
                indexes = alternative.candidates
                if indexes and all(self.fits(i) and self.agrees(alternative, i) for i in indexes):
                    for i in indexes:
                        self.take(alternative, i)
                    if self.satisfy(requests, position + 1):
                        return True
                    for _ in indexes:
                        self.give_back()
                continue
            count = int(alternative.spec.get("count") or 1)
            if self.pick(requests, position, alternative, count, 0):
                return True
        return False

    def pick(self, requests: list[list[_Request]], position: int, request: _Request, left: int, start: int) -> bool:
        if left == 0:
            return self.satisfy(requests, position + 1)
        for offset, index in enumerate(request.candidates[start:], start):
            self.steps += 1
            if self.steps > MAX_STEPS:
                return False
            if not self.fits(index) or not self.agrees(request, index):
                continue
            self.take(request, index)
            if self.pick(requests, position, request, left - 1, offset + 1):
                return True
            self.give_back()
        return False


def _attribute(entry: tuple[str, str, dict[str, Any]], qualified: str) -> Any:
    driver, _, device = entry
    domain, _, name = qualified.rpartition("/")
    attributes = device.get("attributes") or {}
    value = attributes.get(qualified) if domain != driver else attributes.get(name, attributes.get(qualified))
    return None if value is None else tuple(sorted(value.items()))


def _tolerated(spec: dict[str, Any], device: dict[str, Any]) -> bool:
    tolerations = spec.get("tolerations") or []
    return all(
        tolerated(tolerations, taint)
        for taint in device.get("taints") or []
        if taint.get("effect") in (NO_SCHEDULE, NO_EXECUTE)
    )


class _Matcher:
    """Selector verdicts per (expression, device), kept for one scheduling pass (CEL is the expensive part)."""

    def __init__(self) -> None:
        self.verdicts: dict[tuple[str, str, str, str], bool] = {}
        self.variables: dict[int, Any] = {}

    def matches(self, expressions: list[str], entry: tuple[str, str, dict[str, Any]]) -> bool:
        driver, pool, device = entry
        for expression in expressions:
            key = (expression, driver, pool, device["name"])
            verdict = self.verdicts.get(key)
            if verdict is None:
                variable = self.variables.get(id(device))
                if variable is None:
                    variable = self.variables[id(device)] = device_variable(driver, device)
                verdict = self.verdicts[key] = selector_matches(expression, variable)
            if not verdict:
                return False
        return True


def new_matcher() -> _Matcher:
    return _Matcher()


def _expressions(selectors: list[dict[str, Any]] | None) -> list[str]:
    return [str((selector.get("cel") or {}).get("expression") or "") for selector in selectors or []]


def allocate(
    claims: list[KubeObject],
    classes: dict[str, KubeObject],
    inventory: Inventory,
    used: InUse,
    node_name: str,
    matcher: _Matcher | None = None,
) -> Allocation | None:
    """``status.allocation`` for each claim, all on this node, or None when they do not fit together here.
    ``AllocationError`` when a claim cannot be allocated anywhere as written."""
    matcher = matcher or _Matcher()
    requests: list[list[_Request]] = []
    constraints: list[list[dict[str, Any]]] = []
    for claim_index, claim in enumerate(claims):
        devices_spec = (claim.get("spec") or {}).get("devices") or {}
        constraints.append(list(devices_spec.get("constraints") or []))
        name = f"{claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
        for request in devices_spec.get("requests") or []:
            if request.get("exactly") is not None:
                choices = [(request["name"], request["exactly"])]
            else:
                choices = [(f"{request['name']}/{sub['name']}", sub) for sub in request.get("firstAvailable") or []]
            alternatives = []
            for rank, (full_name, spec) in enumerate(choices):
                class_name = spec.get("deviceClassName")
                device_class = classes.get(class_name)
                if device_class is None:
                    raise AllocationError(
                        f'claim {name}: request {full_name}: device class "{class_name}" does not exist'
                    )
                class_selectors = _expressions((device_class.get("spec") or {}).get("selectors"))
                own_selectors = _expressions(spec.get("selectors"))
                candidates = []
                for index, entry in enumerate(inventory.devices):
                    try:
                        ok = matcher.matches(class_selectors, entry) and matcher.matches(own_selectors, entry)
                    except CelError as error:
                        raise AllocationError(f"claim {name}: request {full_name}: {error}") from None
                    if ok and _tolerated(spec, entry[2]):
                        candidates.append(index)
                alternatives.append(_Request(claim_index, full_name, request["name"], spec, candidates, rank))
            requests.append(alternatives)
    search = _Search(inventory, used, constraints)
    if not search.satisfy(requests, 0):
        return None
    allocations = []
    for claim_index, claim in enumerate(claims):
        results = [
            {"request": request.name, "driver": driver, "pool": pool, "device": device["name"]}
            for request, index in search.chosen
            if request.claim == claim_index
            for driver, pool, device in [inventory.devices[index]]
        ]
        config = []
        used_classes: dict[str, list[str]] = {}
        for request, _ in search.chosen:
            if request.claim == claim_index:
                names = used_classes.setdefault(request.spec["deviceClassName"], [])
                if request.name not in names:
                    names.append(request.name)
        for class_name, names in used_classes.items():
            for entry in (classes[class_name].get("spec") or {}).get("config") or []:
                config.append({"source": CONFIG_SOURCE_CLASS, "requests": names, **entry})
        for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            config.append({"source": CONFIG_SOURCE_CLAIM, **entry})
        devices: dict[str, Any] = {"results": results}
        if config:
            devices["config"] = config
        allocations.append(
            {
                "devices": devices,
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                    ]
                },
            }
        )
    chosen = {(id(request), request.rank) for request, _ in search.chosen}
    return Allocation(allocations, sum(rank for _, rank in chosen))
