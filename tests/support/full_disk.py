"""A directory whose files a test can stop from growing, as on a full disk, and let grow again.

``small_disk`` (function fixture) gives a :class:`SmallDisk`. How the disk fills up depends on
what the machine allows, found out at set-up (``STACK_TEST_FULL_DISK=tmpfs|rlimit`` forces one):

- ``tmpfs`` (needs root, as in CI and on this machine): a 4 MiB tmpfs mounted on the directory;
  ``fill()`` writes a filler file into every free byte, so the next write that needs space
  fails with ENOSPC (SQLite: SQLITE_FULL, "database or disk is full"); ``free()`` deletes it.
- ``rlimit`` (anyone): the process's RLIMIT_FSIZE set to the size of the largest file in the
  directory, so the next write past it fails with EFBIG (SQLite: "disk I/O error"; Python
  ignores the SIGXFSZ that comes with it); ``free()`` lifts the limit. The limit applies to every
  file the process writes, its log too, which may lose lines meanwhile.

Either way the failure is a real write error from the kernel, under a real process; nothing is
mocked. The directory is unmounted at the end.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = "4m"
FILLER = "filler"


class SmallDisk:
    def __init__(self, path: Path, mechanism: str) -> None:
        self.path = path
        self.mechanism = mechanism
        self._limited: int | None = None  # the process under RLIMIT_FSIZE

    def fill(self, pid: int) -> None:
        """From now on, files in the directory cannot grow (for ``pid``, with ``rlimit``)."""
        if self.mechanism == "tmpfs":
            size = 64 * 1024
            with open(self.path / FILLER, "wb", buffering=0) as filler:
                while size:  # smaller and smaller writes, down to the last byte
                    try:
                        filler.write(b"\0" * size)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        size //= 2
        else:
            largest = max(entry.stat().st_size for entry in self.path.iterdir() if entry.is_file())
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (largest, resource.RLIM_INFINITY))
            self._limited = pid

    def free(self) -> None:
        """Space again: the filler deleted, or the limit lifted."""
        if self.mechanism == "tmpfs":
            (self.path / FILLER).unlink()
        elif self._limited is not None:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(self._limited, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            self._limited = None


def _mount_tmpfs(path: Path) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    path = tmp_path / "small-disk"
    path.mkdir()
    wanted = os.environ.get("STACK_TEST_FULL_DISK", "auto")
    assert wanted in ("auto", "tmpfs", "rlimit"), f"STACK_TEST_FULL_DISK={wanted}: auto, tmpfs or rlimit"
    mounted = wanted != "rlimit" and _mount_tmpfs(path)
    if wanted == "tmpfs" and not mounted:
        pytest.fail("STACK_TEST_FULL_DISK=tmpfs, but mounting a tmpfs failed (it needs root)", pytrace=False)
    disk = SmallDisk(path, "tmpfs" if mounted else "rlimit")
    try:
        yield disk
    finally:
        if disk.mechanism == "rlimit":
            disk.free()
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
