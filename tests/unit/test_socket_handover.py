"""adapters/socket_handover.py on real sockets: the replacement receives the very listening socket (a connection
queued before the handover is accepted through it), the old side hears `taken` only once the new one says so, a
start that fails leaves the old one serving, and a process of another user gets nothing."""

from __future__ import annotations

import os
import socket
import threading
import uuid

import pytest

from kimik3_reconciler.adapters.socket_handover import Offer, take


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def offered(sock: socket.socket) -> tuple[str, threading.Event]:
    name, handed = f"\0kimik3-test-{uuid.uuid4().hex}", threading.Event()
    Offer(name, {("127.0.0.1", sock.getsockname()[1]): sock}, handed.set).start()
    return name, handed


def test_the_replacement_gets_the_same_socket_and_its_queue() -> None:
    old = listener()
    port = old.getsockname()[1]
    name, handed = offered(old)
    queued = socket.create_connection(("127.0.0.1", port))  # in the accept queue, accepted by nobody yet
    taken = take_when_offered(name)
    new = taken.pop(("127.0.0.1", port))
    assert new is not None and new.getsockname() == old.getsockname()
    assert not handed.is_set()  # the old side goes on until the new one says it serves
    taken.done()
    assert handed.wait(5)
    old.close()  # what the old helper does next: the socket lives on in the new one
    conn, _ = new.accept()  # the connection queued before the handover
    queued.sendall(b"x")
    assert conn.recv(1) == b"x"
    for s in (conn, queued, new):
        s.close()


def test_a_start_that_fails_leaves_the_old_side_serving_and_offering() -> None:
    old = listener()
    name, handed = offered(old)
    take_when_offered(name).keep()
    second = take_when_offered(name)  # offered again to the next try
    assert not handed.is_set() and second.sockets
    second.done()
    assert handed.wait(5)
    old.close()


def test_nothing_is_offered_to_a_process_of_another_user() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a child as another user")
    old = listener()
    name, handed = offered(old)
    take_when_offered(name).keep()  # offered by now: the name answers
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        os.setgid(65534)
        os.setuid(65534)
        os._exit(0 if not take(name).sockets else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and not handed.is_set()
    old.close()


def test_a_socket_not_listening_where_the_offer_says_is_not_taken() -> None:
    other = listener()  # listens on another port than the one it is offered as
    name, handed = f"\0kimik3-test-{uuid.uuid4().hex}", threading.Event()
    Offer(name, {("127.0.0.1", free_port(other)): other}, handed.set).start()
    taken = take_when_answered(name)
    assert taken.sockets == {}
    taken.done()
    other.close()


def test_nothing_is_taken_from_a_process_of_another_user() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a child as another user")
    name = f"\0kimik3-test-{uuid.uuid4().hex}"
    ready, done = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - another user offers a socket under the name
        os.setgid(65534)
        os.setuid(65534)
        sock = listener()
        Offer(name, {("127.0.0.1", sock.getsockname()[1]): sock}, lambda: None).start()
        os.write(ready[1], b"x")
        os.read(done[0], 1)
        os._exit(0)
    os.read(ready[0], 1)
    try:
        assert take_when_answered(name).sockets == {}
    finally:
        os.write(done[1], b"x")
        os.waitpid(child, 0)


def free_port(taken: socket.socket) -> int:
    """A port other than `taken`'s."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return port if port != taken.getsockname()[1] else port + 1


def take_when_answered(name: str):  # noqa: ANN201 - Taken
    """take(name) once the name answers (an empty Taken from a refusal means nobody offers yet)."""
    import time

    deadline = time.monotonic() + 5
    while True:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(name)
            probe.close()
            break
        except OSError:
            probe.close()
            assert time.monotonic() < deadline, "nothing offered under the name"
            time.sleep(0.02)
    return take(name)


def take_when_offered(name: str):  # noqa: ANN201 - Taken
    """The offer's thread binds its name a moment after start(): asked until it answers."""
    import time

    deadline = time.monotonic() + 5
    while True:
        taken = take(name)
        if taken.sockets or time.monotonic() > deadline:
            return taken
        time.sleep(0.02)
