"""A memory cgroup made for one test or fault run: a command runs inside it under a limit
(what a container, SLURM or systemd sets: past it the kernel's OOM killer ends the largest
process with SIGKILL), and it is removed afterwards. Root and a writable memory controller
only; skipped otherwise (pytest.skip, which scripts/faults.py reads as "not here")."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


def _memory_controller() -> tuple[Path, str, str | None] | None:
    """(where cgroups are made, the limit's file, the swap limit's file), or None."""
    v2 = Path("/sys/fs/cgroup")
    if "memory" in _read(v2 / "cgroup.subtree_control").split():
        return v2, "memory.max", "memory.swap.max"
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists():
        return v1, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class MemoryCgroup:
    """A memory cgroup made for a test: `argv` runs a command inside it, `left()` lists
    the processes still in it."""

    def __init__(self, group: Path):
        self.procs = group / "cgroup.procs"
        self.argv = ["sh", "-c", f'echo $$ > {self.procs} && exec "$@"', "sh"]

    def left(self, wait_s: float = 10.0) -> list[int]:
        """Its processes once none is left, or after `wait_s` (a helper of the run, such as
        multiprocessing's resource tracker, ends on its own just after the run)."""
        waited = time.monotonic() + wait_s
        while (pids := [int(pid) for pid in _read(self.procs).split()]) and (
            time.monotonic() < waited
        ):
            time.sleep(0.1)
        return pids


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[MemoryCgroup]:
    """A memory cgroup of `limit` bytes (no swap beyond it), removed afterwards. Skips the
    test where none can be made (not root, no memory controller, read-only)."""
    found = _memory_controller()
    if found is None:
        pytest.skip("no memory cgroup controller here")
    root, limit_file, swap_file = found
    group = root / f"dew-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    cgroup = MemoryCgroup(group)
    try:
        if swap_file and (group / swap_file).exists():  # out of memory, not into swap
            (group / swap_file).write_text("0" if swap_file == "memory.swap.max" else str(limit))
        yield cgroup
    finally:
        for pid in cgroup.left():  # none, unless a test failed
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        cgroup.left()  # killed: gone within moments, then the group can go
        with contextlib.suppress(OSError):
            group.rmdir()
