"""Who holds the TPU. libtpu lets one process at a time open the chip, through a lockfile
(`libtpu_lockfile` in the temporary folder); a second process fails with "Internal error
when accessing libtpu multi-process lockfile" (libtpu 0.0.42), which names nobody. This
finds the holder (the processes that have the lockfile open, from /proc) and says it in
one line."""

from __future__ import annotations

import os
from pathlib import Path

LOCKFILE_NAME = "libtpu_lockfile"
REFUSALS = ("libtpu multi-process lockfile", "TPU is already in use")


def refused(text: str) -> bool:
    """Whether `text` (a process's output) says the chip was held by another process."""
    return any(refusal in text for refusal in REFUSALS)


def holders(proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of every process here with libtpu's lockfile open."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            if any(Path(link).name == LOCKFILE_NAME for link in links):
                words = (entry / "cmdline").read_bytes().split(b"\0")
                found.append(
                    (int(entry.name), " ".join(w.decode(errors="replace") for w in words if w))
                )
        except OSError:  # gone, or not ours to read
            continue
    return sorted(found)


def held_line(text: str) -> str | None:
    """One line naming the chip's holder where `text` says the chip was held; else None."""
    if not refused(text):
        return None
    found = holders()
    if not found:
        return (
            "the TPU is held by another process (libtpu's lockfile), none of them in this "
            "host's view (another container's?): one process at a time can hold the chip"
        )
    named = "; ".join(f"pid {pid}: {command[:120]}" for pid, command in found)
    return (
        f"the TPU is held by {named}; one process at a time can hold the chip: wait for it "
        "to end, or stop it"
    )
