"""A child process's tie to the run that started it: a `kill -9` of the run must not leave
a child computing (and holding the GPU).

One mechanism for every child (a case's, forked from the forkserver; a loader repeat's and
the device probe, started by the run itself): its end of dew.bench.runtime.protocol
(ToParent) starts a thread that waits on a pidfd of the run's process and ends this process
when that one ends. Not PR_SET_PDEATHSIG: it follows the parent, which for a case's
child is the forkserver, not the run, and the parent *thread*, not its process.

The tie acts only once the run has ended, and not on a stopped child (SIGSTOP: it runs no
thread until continued). A run that stops on purpose (a stop signal, a failed write) ends
its children itself first: `end_descendants`.
"""

from __future__ import annotations

import os
import select
import threading
import time


def exit_with(pid: int) -> None:
    """End this process when process `pid` (the run's) ends; nothing runs until then."""
    try:
        watched = os.pidfd_open(pid)
    except ProcessLookupError:  # it has ended already
        os._exit(1)
    except (AttributeError, OSError):  # not Linux 5.3 or later: the child outlives a kill -9
        return

    def wait() -> None:
        select.select([watched], [], [])
        os._exit(1)

    threading.Thread(target=wait, name="exit with the run", daemon=True).start()


def end_descendants(pid: int, wait_s: float = 10.0) -> list[int]:
    """Kill every process under `pid` (its children, theirs, ...) with SIGKILL, a stopped
    one included, and wait up to `wait_s` until each is gone (its parent reaps it; this
    process reaps nothing). Returns the pids killed."""
    import psutil  # the run's own dependency; a child importing this module needs it not

    try:
        processes = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + wait_s
    while any(_alive(process) for process in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [process.pid for process in processes]


def _alive(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
