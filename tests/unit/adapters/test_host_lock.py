"""The per-host lock: the real flock adapter on a temp state dir, the waiting policy on a fake clock.

Two `StateDirLock`s in one process conflict exactly as two processes do (a flock belongs to an open
file description), so most cases need no second process; the kill -9 case uses a real one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.fakes import FakeClock

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.errors import InputError, LockHeld
from kimik3_reconciler.locking import acquire, force_unlock, new_holder
from kimik3_reconciler.model.durations import parse_duration
from kimik3_reconciler.model.host_lock import LOCK_RECORD, LockHolder


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict]] = []

    def __call__(self, name: str, **fields: object) -> None:
        self.seen.append((name, fields))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen]


def holder(operation: str = "apply", profile: str = "k3-a") -> LockHolder:
    return new_holder(operation, profile, FakeClock())


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def stale_record(state: Path, ident: str, operation: str) -> LockHolder:
    """The lock record of a dead process of this host (profile k3-a), written in the state dir `state`."""
    gone = LockHolder(ident, operation, "k3-a", dead_pid(), os.uname().nodename, "2026-01-01T00:00:00+00:00")
    (state / "lock").mkdir(exist_ok=True)
    (state / LOCK_RECORD).write_text(json.dumps(gone.to_json()))
    return gone


def test_a_second_holder_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    first, second = StateDirLock(tmp_path), StateDirLock(tmp_path)
    mine = holder()
    assert first.try_acquire(mine).acquired
    attempt = second.try_acquire(holder("destroy", "k3-b"))
    assert not attempt.acquired and attempt.holder == mine
    record = json.loads((tmp_path / LOCK_RECORD).read_text())
    assert {k: record[k] for k in ("id", "operation", "profile", "pid")} == {
        "id": mine.id,
        "operation": "apply",
        "profile": "k3-a",
        "pid": os.getpid(),
    }
    assert record["host"] and record["started"]
    first.release(mine)
    assert not (tmp_path / LOCK_RECORD).exists()
    assert second.try_acquire(holder()).acquired


def test_timeout_fails_with_exit_5_naming_the_holder_after_showing_progress(tmp_path: Path) -> None:
    mine = holder("apply", "k3-a")
    StateDirLock(tmp_path).try_acquire(mine)
    clock, events = FakeClock(), Events()
    with pytest.raises(LockHeld) as raised:
        acquire(StateDirLock(tmp_path), clock, holder("apply", "k3-b"), timeout_s=25, say=events)
    message = str(raised.value)
    assert raised.value.exit_code == 5 and raised.value.lock_id == mine.id
    assert f"apply of k3-a by pid {os.getpid()}" in message and f"kimik3 force-unlock {mine.id}" in message
    assert "waited 25s" in message and "Nothing was changed" in message
    waits = [fields for name, fields in events.seen if name == "lock-wait"]
    assert [w["waited_s"] for w in waits] == [0, 10, 20]  # progress every 10 s while waiting
    assert 25 <= clock.t < 25.5


def test_zero_timeout_fails_at_once(tmp_path: Path) -> None:
    StateDirLock(tmp_path).try_acquire(holder())
    clock = FakeClock()
    with pytest.raises(LockHeld, match=r"did not wait \(--lock-timeout 0\)"):
        acquire(StateDirLock(tmp_path), clock, holder(), timeout_s=0, say=Events())
    assert clock.t == 0


def test_a_waiter_gets_the_lock_when_the_holder_releases(tmp_path: Path) -> None:
    first, mine = StateDirLock(tmp_path), holder()
    first.try_acquire(mine)

    class ReleasingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if self.t >= 3:
                first.release(mine)

    events = Events()
    acquire(StateDirLock(tmp_path), ReleasingClock(), holder(), timeout_s=60, say=events)
    assert events.names() == ["lock-wait"]


def test_a_stale_record_of_a_dead_process_is_taken_over_with_a_message(tmp_path: Path) -> None:
    stale_record(tmp_path, "deadbeef0001", "apply")
    events = Events()
    acquire(StateDirLock(tmp_path), FakeClock(), holder(), timeout_s=0, say=events)
    assert events.names() == ["lock-taken-over"]
    assert "deadbeef0001" in events.seen[0][1]["stale"] and "process is gone" in events.seen[0][1]["why"]


def test_a_holder_killed_with_sigkill_leaves_no_lock_behind(tmp_path: Path) -> None:
    script = (
        "import sys, time; from kimik3_reconciler.adapters.host_lock import StateDirLock; "
        "from kimik3_reconciler.locking import new_holder; from support.fakes import FakeClock; "
        "from pathlib import Path; "
        "assert StateDirLock(Path(sys.argv[1])).try_acquire(new_holder('apply', 'k3-a', FakeClock())).acquired; "
        "print('locked', flush=True); time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "locked"
        assert not StateDirLock(tmp_path).try_acquire(holder()).acquired
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        child.kill()
    attempt = StateDirLock(tmp_path).try_acquire(holder())
    assert attempt.acquired and attempt.holder is not None and attempt.holder.pid == child.pid


def test_force_unlock_needs_the_current_id_and_lets_the_next_one_in(tmp_path: Path) -> None:
    hung, mine = StateDirLock(tmp_path), holder("apply", "k3-a")
    hung.try_acquire(mine)
    with pytest.raises(InputError, match="is not the current lock; the current one is apply of k3-a"):
        force_unlock(StateDirLock(tmp_path), "0000")
    said = force_unlock(StateDirLock(tmp_path), mine.id)
    assert f"removed lock {mine.id}" in said and f"pid {os.getpid()} still runs" in said
    nxt, theirs = StateDirLock(tmp_path), holder("apply", "k3-b")
    attempt = nxt.try_acquire(theirs)
    assert attempt.acquired and attempt.holder is None  # a new lock file: the hung one's flock excludes nobody
    hung.release(mine)  # the hung one finishing later must not remove the new holder's record
    assert StateDirLock(tmp_path).holder() == (theirs, True)


def test_force_unlock_of_a_stale_record_and_of_nothing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="the host is not locked"):
        force_unlock(StateDirLock(tmp_path), "abc")
    stale_record(tmp_path, "deadbeef0002", "prune")
    assert "removed the stale lock record deadbeef0002" in force_unlock(StateDirLock(tmp_path), "deadbeef0002")
    assert StateDirLock(tmp_path).holder() == (None, False)


def test_nested_locking_in_one_process_is_a_bug_not_a_deadlock(tmp_path: Path) -> None:
    lock = StateDirLock(tmp_path)
    lock.try_acquire(holder())
    with pytest.raises(RuntimeError, match="already held by this process"):
        lock.try_acquire(holder())


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("90", 90), ("90s", 90), ("3m", 180), ("1h30m", 5400), ("500ms", 0.5), ("2.5m", 150)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "3 minutes", "-1", "m", "3m-", "nan"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["inf", "99999999999999999999h", "8785h"])
def test_durations_past_a_year_are_refused_not_a_traceback_at_the_first_wait(text: str) -> None:
    """Adversary review: `reconcile --interval 99999999999999999999h` ran one pass, then died in the wait with
    OverflowError (timestamp out of range for platform time_t)."""
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["apply", "--lock-timeout", "3x", "p.yaml"], "'--lock-timeout': '3x' is not a duration"),
        (["prune", "--lock-timeout", "-5", "p.yaml"], "'--lock-timeout'"),
        (["reconcile", "--interval", "0", "p.yaml"], "'--interval': 0 is too short: at least 1s"),
    ],
)
def test_bad_durations_on_the_command_line_exit_2_naming_the_option(args: list[str], says: str) -> None:
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and says in result.output, result.output


def test_asking_who_holds_the_lock_never_takes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A probe that took the flock for an instant could make an apply starting in that instant exit 5.
    assert StateDirLock(tmp_path).holder() == (None, False)
    mine = holder()
    StateDirLock(tmp_path).try_acquire(mine)
    asker = StateDirLock(tmp_path)
    monkeypatch.setattr(asker, "_flock", lambda: pytest.fail("holder() tried the lock"))
    assert asker.holder() == (mine, True)


# the host-wide lock: kimik3s with other state dirs (two users) are kept out too ------------------------


def test_two_state_dirs_on_one_host_exclude_each_other_through_the_host_wide_lock(tmp_path: Path) -> None:
    shared = tmp_path / "run-lock" / "kimik3.lock"
    shared.parent.mkdir()
    alice, bob = StateDirLock(tmp_path / "alice", shared), StateDirLock(tmp_path / "bob", shared)
    mine = holder("apply", "k3-a")
    assert alice.try_acquire(mine).acquired
    assert oct(shared.stat().st_mode & 0o7777) == "0o644"  # every user locks the same file; only alice writes it
    refused = bob.try_acquire(holder("apply", "k3-b"))
    assert not refused.acquired and refused.holder == mine  # named from the host-wide file's record
    assert StateDirLock(tmp_path / "bob", shared).holder() == (mine, True)  # status of bob's state dir shows it
    assert not (tmp_path / "bob" / LOCK_RECORD).exists()  # bob let go of his state dir's lock
    with pytest.raises(LockHeld, match="apply of k3-a"):
        acquire(StateDirLock(tmp_path / "bob", shared), FakeClock(), holder(), timeout_s=0, say=Events())
    alice.release(mine)
    assert shared.read_text() == ""  # the record goes with the lock; the file stays
    theirs = holder("apply", "k3-b")
    assert bob.try_acquire(theirs).acquired and not alice.try_acquire(holder()).acquired
    bob.release(theirs)


def test_a_host_wide_lock_that_cannot_be_used_falls_back_to_the_state_dir_saying_so(tmp_path: Path) -> None:
    events = Events()
    nowhere = tmp_path / "no-such-dir" / "kimik3.lock"  # e.g. a host without /run/lock
    acquire(StateDirLock(tmp_path / "state", nowhere), FakeClock(), holder(), timeout_s=0, say=events)
    ((name, fields),) = events.seen
    assert name == "lock-host-wide-unavailable" and f"cannot use the host-wide lock {nowhere}" in fields["why"]
    assert "only the state dir's lock" in fields["why"]


def test_a_dead_holders_host_wide_record_is_taken_over(tmp_path: Path) -> None:
    shared = tmp_path / "kimik3.lock"
    gone = LockHolder("deadbeef0003", "apply", "k3-a", dead_pid(), os.uname().nodename, "2026-12-03T04:00:00+00:00")
    shared.write_text(json.dumps(gone.to_json()))
    attempt = StateDirLock(tmp_path / "state", shared).try_acquire(holder())
    assert attempt.acquired and attempt.holder == gone


def test_force_unlock_from_another_state_dir_clears_the_host_wide_lock(tmp_path: Path) -> None:
    shared = tmp_path / "kimik3.lock"
    hung, mine = StateDirLock(tmp_path / "alice", shared), holder("apply", "k3-a")
    assert hung.try_acquire(mine).acquired
    said = force_unlock(StateDirLock(tmp_path / "bob", shared), mine.id)
    assert f"removed lock {mine.id}" in said and "still runs on this host" in said
    theirs = holder("apply", "k3-b")
    assert StateDirLock(tmp_path / "bob", shared).try_acquire(theirs).acquired


@pytest.mark.parametrize("planted", ["symlink", "hardlink", "foreign-file", "small-json", "fifo"])
def test_a_host_wide_lock_path_that_is_not_a_plain_lock_file_is_never_written_through(
    tmp_path: Path, planted: str
) -> None:
    """Held-back review: KIMIK3_HOST_LOCK (or a symlink planted in world-writable /run/lock) pointing at another
    file made one apply truncate that file (it emptied /etc/passwd). Now the path must be a plain file of its own
    holding a lock record or nothing; else kimik3 keeps the state dir's lock only, says so, and leaves it alone."""
    content = (
        '{"auths": {"registry.example": {"auth": "dXNlcjpwYXNz"}}}\n'
        if planted == "small-json"
        else "root:x:0:0:root:/root:/bin/bash\n"
    )
    victim = tmp_path / "passwd"
    victim.write_text(content)
    victim.chmod(0o640)  # as /etc/shadow: the lock's mode fix (0644) must not reach it either
    shared = tmp_path / "kimik3.lock"
    if planted == "symlink":
        shared.symlink_to(victim)
    elif planted == "hardlink":
        os.link(victim, shared)
    elif planted in ("foreign-file", "small-json"):  # KIMIK3_HOST_LOCK set to a file that is not kimik3's
        shared = victim  # small-json: ~/.docker/config.json, say (JSON, a lock record's size, not a record)
    else:
        os.mkfifo(shared)
    events, mine = Events(), holder()
    lock = StateDirLock(tmp_path / "state", shared)
    acquire(lock, FakeClock(), mine, timeout_s=0, say=events)
    lock.release(mine)
    ((name, fields),) = events.seen
    assert name == "lock-host-wide-unavailable" and f"cannot use the host-wide lock {shared}" in fields["why"]
    assert victim.read_text() == content
    # force-unlock of the state dir's lock takes the host-wide file along when it names nobody: never this one
    hung = StateDirLock(tmp_path / "state", shared)
    stuck = holder()
    acquire(hung, FakeClock(), stuck, timeout_s=0, say=Events())
    force_unlock(StateDirLock(tmp_path / "state", shared), stuck.id)
    assert victim.read_text() == content and victim.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("torn", ['{"id": "deadbeef00', '{"i', "{"])
def test_a_torn_host_wide_record_is_still_a_lock_file(tmp_path: Path, torn: str) -> None:
    shared = tmp_path / "kimik3.lock"
    shared.write_text(torn)  # a kimik3 killed between truncate and write
    events = Events()
    acquire(StateDirLock(tmp_path / "state", shared), FakeClock(), holder(), timeout_s=0, say=events)
    assert events.seen == [] and json.loads(shared.read_text())["profile"] == "k3-a"


# the host-wide file's mode: 0644, its creator's; other users still lock it --------------------------------


def test_the_host_wide_file_is_0644_whatever_the_umask_and_an_older_0666_one_of_ours_is_narrowed(
    tmp_path: Path,
) -> None:
    shared, mine = tmp_path / "kimik3.lock", holder()
    before = os.umask(0o077)  # a umask that would make it 0600: other users could not open it to lock
    try:
        lock = StateDirLock(tmp_path / "state", shared)
        assert lock.try_acquire(mine).acquired
        lock.release(mine)
    finally:
        os.umask(before)
    assert shared.stat().st_mode & 0o7777 == 0o644 and shared.stat().st_uid == os.geteuid()
    shared.chmod(0o666)  # as kimik3 made it before
    again = StateDirLock(tmp_path / "state", shared)
    attempt = again.try_acquire(mine)
    assert attempt.acquired and attempt.note is None
    assert shared.stat().st_mode & 0o7777 == 0o644
    again.release(mine)
    shared.chmod(0o664)  # an operator's own lock file in a group folder: group write kept, only world write goes
    assert again.try_acquire(mine).acquired
    again.release(mine)
    assert shared.stat().st_mode & 0o7777 == 0o664


OTHER_USER = 65534  # nobody
_AS_OTHER_USER = """
import json, sys
from pathlib import Path
from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.locking import new_holder

class Clock:
    def now(self):
        import datetime
        return datetime.datetime.now(datetime.timezone.utc)

state, shared = Path(sys.argv[1]), Path(sys.argv[2])
lock, me = StateDirLock(state, shared), new_holder("apply", "k3-other", Clock())
attempt = lock.try_acquire(me)
found = attempt.holder.id if attempt.holder else None
print(json.dumps({"acquired": attempt.acquired, "found": found, "note": attempt.note}), flush=True)
if attempt.acquired:
    sys.stdin.read()  # hold it until the test closes stdin
    lock.release(me)
"""


def _as_other_user(folder: Path, shared: Path) -> subprocess.Popen:
    """kimik3's lock code run by another user (nobody), its state dir its own; its first line says what it got."""
    state = folder / "other-state"
    state.mkdir(exist_ok=True)
    os.chown(state, OTHER_USER, OTHER_USER)
    root = Path(__file__).parents[3]
    for python in (sys.executable, "/usr/bin/python3"):  # the test's venv may sit in a folder nobody may enter
        as_other = {
            "user": OTHER_USER,
            "group": OTHER_USER,
            "extra_groups": [],
            "cwd": "/",
            "env": {"PYTHONPATH": str(root)},
        }
        try:
            probe = subprocess.run(
                [python, "-c", "import kimik3_reconciler.adapters.host_lock"],
                **as_other,
                capture_output=True,
                check=False,
            )
        except PermissionError:
            continue
        if probe.returncode == 0:
            return subprocess.Popen(
                [python, "-c", _AS_OTHER_USER, str(state), str(shared)],
                **as_other,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
    pytest.skip("no Python another user can run kimik3's lock code with")


def _first_line(child: subprocess.Popen) -> dict:
    if not select.select([child.stdout], [], [], 30)[0]:
        child.kill()
        pytest.fail("the other user's kimik3 said nothing in 30 s")
    line = child.stdout.readline()
    assert line, f"the other user's kimik3 said nothing (exit {child.wait()})"
    return json.loads(line)


def _finish(child: subprocess.Popen) -> None:
    child.stdin.close()
    assert child.wait(10) == 0


@pytest.fixture
def run_lock() -> Path:
    """A folder as /run/lock is (sticky, everyone writes), outside pytest's tmp (mode 0700: nobody enters it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a second user")
    folder = Path(tempfile.mkdtemp(prefix="kimik3-run-lock-"))
    folder.chmod(0o1777)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_another_users_kimik3_still_excludes_through_the_0644_file_but_cannot_write_its_record(
    run_lock: Path, tmp_path: Path
) -> None:
    shared, mine = run_lock / "kimik3.lock", holder("apply", "k3-root")
    lock = StateDirLock(tmp_path / "state", shared)
    assert lock.try_acquire(mine).acquired
    theirs = _as_other_user(run_lock, shared)
    refused = _first_line(theirs)
    assert refused["acquired"] is False and refused["found"] == mine.id  # told who holds it (the file reads)
    theirs.wait(10)
    lock.release(mine)
    theirs = _as_other_user(run_lock, shared)
    got = _first_line(theirs)
    assert got["acquired"] is True and got["note"] is None  # locked through a read-only descriptor
    assert shared.read_text() == "" and shared.stat().st_uid == 0  # the record stays unwritten: not theirs
    assert not StateDirLock(tmp_path / "state", shared).try_acquire(holder()).acquired  # and it keeps us out
    _finish(theirs)


def test_a_host_wide_file_another_user_cannot_open_leaves_them_the_state_dir_lock_saying_so(run_lock: Path) -> None:
    shared = run_lock / "kimik3.lock"
    shared.write_text("")
    shared.chmod(0o600)  # e.g. made by hand, or by a umask-bound tool: not readable by others
    theirs = _as_other_user(run_lock, shared)
    got = _first_line(theirs)
    assert got["acquired"] is True and "cannot use the host-wide lock" in got["note"]
    assert shared.stat().st_mode & 0o7777 == 0o600  # another user's file is used (or not) as it is
    _finish(theirs)


def test_a_lock_record_that_cannot_be_written_still_locks_and_is_released(tmp_path: Path, monkeypatch) -> None:
    """Issue 30: with a full state dir the holder record's write raised after the flock was taken, and nothing
    released it: a reconcile loop then refused itself every pass ("already held by this process")."""
    import errno

    lock, other = StateDirLock(tmp_path), StateDirLock(tmp_path)

    def full(key: str, value: dict) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / key))

    monkeypatch.setattr(lock.records, "write", full)
    mine, events = holder(), Events()
    acquire(lock, FakeClock(), mine, timeout_s=0, say=events)
    assert events.names() == ["lock-record-unwritten"]
    assert "No space left on device" in events.seen[0][1]["why"]
    assert not other.try_acquire(holder("apply", "k3-b")).acquired  # the flock holds, unnamed
    lock.release(mine)
    again = holder()
    acquire(lock, FakeClock(), again, timeout_s=0, say=Events())  # the same process takes it again
    lock.release(again)
    assert other.try_acquire(holder("apply", "k3-b")).acquired
