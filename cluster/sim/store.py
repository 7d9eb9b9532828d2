"""The persisted object store: what etcd and the API server's storage layer are for the simulated cluster.

State is one JSON document: the API objects (``nodes``, ``namespaces``, ``jobs``, ``pods``, ``configmaps``,
``events``, ``pvcs``, ``services``), a per-object record each component keeps beside the object it owns
(``hw`` per node, ``jobsim`` per Job, ``podsim`` per Pod, the way a controller keeps annotations or status), the
cluster-wide ``resourceVersion`` counter ``rv`` and the node watch log (``tombstones``). With a ``state_path`` every
transaction is a read-modify-write under an exclusive ``fcntl`` lock on ``<state_path>.lock`` and is written
atomically (temporary file + ``os.replace``), so the web process, Celery workers and beat share one cluster.

Not a component: it never decides anything. It gives the components their transaction (``Txn``: the state dict
and the time) and the generic object helpers (metadata, resourceVersion bumps, deletes).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import marshal
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vocab.names import (
    NAMESPACE_NAME_LABEL,
)

from ..base import ClusterError, KubeObject, NotFound, WatchEvent
from .constants import STATE_FORMAT


class Txn:
    """One read-modify-write of the whole state; ``dirty`` decides whether it is written back.

    ``changes`` counts the writes components made (resourceVersion bumps, deletions): the clock runs the
    components again while a round of them still changed something. ``memo`` is what a component remembers
    while the clock settles one moment (never stored; the clock empties it before each settle), like the
    in-memory queues of a real controller.
    """

    def __init__(self, state: dict[str, Any], now: float) -> None:
        self.state = state
        self.now = now
        self.dirty = False
        self.changes = 0
        self.memo: dict[str, Any] = {}


def clone(obj: Any) -> Any:
    """A deep copy of JSON data. marshal (format 2: no shared references, so the copy shares no part with itself)
    copies plain dicts, lists and scalars several times faster than a json round trip, which is itself several
    times faster than copy.deepcopy; anything marshal refuses (a dict subclass) takes the json round trip."""
    try:
        return marshal.loads(marshal.dumps(obj, 2))  # noqa: S302  (bytes this line made, never input)
    except ValueError:
        return json.loads(json.dumps(obj))


def timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def stable_hex(*parts: Any, length: int = 64) -> str:
    return hashlib.sha256("\0".join(str(part) for part in parts).encode()).hexdigest()[:length]


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-portal-sim/{node}/{index}"))


def mark_changed(tx: Txn) -> None:
    """A write that bumps no resourceVersion (a component's own record) but that other components may react to."""
    tx.dirty = True
    tx.changes += 1


def bump_rv(tx: Txn) -> int:
    tx.state["rv"] += 1
    tx.dirty = True
    tx.changes += 1
    return tx.state["rv"]


def touch(tx: Txn, obj: KubeObject) -> None:
    obj["metadata"]["resourceVersion"] = str(bump_rv(tx))


def new_metadata(tx: Txn, name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata.update(
        uid=str(uuid.uuid4()),
        resourceVersion=str(bump_rv(tx)),
        creationTimestamp=timestamp(tx.now),
    )
    return metadata


def get_node(tx: Txn, name: str) -> KubeObject:
    node = tx.state["nodes"].get(name)
    if node is None:
        raise NotFound(f'nodes "{name}" not found')
    return node


def node_events_since(tx: Txn, since: int | None) -> list[WatchEvent]:
    found: list[tuple[int, WatchEvent]] = []
    for name, node in tx.state["nodes"].items():
        rv = int(node["metadata"]["resourceVersion"])
        if since is None or rv > since:
            created = tx.state["hw"].get(name, {}).get("created_rv", 0)
            kind = "ADDED" if since is None or created > since else "MODIFIED"
            found.append((rv, WatchEvent(type=kind, object=copy.deepcopy(node))))
    if since is not None:
        for tombstone in tx.state["tombstones"]:
            if tombstone["rv"] > since and tombstone["object"]["metadata"]["name"] not in tx.state["nodes"]:
                found.append((tombstone["rv"], WatchEvent(type="DELETED", object=copy.deepcopy(tombstone["object"]))))
    found.sort(key=lambda item: item[0])
    return [event for _, event in found]


def new_namespace(tx: Txn, name: str, labels: dict[str, str] | None) -> KubeObject:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            **new_metadata(tx, name),
            "labels": {NAMESPACE_NAME_LABEL: name, **(labels or {})},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    tx.state["namespaces"][name] = namespace
    return namespace


def new_config_map(
    tx: Txn, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None
) -> KubeObject:
    metadata = new_metadata(tx, name, namespace)
    if labels:
        metadata["labels"] = dict(labels)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
    tx.state["configmaps"][object_key(namespace, name)] = config_map
    return config_map


def delete_pod(tx: Txn, key: str) -> None:
    tx.state["pods"].pop(key, None)
    tx.state["podsim"].pop(key, None)
    mark_changed(tx)


def owner_uid(pod: KubeObject) -> str | None:
    for owner in pod["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return owner.get("uid")
    return None


class Store:
    """The state document and its transactions; ``build`` makes a fresh state, ``advance`` brings one up to now."""

    def __init__(
        self,
        path: Path | None,
        clock: Callable[[], float],
        build: Callable[[float, dict[str, Any] | None], dict[str, Any]],
        advance: Callable[[Txn], None],
        quiet_until: Callable[[Txn], float] | None = None,
    ) -> None:
        self._path = path
        self._lock_path = path.with_name(path.name + ".lock") if path else None
        self._clock = clock
        self._build = build
        self._advance = advance
        self._quiet_until = quiet_until
        # (state, since, until): the state a call found settled at ``since`` with nothing due before ``until``. A
        # read-only call on that same state object (unchanged: every write makes the call dirty and clears this)
        # at a moment in [since, until) skips the clock's advance, which would change nothing and costs a pass
        # over every pod. The state object is the in-memory one, or the one loaded from an unchanged file.
        self._quiet: tuple[dict[str, Any], float, float] | None = None
        self._thread_lock = threading.RLock()
        self._memory_state: dict[str, Any] | None = None
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def transaction(self, fresh: bool = False) -> Iterator[Txn]:
        with self._thread_lock:
            if self._path is None:
                if self._memory_state is None or fresh:
                    stored = (self._memory_state or {}).get("scenario")
                    self._memory_state = self._build(self._clock(), stored)
                tx = Txn(self._memory_state, self._clock())
                advanced, moved = self._bring_up(tx)
                try:
                    yield tx
                except BaseException:
                    self._quiet = None
                    raise
                self._after(tx, advanced)
                tx.dirty = tx.dirty or moved
                return
            assert self._lock_path is not None
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                now = self._clock()
                state = self._load()
                if fresh:
                    state = self._build(now, (state or {}).get("scenario"))
                tx = Txn(state if state is not None else self._build(now), now)
                tx.dirty = fresh or state is None
                moved = False
                try:
                    advanced, moved = self._bring_up(tx)
                    yield tx
                except ClusterError:
                    # The call was refused before it changed anything; what the clock moved on is still kept.
                    self._quiet = None
                    if tx.dirty or moved:
                        self._save(tx.state)
                    raise
                except BaseException:
                    self._cache = None  # the in-memory copy may be half-modified
                    self._quiet = None
                    raise
                if tx.dirty or moved:
                    self._save(tx.state)
                self._after(tx, advanced)
                tx.dirty = tx.dirty or moved
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _bring_up(self, tx: Txn) -> tuple[bool, bool]:
        """Bring the state up to the call's moment (the clock's advance) unless it is known to be quiet then;
        whether it ran, and whether it (or a fresh state) changed something to store. ``tx.dirty`` is then
        cleared, so that it says only what the call itself wrote."""
        quiet = self._quiet
        if quiet is not None and quiet[0] is tx.state and quiet[1] <= tx.now < quiet[2] and not tx.dirty:
            return False, False
        self._quiet = None
        self._advance(tx)
        moved, tx.dirty = tx.dirty, False
        return True, moved

    def _after(self, tx: Txn, advanced: bool) -> None:
        """After a call: a write forgets the quiet window; a call that advanced the clock and wrote nothing itself
        measures it (what the advance changed, pods started say, is settled at ``tx.now``: the next read at the same
        moment would pass over every pod for nothing)."""
        if tx.dirty:
            self._quiet = None
        elif advanced and self._quiet_until is not None:
            self._quiet = (tx.state, tx.now, self._quiet_until(tx))

    def _load(self) -> dict[str, Any] | None:
        assert self._path is not None
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return None
        signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._cache is not None and self._cache[0] == signature:
            return self._cache[1]
        try:
            with open(self._path, encoding="utf-8") as handle:
                state = json.load(handle)
        except json.JSONDecodeError as error:
            raise ClusterError(
                f"The simulated cluster state {self._path} is not valid JSON ({error}). Delete the file to rebuild "
                "the cluster from its scenario."
            ) from None
        if state.get("format") != STATE_FORMAT:
            return None  # written by an incompatible version: rebuild from the scenario
        self._cache = (signature, state)
        return state

    def _save(self, state: dict[str, Any]) -> None:
        assert self._path is not None
        fd, temp = tempfile.mkstemp(prefix=self._path.name + ".", suffix=".tmp", dir=self._path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                # json.dumps (C encoder in one go) is far faster than json.dump's chunked pure-Python path.
                handle.write(json.dumps(state, separators=(",", ":")))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self._path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            self._cache = None
            raise
        stat = os.stat(self._path)
        self._cache = ((stat.st_ino, stat.st_mtime_ns, stat.st_size), state)
