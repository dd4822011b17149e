"""safety_net/fileio.py's own lines that no command's test reached (a hunt changed them one at a time, and every
test passed): the temporary file's lock, permissions and fsyncs, a write from a thread, a folder whose name glob
reads as a pattern, the writer lock's pid, and a reading lock on a folder without a .lock file."""
import os
import stat
import subprocess
import sys
import threading

import pytest

from safety_net.configurator import UserError
from safety_net.fileio import atomic_open, lock_dir, lock_for_reading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_write_says_nothing_when_no_earlier_one_left_a_file(tmp_path, capsys):
    with atomic_open(tmp_path / "a.bin") as f:
        f.write(b"x")
    assert capsys.readouterr().err == ""


def test_a_second_write_of_a_file_leaves_the_first_writers_temporary_file(tmp_path, capsys):
    """Two writes of one path at once (two exports of one model.gguf): the second removes only what a killed
    writer left, not the live one's file, which it finds locked; each ends whole, the last one wins."""
    path = tmp_path / "model.gguf"
    with atomic_open(path) as outer:
        outer.write(b"AAAAA")
        with atomic_open(path) as inner:
            inner.write(b"B")
        assert path.read_bytes() == b"B"
    assert path.read_bytes() == b"AAAAA" and capsys.readouterr().err == ""


def test_a_written_file_has_the_usual_permissions(tmp_path):
    """mkstemp makes 0600 files: a checkpoint, a dataset or an export would be the writer's alone."""
    umask = os.umask(0o022)
    try:
        with atomic_open(tmp_path / "ckpt.pt") as f:
            f.write(b"x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "ckpt.pt").st_mode) == 0o644


def test_the_data_then_the_rename_reach_the_disk(tmp_path, monkeypatch):
    """fsync of the temporary file before its rename (else a power cut may leave an empty file under the name),
    then of the folder (the rename itself)."""
    synced, real = [], os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with atomic_open(tmp_path / "ckpt.pt") as f:
        f.write(b"x")
    folder = os.path.realpath(tmp_path)
    assert len(synced) == 2 and synced[0].startswith(os.path.join(folder, ".ckpt.pt.")) and synced[1] == folder


def test_a_write_from_a_thread(tmp_path):
    """SIGTERM's handler can be set in the main thread only: elsewhere the write goes on without it."""
    errors = []

    def write():
        try:
            with atomic_open(tmp_path / "a.bin") as f:
                f.write(b"x")
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert errors == [] and (tmp_path / "a.bin").read_bytes() == b"x"


def test_what_a_killed_write_left_in_a_folder_named_like_a_pattern_is_removed(tmp_path, capsys):
    folder = tmp_path / "run[1]"
    folder.mkdir()
    (folder / ".ckpt.pt.abc123.tmp").write_bytes(b"\0" * 1000)
    with atomic_open(folder / "ckpt.pt") as f:
        f.write(b"x")
    assert os.listdir(folder) == ["ckpt.pt"] and "removed 1 temporary file(s)" in capsys.readouterr().err


def test_a_second_writer_is_told_the_holders_pid(tmp_path):
    """lock_dir's own pid, written over an earlier writer's and flushed (a holder that had not flushed would be
    'pid ?', and one that appended, 'pid <earlier>\\n<its own>')."""
    folder = tmp_path / "out"
    lock_dir(str(folder)).close()   # an earlier writer's pid stays in the file
    code = ("import sys, time\nfrom safety_net.fileio import lock_dir\nlock = lock_dir(sys.argv[1])\n"
            "print('locked', flush=True)\ntime.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=rf"being written by another process \(pid {holder.pid}\);"):
            lock_dir(str(folder))
    finally:
        holder.kill()
        holder.wait()


def test_a_run_reading_a_folder_without_a_lock_file_keeps_writers_out(tmp_path):
    """A dataset folder another program prepared has no .lock: the reader creates it, and a writer is refused."""
    folder = tmp_path / "data"
    folder.mkdir()
    with lock_for_reading(str(folder)):
        with pytest.raises(UserError, match="is being read by a training run"):
            lock_dir(str(folder), key="data_dir")
