"""accounts.turns: at most PORTAL_BUSY_REQUESTS requests of a process run at once, the next one waits for a turn,
and a request inside ``idle()`` (a long-poll's pause) has given its turn back."""

from __future__ import annotations

import threading

import pytest

from accounts import turns


@pytest.fixture
def two_turns(settings, monkeypatch):
    settings.PORTAL_BUSY_REQUESTS = 2
    monkeypatch.setattr(turns, "_turns", None)  # a semaphore of this test's size


def run_requests(count: int, view) -> list[threading.Thread]:
    middleware = turns.TurnsMiddleware(view)
    threads = [threading.Thread(target=middleware, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_a_third_request_waits_until_one_of_two_running_ones_ends(two_turns):
    running, leave = [], {n: threading.Event() for n in range(3)}
    entered = threading.Semaphore(0)

    def view(n):
        running.append(n)
        entered.release()
        leave[n].wait(30)
        running.remove(n)
        return n

    threads = run_requests(3, view)
    assert entered.acquire(timeout=30) and entered.acquire(timeout=30)
    assert not entered.acquire(timeout=0.3), "a third request ran beside two"
    assert len(running) == 2
    first = running[0]
    leave[first].set()
    assert entered.acquire(timeout=30), "the waiting request never got the freed turn"
    assert first not in running and len(running) == 2
    for event in leave.values():
        event.set()
    for thread in threads:
        thread.join(30)
    assert running == []


def test_an_idle_request_gives_its_turn_back_and_takes_one_after(two_turns):
    idle, wake = threading.Event(), threading.Event()

    def waiting_view(n):
        with turns.idle():
            idle.set()
            wake.wait(30)
        return n

    waiter = run_requests(1, waiting_view)[0]
    assert idle.wait(30)
    # Two requests inside at once: only possible while the waiting one holds neither turn.
    both = threading.Barrier(2, timeout=30)
    for thread in run_requests(2, lambda n: both.wait()):
        thread.join(40)
    assert not both.broken
    wake.set()
    waiter.join(30)
    assert not waiter.is_alive()
    assert turns._queue().free == 2  # every turn given back


def test_no_limit_runs_every_request_at_once(settings, monkeypatch):
    settings.PORTAL_BUSY_REQUESTS = 0
    monkeypatch.setattr(turns, "_turns", None)
    barrier = threading.Barrier(5, timeout=30)
    threads = run_requests(5, lambda n: barrier.wait())
    for thread in threads:
        thread.join(30)
    assert not barrier.broken and turns._turns is None


def test_a_freed_turn_goes_to_the_request_that_waited_longest(two_turns):
    """First come, first served: a freed turn passes straight to the longest waiter, so it is never free for a
    request that arrives meanwhile (threading.Semaphore left it free until the woken waiter ran, and a newcomer
    could take it first)."""
    queue = turns._queue()
    queue.acquire()
    queue.acquire()  # both turns held
    order, lock = [], threading.Lock()

    def take(n):
        queue.acquire()
        with lock:
            order.append(n)
        queue.release()

    threads = []
    for n in range(6):
        thread = threading.Thread(target=take, args=(n,), daemon=True)
        thread.start()
        threads.append(thread)
        for _ in range(300):  # this one is queued before the next one starts
            if queue.waiting == n + 1:
                break
            threading.Event().wait(0.01)
        assert queue.waiting == n + 1
    queue.release()
    # The freed turn went straight to the first waiter: at no moment is it free for a newcomer to take.
    assert queue.free == 0
    # A request arriving now queues behind the six.
    late = threading.Thread(target=take, args=(6,), daemon=True)
    late.start()
    for thread in [*threads, late]:
        thread.join(30)
    queue.release()
    assert order == [0, 1, 2, 3, 4, 5, 6]
    assert queue.free == 2 and queue.waiting == 0
