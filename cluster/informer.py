"""List-then-watch caches of one kind of Kubernetes object, the way client-go's reflector and informer keep them.

An ``Informer`` lists its objects (paged), remembers the list's resourceVersion, and watches from it with
``allowWatchBookmarks=true``, applying ADDED / MODIFIED / DELETED to a ``Store`` keyed by namespace/name and moving
its resourceVersion on every event and every BOOKMARK. The server ends each watch after ``timeoutSeconds``; the
next one resumes from the last resourceVersion. A 410 Gone (as the HTTP status or as an ERROR event with code 410)
means the server no longer has the history to resume from: the informer lists again and replaces the store, so what
was deleted during the gap is gone from it too. Other failures back off (capped exponential) and resume from the
last resourceVersion.

The watch runs in one daemon thread per informer, started by the first read in the process that reads (so in a
Celery prefork child, after the fork); the first list runs in the reader's thread, so its errors reach the caller as
they did before the cache. ``stop()`` ends the thread (tests must). docs/design.md ("The watch cache") gives the
reasons and the stale-cache rules: a reader asks ``fresh()`` first, which lists again in its own thread when the
watch has been down too long or has not reached a resourceVersion the caller needs (a write of this process).

Objects in the store are never changed in place: an event replaces the whole object. ``items()`` hands out the
stored objects themselves, not copies (copying 20,000 pods every pass costs more than the pass); callers must treat
them as read-only, as the reconcile passes do.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from .base import KubeObject
from .metrics import WATCH_CACHE_RELISTS, WATCH_RESTARTS

logger = logging.getLogger(__name__)

#: Watches last a random time in this range (seconds), as client-go's reflector spreads them (5-10 minutes there).
WATCH_TIMEOUT_RANGE = (240, 480)
#: How long the watch may be down (failing to reconnect) before a reader stops trusting the store and lists itself.
STALE_AFTER_SECONDS = 30.0
#: How long a reader waits for the watch to reach a resourceVersion it needs before listing itself.
CATCH_UP_SECONDS = 5.0
#: A cache nobody has read for this long stops its watch and lets its objects go at the end of its current watch (a
#: web process that once previewed a carve need not hold every pod for ever); the next read lists again.
IDLE_AFTER_SECONDS = 900.0
#: Tombstones of the portal's own deletes are forgotten after this long (their DELETED event normally ends them).
TOMBSTONE_SECONDS = 600.0


class Expired(Exception):
    """The server no longer has the resourceVersion a watch was to resume from (410 Gone): list again."""


def rv_number(resource_version: str | None) -> int | None:
    """A resourceVersion as a number, or None. The API calls them opaque; every kube-apiserver backed by etcd sends
    the etcd revision, and this is only used to order versions of one object or of one watch, with a fall-back when
    it is not a number."""
    try:
        return int(resource_version or "")
    except ValueError:
        return None


def _key(obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _newer(have: KubeObject, incoming: KubeObject) -> bool:
    """Whether the stored object is strictly newer than the incoming one (same object, comparable versions)."""
    have_meta, in_meta = have.get("metadata") or {}, incoming.get("metadata") or {}
    if have_meta.get("uid") != in_meta.get("uid"):
        return False
    have_rv, in_rv = rv_number(have_meta.get("resourceVersion")), rv_number(in_meta.get("resourceVersion"))
    return have_rv is not None and in_rv is not None and have_rv > in_rv


def _older(resource_version: str, than: str) -> bool:
    """Whether a watch's resourceVersion would move it backwards (never done; an unreadable one moves it)."""
    new, old = rv_number(resource_version), rv_number(than)
    return new is not None and old is not None and new < old


# The store ---------------------------------------------------------------------------------------------------------
class Store:
    """Objects by namespace/name, and the tombstones of the portal's own deletes (not thread-safe: the informer
    holds its lock around every call)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.objects: dict[str, KubeObject] = {}
        #: key → (uid, when): deleted by this process; older events of that object must not bring it back.
        self.tombstones: dict[str, tuple[str, float]] = {}
        self.clock = clock

    def replace(self, items: Iterable[KubeObject]) -> None:
        """A relist: exactly these objects, whatever was there (so what vanished in a gap goes)."""
        self.objects = {_key(obj): obj for obj in items}
        self.tombstones.clear()

    def upsert(self, obj: KubeObject) -> bool:
        key = _key(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        tomb = self.tombstones.get(key)
        if tomb is not None:
            if tomb[0] == uid:
                return False  # an older event of an object this process deleted
            del self.tombstones[key]  # a new object of that name
        have = self.objects.get(key)
        if have is not None and _newer(have, obj):
            return False
        self.objects[key] = obj
        return True

    def delete(self, obj: KubeObject, *, tombstone: bool = False) -> bool:
        key = _key(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        if tombstone:
            self.tombstones[key] = (uid or "", self.clock())
        elif self.tombstones.get(key, ("",))[0] == uid:
            del self.tombstones[key]
        have = self.objects.get(key)
        if have is None or (uid and (have.get("metadata") or {}).get("uid") not in (uid, None)):
            return False  # gone already, or a newer object of the same name
        del self.objects[key]
        return True

    def forget_old_tombstones(self) -> None:
        cutoff = self.clock() - TOMBSTONE_SECONDS
        for key in [k for k, (_, when) in self.tombstones.items() if when < cutoff]:
            del self.tombstones[key]


# The informer ------------------------------------------------------------------------------------------------------
#: Lists every object: (items, the list's resourceVersion). Raises ClusterError.
ListFunc = Callable[[], tuple[list[KubeObject], str]]


class WatchStream(Protocol):
    """An open watch: iterating yields raw events ({"type", "object"}); ``close()`` may be called from another
    thread to end a blocked read (``Informer.stop``)."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


#: Opens a watch from a resourceVersion for a number of seconds (returning once the server accepted it). Raises
#: Expired for 410 Gone and anything else for a failure to back off from.
WatchFunc = Callable[[str, int], WatchStream]


class Informer:
    """One kind of object (``resource``: "nodes", "pods", …) kept by list-then-watch; see the module docstring."""

    def __init__(
        self,
        resource: str,
        list_func: ListFunc,
        watch_func: WatchFunc,
        *,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_RANGE,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        stale_after: float = STALE_AFTER_SECONDS,
        idle_after: float = IDLE_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = resource
        self.list_func, self.watch_func = list_func, watch_func
        self.watch_timeout = watch_timeout
        self.backoff_seconds, self.max_backoff_seconds = backoff_seconds, max_backoff_seconds
        self.stale_after = stale_after
        self.idle_after = idle_after
        self.clock = clock
        self.store = Store(clock)
        self.resource_version = ""
        self.synced = False
        #: Counts for tests and logs: lists made, watches begun, bookmarks and events applied.
        self.lists = self.watches = self.bookmarks = self.events = 0
        self.last_bookmark = ""  # the resourceVersion the last BOOKMARK carried
        self._generation = 0  # bumped by every list, so a watch begun before it stops applying events
        self._lock = threading.Lock()
        self._advanced = threading.Condition(self._lock)
        self._list_lock = threading.Lock()  # one list at a time (reader and watch thread)
        self._start_lock = threading.Lock()  # one thread, however many readers start it at once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._healthy_at = clock()  # when the watch was last known to be up
        self._read_at = clock()  # when a reader last asked
        self._watching = False
        self._stream: WatchStream | None = None
        self._resume_from: str | None = None  # set by tests: the next watch starts here

    def __repr__(self) -> str:
        return f"<Informer {self.resource} rv={self.resource_version} synced={self.synced}>"

    # Reading -----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """List (in this thread: errors reach the caller) and start the watch thread, once."""
        with self._start_lock:
            if self._thread is not None:
                return
            with self._lock:
                self._read_at = self.clock()  # a reader is here: not idle
            if not self.synced:
                self.relist("initial")
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource}", daemon=True)
            self._thread.start()

    def fresh(self, at_least: str | None = None, wait: float = CATCH_UP_SECONDS) -> None:
        """Make the store fit to answer from: started; the watch not down for longer than ``stale_after``; and at
        ``at_least`` (the newest resourceVersion the portal wrote) or past it, waiting up to ``wait`` seconds for the
        watch. Otherwise list again, here."""
        self.start()
        needed = rv_number(at_least)
        with self._lock:
            self._read_at = self.clock()
            # Not synced: the watch thread's list after a 410 failed, so the store is of unknown age.
            down_too_long = not self.synced or (
                not self._watching and self.clock() - self._healthy_at > self.stale_after
            )
            if needed is not None and not down_too_long:
                deadline = self.clock() + wait
                while (rv_number(self.resource_version) or 0) < needed and self.clock() < deadline:
                    self._advanced.wait(timeout=max(0.01, deadline - self.clock()))
            behind = needed is not None and (rv_number(self.resource_version) or 0) < needed
        if down_too_long:
            self.relist("stale")
        elif behind:
            self.relist("behind")

    def items(self, predicate: Callable[[KubeObject], bool] | None = None) -> list[KubeObject]:
        """The stored objects (read-only: shared, never copied), those ``predicate`` accepts."""
        with self._lock:
            values = list(self.store.objects.values())
        return values if predicate is None else [obj for obj in values if predicate(obj)]

    # Writes of this process (read-your-writes) --------------------------------------------------------------------
    def wrote(self, obj: KubeObject) -> None:
        """The answer of a create, update or patch made by this process: visible to the next read at once."""
        with self._lock:
            if self.synced:
                self.store.upsert(obj)

    def deleted(self, namespace: str | None, name: str) -> None:
        """This process deleted the object: gone from the next read, and older events of it do not bring it back."""
        with self._lock:
            if not self.synced:
                return
            key = f"{namespace}/{name}" if namespace else name
            have = self.store.objects.get(key)
            if have is not None:
                self.store.delete(have, tombstone=True)

    # Listing and watching -----------------------------------------------------------------------------------------
    def relist(self, reason: str) -> None:
        """List everything and replace the store (counted by reason: initial, expired, stale, behind)."""
        with self._list_lock:
            items, resource_version = self.list_func()
            with self._lock:
                self.store.replace(items)
                self.resource_version = resource_version
                self.synced = True
                self.lists += 1
                self._generation += 1
                self._healthy_at = self.clock()
                self._advanced.notify_all()
        WATCH_CACHE_RELISTS.labels(resource=self.resource, reason=reason).inc()
        logger.info("%s: listed %d (%s), resourceVersion %s", self.resource, len(items), reason, resource_version)

    def stop(self, timeout: float = 10.0) -> None:
        """End the watch thread (at the latest when its current watch returns) and wait for it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()  # unblocks the thread's read
        if thread is not None:
            thread.join(timeout)

    def restart_watch_from(self, resource_version: str) -> None:
        """For tests: the next watch resumes from ``resource_version`` (an old one provokes 410 Gone)."""
        with self._lock:
            self._resume_from = resource_version

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            if self._went_idle():
                return
            try:
                self._watch_once()
                failures = 0
                WATCH_RESTARTS.labels(resource=self.resource, reason="ended").inc()
            except Expired:
                WATCH_RESTARTS.labels(resource=self.resource, reason="expired").inc()
                try:
                    self.relist("expired")
                    continue
                except Exception as error:  # noqa: BLE001 - any failure to list: back off and try again
                    failures += 1
                    logger.warning("%s: listing after 410 Gone failed: %s", self.resource, error)
                    with self._lock:
                        self.synced = False  # the store is of an unknown age: the next reader lists itself
            except Exception as error:  # noqa: BLE001 - the watch is down: back off, resume from the last version
                if self._stop.is_set():
                    break  # stop() closed the stream under the read
                failures += 1
                WATCH_RESTARTS.labels(resource=self.resource, reason="error").inc()
                logger.warning("%s: watch failed (%d in a row): %s", self.resource, failures, error)
            if failures:
                delay = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (failures - 1))
                self._stop.wait(delay * random.uniform(0.8, 1.2))  # noqa: S311 - jitter, not secrecy

    def _went_idle(self) -> bool:
        """Unread for ``idle_after``: stop, and drop the objects (the next reader lists and starts again)."""
        with self._start_lock, self._lock:
            if self.clock() - self._read_at <= self.idle_after:
                return False
            self.store.replace([])
            self.synced, self.resource_version, self._thread = False, "", None
        logger.info("%s: not read for %.0f s; watch stopped and objects dropped", self.resource, self.idle_after)
        return True

    def _watch_once(self) -> None:
        with self._lock:
            if not self.synced:
                raise Expired("not synced")
            if self._resume_from is not None:
                self.resource_version, self._resume_from = self._resume_from, None
            resource_version, generation = self.resource_version, self._generation
            self.watches += 1
        timeout = random.randint(*self.watch_timeout)  # noqa: S311 - spreading, not secrecy
        stream = self.watch_func(resource_version, timeout)
        with self._lock:
            self._stream, self._watching, self._healthy_at = stream, True, self.clock()
        began, delivered = self.clock(), 0
        try:
            if self._stop.is_set():
                return
            for event in stream:
                delivered += 1
                if self._stop.is_set() or not self._apply(event, generation):
                    return
            if not delivered and self.clock() - began < 1.0 and not self._stop.is_set():
                # As client-go's reflector: a watch closed at once with nothing in it is a failure, backed off from,
                # not a reason to reconnect in a tight loop.
                raise ConnectionError("the watch ended within a second without an event")
        finally:
            stream.close()
            with self._lock:
                self._stream, self._watching, self._healthy_at = None, False, self.clock()

    def _apply(self, event: dict[str, Any], generation: int) -> bool:
        """Apply one watch event; False when the store was relisted meanwhile (this watch is out of date)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Expired(obj.get("message") or "410 Gone")
            raise RuntimeError(f"watch error {code}: {obj.get('message')}")
        resource_version = (obj.get("metadata") or {}).get("resourceVersion") or ""
        with self._lock:
            if generation != self._generation:
                return False
            if kind in ("ADDED", "MODIFIED"):
                self.store.upsert(obj)
            elif kind == "DELETED":
                self.store.delete(obj)
            if kind == "BOOKMARK":
                self.bookmarks += 1
                self.last_bookmark = resource_version
            else:
                self.events += 1
            if resource_version and not _older(resource_version, self.resource_version):
                self.resource_version = resource_version
            if self.events % 1000 == 0:
                self.store.forget_old_tombstones()
            self._advanced.notify_all()
        return True
