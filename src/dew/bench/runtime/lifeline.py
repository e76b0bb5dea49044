"""A child process's tie to the run that started it: a `kill -9` of the run must not leave
a child computing (and holding the GPU).

One mechanism for every child (a case's, forked from the forkserver; a loader repeat's and
the device probe, started by the run itself): its end of dew.bench.runtime.protocol
(ToParent) starts a thread that waits on a pidfd of the run's process and ends this process
when that one ends. Not PR_SET_PDEATHSIG: it follows the parent, which for a case's
child is the forkserver, not the run, and the parent *thread*, not its process.
"""

from __future__ import annotations

import os
import select
import threading


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
