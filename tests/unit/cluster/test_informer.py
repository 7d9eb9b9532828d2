"""The watch cache's store and informer loop (cluster/informer.py) over scripted list and watch answers: the
ordering rules, tombstones, 410 as an ERROR event, backoff and resume, staleness, and the label selector matcher
(checked against what each requirement means). No cluster, no Django."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.informer import Expired, Informer, Store
from cluster.label_selectors import label_matcher


def obj(name: str, rv: int, uid: str = "u1", namespace: str = "ns", **labels: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv), "labels": labels}
    return {"metadata": meta}


class ScriptedWatch:
    """Watch streams fed from a queue: put events, ``END`` to end the stream, an exception to raise it."""

    END = object()

    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()
        self.opened: list[str] = []
        self.fail_opens = 0

    def __call__(self, rv: str, timeout: int) -> ScriptedWatch.Stream:
        self.opened.append(rv)
        if self.fail_opens:
            self.fail_opens -= 1
            raise ConnectionError("refused")
        return self.Stream(self)

    class Stream:
        def __init__(self, watch: ScriptedWatch) -> None:
            self.watch, self.closed = watch, False

        def __iter__(self) -> Iterator[dict[str, Any]]:
            while not self.closed:
                item = self.watch.events.get()
                if item is ScriptedWatch.END or self.closed:
                    self.closed = True
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        def close(self) -> None:
            if not self.closed:
                self.closed = True
                self.watch.events.put(ScriptedWatch.END)


def wait_until(condition, timeout: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met")


@pytest.fixture
def scripted():
    watch = ScriptedWatch()
    listing = {"items": [obj("a", 5), obj("b", 6, uid="u2")], "rv": "10"}
    informers: list[Informer] = []

    def make(**options: Any) -> Informer:
        informer = Informer(
            "things", lambda: (list(listing["items"]), listing["rv"]), watch, backoff_seconds=0.01, **options
        )
        informers.append(informer)
        return informer

    yield watch, listing, make
    for informer in informers:
        informer.stop()


def names(informer: Informer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in informer.items())


def test_events_apply_in_order_and_move_the_resource_version(scripted) -> None:
    watch, _, make = scripted
    informer = make()
    informer.start()
    assert names(informer) == ["a", "b"] and informer.resource_version == "10"
    watch.events.put({"type": "ADDED", "object": obj("c", 11, uid="u3")})
    watch.events.put({"type": "MODIFIED", "object": obj("a", 12, x="y")})
    watch.events.put({"type": "DELETED", "object": obj("b", 13, uid="u2")})
    watch.events.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    wait_until(lambda: informer.resource_version == "20")
    assert names(informer) == ["a", "c"]
    assert informer.items()[0]["metadata"]["labels"] == {"x": "y"}
    assert (informer.events, informer.bookmarks, informer.lists) == (3, 1, 1)
    assert watch.opened == ["10"]


def test_a_watch_that_ends_resumes_from_the_last_version_and_failures_back_off(scripted) -> None:
    watch, _, make = scripted
    informer = make()
    informer.start()
    watch.events.put({"type": "ADDED", "object": obj("c", 11, uid="u3")})
    wait_until(lambda: informer.resource_version == "11")
    watch.fail_opens = 2
    watch.events.put(ScriptedWatch.END)
    wait_until(lambda: len(watch.opened) >= 4)
    assert watch.opened == ["10", "11", "11", "11"]
    assert informer.lists == 1


@pytest.mark.parametrize("how", ["error event", "http 410"])
def test_410_gone_relists_and_replaces_the_store(scripted, how: str) -> None:
    watch, listing, make = scripted
    informer = make()
    informer.start()
    listing["items"], listing["rv"] = [obj("b", 30, uid="u2"), obj("d", 31, uid="u4")], "31"
    if how == "error event":
        watch.events.put({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    else:
        watch.events.put(Expired("410"))
    wait_until(lambda: informer.lists == 2)
    assert names(informer) == ["b", "d"]  # "a" vanished during the gap: gone from the store too
    wait_until(lambda: watch.opened[-1] == "31")


def test_an_older_event_never_replaces_a_newer_object() -> None:
    store = Store()
    store.upsert(obj("a", 20, x="new"))
    assert store.upsert(obj("a", 15, x="old")) is False
    assert store.objects["ns/a"]["metadata"]["labels"] == {"x": "new"}
    # A new object of the same name (another uid) is another object, whatever its version.
    assert store.upsert(obj("a", 15, uid="u9", x="other")) is True
    # A DELETED of the old object does not delete the new one.
    assert store.delete(obj("a", 25)) is False and "ns/a" in store.objects


def test_own_writes_show_at_once_and_own_deletes_are_not_undone_by_older_events(scripted) -> None:
    watch, _, make = scripted
    informer = make()
    informer.start()
    informer.wrote(obj("mine", 40, uid="m1"))
    assert "mine" in names(informer)  # no event has come: read-your-writes
    informer.deleted("ns", "mine")
    assert "mine" not in names(informer)
    # The watch catches up: the ADDED and a MODIFIED of the deleted object must not bring it back; its DELETED
    # ends the tombstone, and a new object of that name is seen.
    for event in (("ADDED", 40), ("MODIFIED", 41), ("DELETED", 42)):
        watch.events.put({"type": event[0], "object": obj("mine", event[1], uid="m1")})
    wait_until(lambda: informer.resource_version == "42")
    assert "mine" not in names(informer) and informer.store.tombstones == {}
    watch.events.put({"type": "ADDED", "object": obj("mine", 43, uid="m2")})
    wait_until(lambda: "mine" in names(informer))


def test_a_read_waits_for_a_version_it_needs_and_lists_when_the_watch_does_not_reach_it(scripted) -> None:
    watch, listing, make = scripted
    informer = make()
    informer.start()
    threading.Timer(0.05, lambda: watch.events.put({"type": "ADDED", "object": obj("c", 11, uid="u3")})).start()
    informer.fresh(at_least="11", wait=5)
    assert "c" in names(informer) and informer.lists == 1
    listing["items"], listing["rv"] = [obj("z", 50, uid="u9")], "50"
    informer.fresh(at_least="50", wait=0.05)  # the watch has nothing to say: list
    assert names(informer) == ["z"] and informer.lists == 2


def test_a_watch_down_too_long_is_not_trusted(scripted) -> None:
    watch, listing, make = scripted
    now = [0.0]
    informer = make(stale_after=30, clock=lambda: now[0])
    informer.start()
    wait_until(lambda: informer._watching)
    watch.fail_opens = 10**6
    watch.events.put(ScriptedWatch.END)
    wait_until(lambda: len(watch.opened) > 2)
    informer.fresh()
    assert informer.lists == 1  # down, but not for long
    now[0] = 31.0
    informer.fresh()
    assert informer.lists == 2


def test_a_cache_nobody_reads_lets_its_objects_go_and_the_next_read_lists(scripted) -> None:
    watch, _, make = scripted
    now = [0.0]
    informer = make(idle_after=900, clock=lambda: now[0])
    informer.fresh()
    thread = informer._thread
    now[0] = 901.0
    watch.events.put(ScriptedWatch.END)  # the server ends the watch; the thread finds nobody has read since
    wait_until(lambda: not thread.is_alive())
    assert informer.items() == [] and not informer.synced
    informer.fresh()
    assert names(informer) == ["a", "b"] and informer.lists == 2 and informer._thread.is_alive()


def test_stop_ends_the_thread(scripted) -> None:
    _, _, make = scripted
    informer = make()
    informer.start()
    thread = informer._thread
    informer.stop()
    assert thread is not None and not thread.is_alive()


LABELS = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", "z"]), max_size=3)
KEYS, VALUES = st.sampled_from("abc"), st.sampled_from("xyz")
#: A requirement as the selector string spells it, with what it means written out independently of the parser.
REQUIREMENT = st.one_of(
    st.builds(lambda k, v: (f"{k}={v}", lambda labels: labels.get(k) == v), KEYS, VALUES),
    st.builds(lambda k, v: (f"{k}=={v}", lambda labels: labels.get(k) == v), KEYS, VALUES),
    st.builds(lambda k, v: (f"{k}!={v}", lambda labels: labels.get(k) != v), KEYS, VALUES),
    st.builds(lambda k: (k, lambda labels: k in labels), KEYS),
    st.builds(lambda k: (f"!{k}", lambda labels: k not in labels), KEYS),
    st.builds(
        lambda k, vs: (f"{k} in ({', '.join(vs)})", lambda labels: k in labels and labels[k] in vs),
        KEYS,
        st.lists(VALUES, min_size=1, max_size=3),
    ),
    st.builds(
        lambda k, vs: (f"{k} notin ({','.join(vs)})", lambda labels: labels.get(k) not in vs),
        KEYS,
        st.lists(VALUES, min_size=1, max_size=3),
    ),
)


@given(st.lists(REQUIREMENT, max_size=3), LABELS)
def test_the_label_matcher_means_what_each_requirement_says(requirements: list, labels: dict[str, str]) -> None:
    # The caches filter with cluster.label_selectors, the simulator's lists too: one parser, checked against the
    # meaning of each requirement (all of them must hold), as the API server reads a selector.
    selector = ",".join(text for text, _ in requirements)
    assert label_matcher(selector)(labels) == all(means(labels) for _, means in requirements)
