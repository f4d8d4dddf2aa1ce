"""A run folder's writer: one trainer at a time, and writes that fail in one line.

``fedmgda train`` holds an exclusive lock (``fcntl.flock`` on ``train.lock``, which holds its
process id) on every run folder it writes, from before it loads any data to its end: a second
trainer on the same folder (a Snakemake rerun while an orphaned trainer still runs) stops at once,
naming the folder and the holder (with ``wait_while``, as the workflow's jobs run it: it waits for
the holder to end, and a job never fails because another trainer writes its folders). The kernel
drops the lock when its process dies, so a
``train.lock`` left by a killed trainer is taken over, and the log says so. Taking the lock also
checks that the folder can be written, before round 1.

``writing`` writes a file through ``<file>.tmp`` renamed into place: a full disk or a read-only
folder becomes one line naming the file, and leaves no ``.tmp`` behind. ``temporary_file`` makes
a uniquely named file to write and rename over another (a download, a partition file, the jobs'
plan), with the permissions the umask gives.

This is how a run folder is written, not what it holds: its files' format is ``fedmgda.results``'s
(the outputs, written and read) and ``fedmgda.checkpoints``'s (the checkpoint).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fedmgda.errors import RunFolderError

LOCK = "train.lock"
# the trainer's option that restarts a run whose checkpoint it cannot resume from
# (fedmgda.checkpoints), and the environment variable that sets it (how a Snakemake run passes it to
# its training jobs)
FRESH_OPTION = "--fresh-if-unreadable"
FRESH_ENV = "FEDMGDA_FRESH_IF_UNREADABLE"
# the trainer's option that waits for another trainer's lock instead of refusing it, and its
# environment variable (set by the workflow's training jobs)
WAIT_OPTION = "--wait-for-lock"
WAIT_ENV = "FEDMGDA_WAIT_FOR_LOCK"
# how often a waiting trainer tries a held lock again (seconds)
WAIT_POLL_S = 0.5


class FolderHeld(RunFolderError):
    """A run folder another trainer holds, refused (or no longer waited for)."""


@contextlib.contextmanager
def holding(folders: list[str | Path],
            wait_while: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold the lock of each folder (created if missing) while the body runs; a folder this
    created and that is still empty at the end is removed again (an invalid run writes nothing).
    A folder another trainer holds is refused (``FolderHeld``); with ``wait_while``, waited
    for (said once), as long as ``wait_while()`` is True, then refused. The folders are locked in
    sorted order, so two trainers waiting for each other's folders cannot both wait forever."""
    with contextlib.ExitStack() as stack:
        for folder in sorted({str(f) for f in folders}):
            stack.enter_context(_locked(Path(folder), wait_while))
        yield


@contextlib.contextmanager
def _locked(folder: Path, wait_while: Callable[[], bool] | None) -> Iterator[None]:
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    path = folder / LOCK
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _lock(folder, path, wait_while)
    except OSError as err:
        raise RunFolderError(f"{folder}: cannot write the run folder ({err.strerror or err}); "
                             "give the trainer a folder it can write (--out)") from err
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: a trainer that opens it after this locks a new file
        os.close(fd)
        for p in created:  # leaf first; stops at the first one holding something
            try:
                p.rmdir()
            except OSError:
                break


def _lock(folder: Path, path: Path, wait_while: Callable[[], bool] | None) -> int:
    """The locked lock file's descriptor, with this process's id in it."""
    said = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            if wait_while is not None and wait_while():
                if not said:
                    print(f"{folder} is being written by another trainer ({who}); waiting for it "
                          "to end", flush=True)
                    said = True
                time.sleep(WAIT_POLL_S)
                continue
            raise FolderHeld(f"{folder} is being written by another trainer ({who}); wait for "
                                 f"it to end or stop it{f' (kill {holder})' if holder else ''}, "
                                 "then rerun") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed it as it ended, after this opened it: lock the new one
    previous = _pid(fd)
    if previous and previous != os.getpid():
        print(f"{folder}: took over the lock left by process {previous}, which no longer holds it "
              "(stopped or killed)", flush=True)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _pid(fd: int) -> int | None:
    """The process id a lock file holds (None: none yet, or not a number)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


@contextlib.contextmanager
def writing(path: Path) -> Iterator[Path]:
    """Yield ``<path>.tmp`` to write; renamed to ``path`` when the body ends (atomic: a kill leaves
    the previous file intact). An OSError becomes one line naming ``path``; no ``.tmp`` is left."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if err.errno == errno.ENOSPC:
            raise RunFolderError(f"{path}: no space left on device; free some space and rerun the "
                                 "same command (a run resumes from its last checkpoint)") from err
        raise RunFolderError(f"{path}: cannot write it ({err.strerror or err})") from err


def temporary_file(folder: str | Path, prefix: str, suffix: str) -> Path:
    """A new empty file in ``folder`` with a unique name, to be renamed over the real one, with the
    permissions ``open`` gives a file under the umask (mkstemp's are 0600: a renamed file would
    keep them, unreadable to the group)."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        umask = os.umask(0o077)  # read it back at once: Python has no os.getumask
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
    finally:
        os.close(fd)
    return Path(name)
