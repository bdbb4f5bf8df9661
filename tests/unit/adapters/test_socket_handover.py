"""adapters/socket_handover.py on real sockets: the replacement receives the very listening socket (a connection
queued before the handover is accepted through it), the old side hears `taken` only once the new one says so, a
start that fails leaves the old one serving, and a process of another user gets nothing."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import uuid
from collections.abc import Callable

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
    assert taken_from_child(become_nobody) == {}


def become_nobody() -> bool:
    os.setgid(65534)
    os.setuid(65534)
    return True


def taken_from_child(become: Callable[[], bool]) -> dict | None:
    """What take() gets from a forked child that runs `become` (False: it could not), then offers a listening
    socket under a fresh name; None when it could not become what was asked."""
    name = f"\0kimik3-test-{uuid.uuid4().hex}"
    ready, done = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child offers until the parent is done
        became = become()
        sock = listener()
        if became:
            Offer(name, {("127.0.0.1", sock.getsockname()[1]): sock}, lambda: None).start()
        os.write(ready[1], b"y" if became else b"n")
        os.read(done[0], 1)
        os._exit(0)
    try:
        return take_when_answered(name).sockets if os.read(ready[0], 1) == b"y" else None
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


def test_the_sockets_taken_are_not_inherited_by_a_program_the_helper_runs() -> None:
    old = listener()
    name, _ = offered(old)
    taken = take_when_offered(name)
    new = taken.pop(("127.0.0.1", old.getsockname()[1]))
    assert new is not None and not new.get_inheritable()  # SCM_RIGHTS gives inheritable fds unless asked otherwise
    taken.done()
    new.close()
    old.close()


@pytest.mark.parametrize(
    "message",
    [b"not json", b'[["127.0.0.1"]]', b'{"a": 1}', b'[["127.0.0.1", 1], ["127.0.0.1", 2]]'],
    ids=["not-json", "no-port", "object", "torn"],
)
def test_a_malformed_offer_gives_nothing_and_leaks_no_descriptor(message: bytes) -> None:
    sock = listener()
    name = offer_raw(message, [sock.fileno()])
    assert take_when_answered(name).sockets == {}
    assert wait_for_copies(sock.fileno(), 1)  # the offerer's own: none kept by the taker
    sock.close()


def test_a_descriptor_that_is_not_a_socket_is_not_taken_and_is_closed() -> None:
    read_end, write_end = os.pipe()
    name = offer_raw(b'[["127.0.0.1", 1]]', [read_end])
    taken = take_when_answered(name)
    assert taken.sockets == {}
    taken.keep()
    assert wait_for_copies(read_end, 2)  # its two ends, and no copy kept by the taker
    os.close(read_end)
    os.close(write_end)


def test_root_in_another_mount_namespace_gets_nothing() -> None:
    """What an engine's container is: root, on the host's network (its abstract names), another filesystem."""
    if os.getuid() != 0:
        pytest.skip("needs root to enter a mount namespace")
    old = listener()
    name, handed = offered(old)
    take_when_offered(name).keep()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) != 0:
            os._exit(2)
        os._exit(0 if not take(name).sockets else 1)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) == 2:
        pytest.skip("unshare(CLONE_NEWNS) not permitted here")
    assert os.waitstatus_to_exitcode(status) == 0 and not handed.is_set()
    old.close()


def test_nothing_is_taken_from_root_in_another_mount_namespace() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to enter a mount namespace")
    taken = taken_from_child(lambda: ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) == 0)
    if taken is None:
        pytest.skip("unshare(CLONE_NEWNS) not permitted here")
    assert taken == {}


CLONE_NEWNS = 0x00020000


def offer_raw(message: bytes, fds: list[int]) -> str:
    """An offerer of this user that sends `message` with `fds`, once, as a broken or hostile helper would."""
    name = f"\0kimik3-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)

    def answer() -> None:
        with server:
            for _ in range(2):  # the probe of take_when_answered, then take
                channel, _ = server.accept()
                with channel:
                    try:
                        socket.send_fds(channel, [message], fds)
                        channel.recv(8)
                    except OSError:
                        pass

    threading.Thread(target=answer, daemon=True).start()
    return name


def wait_for_copies(fd: int, count: int) -> bool:
    """This process holds `count` descriptors of what `fd` refers to (the offer thread's own send is over by then)."""
    import time

    target = os.readlink(f"/proc/self/fd/{fd}")
    deadline = time.monotonic() + 5
    while True:
        copies = 0
        for entry in os.listdir("/proc/self/fd"):
            try:
                copies += os.readlink(f"/proc/self/fd/{entry}") == target
            except OSError:
                pass  # closed meanwhile
        if copies == count or time.monotonic() > deadline:
            return copies == count
        time.sleep(0.02)
