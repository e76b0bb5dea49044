"""Whether a process has ended, for the tests that check a run leaves none behind."""

from __future__ import annotations

import time

import psutil


def gone(pid: int, within_s: float = 0.0) -> bool:
    """Whether `pid` has ended (a zombie counts: its parent has yet to reap it), waiting up
    to `within_s` for it, e.g. for a SIGKILL to land."""
    waited = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= waited:
            return False
        time.sleep(0.05)
