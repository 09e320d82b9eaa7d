"""Run-directory locks on any file system: flock, or exclusive lock files where flock is refused or local."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest

from poslab import locks
from poslab.errors import ConfigError
from poslab.locks import RunInUse, exclusive, in_use


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
