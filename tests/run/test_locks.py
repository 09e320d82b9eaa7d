"""Run-directory locks on any file system: flock, or exclusive lock files where flock is refused or local."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time

import pytest

from poslab.errors import ConfigError
from poslab.run import locks
from poslab.run.locks import RunInUse, exclusive, in_use


@pytest.mark.parametrize("mode", locks.MODES)
def test_a_second_holder_is_refused_naming_the_first_and_the_lock_goes_with_the_block(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOCKS", mode)
    assert not in_use(tmp_path)
    with exclusive(tmp_path):
        assert in_use(tmp_path)
        with pytest.raises(RunInUse, match=r"in use by another poslab process \(pid \d+"):
            with exclusive(tmp_path):
                pass
    assert not in_use(tmp_path) and not (tmp_path / locks.HELD).exists()
    with exclusive(tmp_path):  # free again
        pass


def test_a_lock_file_left_by_a_killed_process_on_this_host_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / locks.HELD).write_text(f"{socket.gethostname()} {gone.stdout.strip()}\n")  # SIGKILLed: left behind
    assert not in_use(tmp_path)
    with exclusive(tmp_path):
        assert (tmp_path / locks.HELD).read_text().split()[1] != gone.stdout.strip()


def test_a_lock_file_held_on_another_host_is_refused_with_how_to_clear_it(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    (tmp_path / locks.HELD).write_text("node017 4242\n")
    assert in_use(tmp_path)  # another node's process cannot be seen from here: assumed alive
    with pytest.raises(RunInUse, match=rf"held by pid 4242 on node017 .*; if that process is gone, remove {tmp_path}"):
        with exclusive(tmp_path):
            pass


def test_a_file_system_without_flock_falls_back_to_lock_files(tmp_path, monkeypatch):
    import fcntl

    def refused(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refused)
    with exclusive(tmp_path):
        assert (tmp_path / locks.HELD).read_text().split() == [socket.gethostname(), str(os.getpid())]
        assert in_use(tmp_path)
        with pytest.raises(RunInUse):
            with exclusive(tmp_path):
                pass
    assert not in_use(tmp_path)


def test_an_unknown_locking_mode_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOCKS", "nfs")
    with pytest.raises(
        ConfigError, match=r"^POSLAB_LOCKS='nfs' is not a way to lock run directories; valid: flock, files$"
    ):
        with exclusive(tmp_path):
            pass


def test_a_lock_file_of_another_host_whose_heartbeat_stopped_is_taken_over(tmp_path, monkeypatch):
    """A dead node cannot be asked: its holder stops touching the file, and after STALE_S it is free."""
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    held = tmp_path / locks.HELD
    held.write_text("node017 4242\n")
    old = held.stat().st_mtime - locks.STALE_S - 1
    os.utime(held, (old, old))
    assert not in_use(tmp_path)
    with exclusive(tmp_path):
        assert held.read_text().split() == [socket.gethostname(), str(os.getpid())]


def test_the_holder_touches_its_lock_file_while_it_holds_it(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("POSLAB_LOCKS", "files")
    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.05)
    held = tmp_path / locks.HELD
    with exclusive(tmp_path):
        old = held.stat().st_mtime - 100
        os.utime(held, (old, old))
        time.sleep(0.3)
        assert held.stat().st_mtime > old + 50


def test_of_two_processes_finding_one_stale_holder_only_one_takes_it(tmp_path, monkeypatch):
    """The second reads the stale holder before the first replaces it; it must not remove the new holder."""
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = (socket.gethostname(), int(gone.stdout))
    held = tmp_path / locks.HELD
    held.write_text(f"{stale[0]} {stale[1]}\n")
    with exclusive(tmp_path):  # the first took it over
        locks._take_over(tmp_path, stale)  # the second, acting on what it read before
        assert held.read_text().split() == [socket.gethostname(), str(os.getpid())]
        (tmp_path / locks.STEAL).write_text("")  # a takeover in progress elsewhere: this one stands back
        locks._take_over(tmp_path, (socket.gethostname(), os.getpid()))
        assert held.exists()
    assert not held.exists()


def test_a_lock_file_replaced_by_another_holder_is_not_removed_by_the_old_one(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    held = tmp_path / locks.HELD
    with exclusive(tmp_path):
        held.write_text("node017 4242\n")  # taken over by another node meanwhile
    assert held.read_text() == "node017 4242\n"


@pytest.mark.parametrize("mode", locks.MODES)
def test_a_run_root_that_cannot_be_locked_is_one_line(tmp_path, monkeypatch, mode):
    import fcntl

    monkeypatch.setenv("POSLAB_LOCKS", mode)
    real_open = os.open

    def stale(path, flags, *args):
        if str(path).endswith(locks.HELD):
            raise OSError(errno.ESTALE, "Stale file handle", str(path))
        return real_open(path, flags, *args)

    def failing(fd, operation):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fcntl, "flock", failing)
    monkeypatch.setattr(os, "open", stale)
    target = ".lock" if mode == "flock" else locks.HELD
    cause = "input/output error" if mode == "flock" else "stale file handle"
    with pytest.raises(ConfigError, match=rf"^cannot lock {tmp_path / target}: {cause}; the run root must allow"):
        with exclusive(tmp_path):
            pass


@pytest.mark.parametrize("value", ["abc", "0", "-5", "inf"])
def test_a_bad_stale_time_is_one_line(tmp_path, monkeypatch, value):
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    monkeypatch.setenv("POSLAB_LOCK_STALE_S", value)
    (tmp_path / locks.HELD).write_text("node017 4242\n")
    with pytest.raises(ConfigError, match=rf"^POSLAB_LOCK_STALE_S='{value}' must be a number of seconds > 0$"):
        with exclusive(tmp_path):
            pass


@pytest.mark.parametrize("host", ["this", "another"])
def test_a_clock_running_ahead_takes_over_no_live_holder(tmp_path, monkeypatch, host):
    """This host's clock 15 minutes ahead (faketime -f +15m): a holder's file touched a second ago is still
    fresh, read on the file system's clock; once the file system says it is old, it is taken over."""
    monkeypatch.setenv("POSLAB_LOCKS", "files")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    holder = (socket.gethostname() if host == "this" else "node-7", live.pid)
    held = tmp_path / locks.HELD
    held.write_text(f"{holder[0]} {holder[1]}\n")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 900)
    try:
        with pytest.raises(RunInUse), exclusive(tmp_path):
            pass
        assert held.read_text().split() == [holder[0], str(holder[1])]
        assert locks.age(held) < 60
        os.utime(held, (real() - 700, real() - 700))  # its heartbeat stopped 700 s ago by the file system's clock
        with exclusive(tmp_path):
            assert held.read_text().split() == [socket.gethostname(), str(os.getpid())]
    finally:
        live.kill()
        live.wait()
