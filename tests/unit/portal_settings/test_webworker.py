"""portal.webworker.TurnTakingWorker, the web processes' gunicorn worker: a process polls the listening socket only
while a turn is free for a new request (a request running, or paused in a long-poll, decides), so a connection that
arrives while it is busy waits for a process that is not. Real sockets, gunicorn's own HTTP handling and thread pool;
the test runs the worker's poll loop by hand, one pass at a time, as gthread's run() does."""

from __future__ import annotations

import os
import selectors
import socket
import threading
from functools import partial

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from accounts import turns
from portal.webworker import TurnTakingWorker


class App:
    """A WSGI application behind the portal's turns: GET /hold runs until ``leave`` is set, GET /pause waits inside
    ``turns.idle()`` (as a long-poll does) until ``leave`` is set, anything else answers at once."""

    def __init__(self):
        self.entered = threading.Event()
        self.leave = threading.Event()
        self.middleware = turns.TurnsMiddleware(self.view)

    def view(self, path):
        self.entered.set()
        if path == "/hold":
            self.leave.wait(30)
        elif path == "/pause":
            with turns.idle():
                self.leave.wait(30)
        return path

    def __call__(self, environ, start_response):
        body = self.middleware(environ["PATH_INFO"]).encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]


@pytest.fixture
def worker(settings, monkeypatch):
    settings.PORTAL_BUSY_REQUESTS = 1
    monkeypatch.setattr(turns, "_turns", None)  # this test's turns
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    cfg = Config()
    cfg.set("threads", 4)
    made = TurnTakingWorker(1, os.getpid(), [listener], None, 30, cfg, Logger(cfg))
    # What gthread's init_process and the start of run() set up, without loading an application or looping.
    made.tpool = made.get_thread_pool()
    made.poller = selectors.DefaultSelector()
    made._lock = threading.RLock()
    made.start_counting()
    made.poller.register(listener, selectors.EVENT_READ, partial(made.accept, listener.getsockname()))
    made.wsgi = App()
    yield made
    made.wsgi.leave.set()
    made.tpool.shutdown(wait=True)
    made.poller.close()
    listener.close()
    made.tmp.close()


def listening(worker) -> bool:
    try:
        worker.poller.get_key(worker.sockets[0])
    except KeyError:
        return False
    return True


def poll_once(worker, timeout=0.2) -> None:
    """One pass of gthread's loop: accept new connections, hand readable ones' requests to the thread pool."""
    for key, _ in worker.poller.select(timeout):
        key.data(key.fileobj)


def client(worker) -> socket.socket:
    return socket.create_connection(worker.sockets[0].getsockname(), timeout=10)


def send(sock, path) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


def answer(sock) -> bytes:
    """The response's body (the path its request asked for)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    header = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    length = int(header.split(b":")[1])
    while len(body) < length:
        body += sock.recv(4096)
    return body


def start(worker, path) -> socket.socket:
    """A client that connects and sends ``path``; returns once the application runs its request."""
    sock = client(worker)
    poll_once(worker)  # accepts it
    send(sock, path)
    poll_once(worker)  # its request goes to the thread pool
    assert worker.wsgi.entered.wait(10)
    return sock


def accepts_another_while_running(worker, first, path) -> None:
    """A second client is accepted while ``first``'s request runs; then ``first`` gets its answer."""
    second = client(worker)
    assert until(lambda: worker.nr_conns == 2, worker), "a process with a free turn left a new connection waiting"
    worker.wsgi.leave.set()
    assert answer(first) == path.encode()
    first.close()
    second.close()


def until(condition, worker) -> bool:
    for _ in range(50):
        if condition():
            return True
        poll_once(worker, 0.05)
    return condition()


def test_a_busy_process_leaves_a_new_connection_to_others_and_takes_it_when_its_turn_is_free(worker):
    first = start(worker, "/hold")
    assert worker.nr_conns == 1
    assert not listening(worker), "a process whose only turn is taken still polls for new connections"

    second = client(worker)  # the kernel completes the handshake; the connection waits to be accepted
    for _ in range(3):
        poll_once(worker, 0.1)
    assert worker.nr_conns == 1, "a busy process accepted a new connection"

    worker.wsgi.leave.set()
    assert answer(first) == b"/hold"
    assert until(lambda: worker.nr_conns == 2, worker), "the waiting connection was not accepted once the turn freed"
    assert listening(worker)
    send(second, "/now")
    assert until(lambda: worker.nr == 2, worker)  # gunicorn's count of requests handled
    assert answer(second) == b"/now"
    first.close()
    second.close()


def test_a_request_paused_in_a_long_poll_leaves_its_turn_free_for_a_new_connection(worker):
    first = start(worker, "/pause")
    assert until(lambda: turns.per_process().paused == 1, worker)
    assert until(lambda: listening(worker), worker), "a process whose only request is paused takes no connection"
    accepts_another_while_running(worker, first, "/pause")


def test_without_turns_a_process_accepts_while_busy_as_gthread_does(worker, settings, monkeypatch):
    settings.PORTAL_BUSY_REQUESTS = 0
    monkeypatch.setattr(turns, "_turns", None)
    worker.wsgi = App()  # its middleware reads the setting when made
    first = start(worker, "/hold")
    assert listening(worker)
    accepts_another_while_running(worker, first, "/hold")


def test_the_heartbeat_is_sent_at_most_once_a_second(worker, monkeypatch):
    beats = []
    monkeypatch.setattr(worker.tmp, "notify", lambda: beats.append(clock[0]))
    clock = [1000.0]
    monkeypatch.setattr("portal.webworker.time.monotonic", lambda: clock[0])
    worker.notify()
    for _ in range(50):  # fifty passes of the loop within the same second: one heartbeat
        clock[0] += 0.01
        worker.notify()
    assert beats == [1000.0]
    clock[0] = 1001.0
    worker.notify()
    worker.notify()
    assert beats == [1000.0, 1001.0]
    assert worker.HEARTBEAT_SECONDS < worker.timeout  # the arbiter, waiting --timeout seconds, always hears in time
