"""A real full disk for one test: a small tmpfs, mounted on a folder and filled to leave a
chosen free space, so that a tool's write fails with ENOSPC as it would on a full volume.

Mounting needs root (the CI container runs as root); elsewhere the test is skipped with the
reason. A tmpfs counts whole pages (4 KiB): a file of a few bytes (a lock file) takes one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096


@contextlib.contextmanager
def tmpfs(directory: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of `size` mounted on `directory` (made) while inside; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a real full disk) needs root")
    directory.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)]
    done = subprocess.run(mount, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], check=True)  # a file still open


def free(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def fill(directory: Path, leave: int) -> Path:
    """Write a filler file so that `leave` bytes (whole pages) stay free."""
    filler = directory / "filler"
    with open(filler, "ab") as out:
        out.write(b"\0" * max(0, free(directory) - leave))
    assert free(directory) == leave, (free(directory), leave)
    return filler
