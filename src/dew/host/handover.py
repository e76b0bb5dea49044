"""`handover.py hand-over UID:GID DIR... -- ENGINE RUN ...`: lend the directories a
container writes into to the image's user for the run, run it, then give everything it
wrote back to the caller (runner.run_argv puts it in front of the engine's command for a
root caller). It stands in for the engine's client: a stop signal sent to it goes on to
the client, which passes it into the container, and it stops the run when the session
that started it dies, even by kill -9, so a stopped session leaves no container running.

Run as a script: standard library only, importing nothing of dew.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def _chown_tree(top: Path, frm: int, to: tuple[int, int], dirs_only: bool) -> None:
    """lchown what `frm` owns under `top` (symlinks are not followed)."""
    for folder, subdirs, files in os.walk(top):
        # os.walk does not descend into a linked directory: the link itself is chowned.
        links = [d for d in subdirs if os.path.islink(os.path.join(folder, d))]
        names = [folder] + ([] if dirs_only else [os.path.join(folder, f) for f in files + links])
        for name in names:
            try:
                if os.lstat(name).st_uid == frm:
                    os.chown(name, *to, follow_symlinks=False)
            except OSError:
                pass


def hand_over(argv: Sequence[str]) -> int:
    """`handover.py hand-over UID:GID DIR... -- ENGINE RUN ...`: lend the directories to the
    image's user for the run, run it, then give everything it wrote back to the caller."""
    owner, *rest = argv
    split = rest.index("--")
    dirs, command = [Path(d) for d in rest[:split]], rest[split + 1 :]
    uid, gid = (int(part) for part in owner.split(":"))
    caller = (os.getuid(), os.getgid())
    for folder in dirs:
        _chown_tree(folder, caller[0], (uid, gid), dirs_only=True)
    try:
        return run_tied(command)
    finally:
        for folder in dirs:
            _chown_tree(folder, uid, caller, dirs_only=False)


def run_tied(command: Sequence[str]) -> int:
    """Run the engine's command to its end, passing SIGTERM and SIGINT on to it. The engine
    client (podman, docker: --sig-proxy is on by default) hands them to the container,
    whose tool writes what it has and stops; waiting for that, rather than killing the
    client, is what keeps both the rows and the container's end. (A Ctrl-C reaches the
    client from the terminal too; the tool takes the first stop signal and ignores a
    second.)"""
    arrived: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum: int, _frame) -> None:
        arrived.append(signum)
        if child:
            child[0].send_signal(signum)

    before = {number: signal.signal(number, forward) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        child.append(subprocess.Popen(command))
        if arrived:  # a signal before the client existed
            child[0].send_signal(arrived[0])
        return child[0].wait()
    finally:
        for number, previous in before.items():
            signal.signal(number, previous)


def stop_with_parent() -> None:
    """Have Linux send this process SIGTERM when its parent (the nox session) dies, however
    it dies; a parent already gone (re-parented to init) counts as dead."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    if sys.argv[1:2] == ["hand-over"]:
        stop_with_parent()
        sys.exit(hand_over(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} hand-over UID:GID DIR... -- COMMAND...")
