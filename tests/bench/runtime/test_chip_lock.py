"""A second program that finds the TPU held gets one line naming the holder
(dew.bench.runtime.chip_lock): libtpu's own refusal names nobody. The holder here is a real
process with a file of libtpu's lockfile's name open; /proc is read as it is."""

from __future__ import annotations

import subprocess
import sys
import time

from dew.bench.runtime import chip_lock

REFUSAL = "RuntimeError: Internal error when accessing libtpu multi-process lockfile"


def test_the_holder_of_the_chip_is_named(tmp_path):
    lockfile = tmp_path / chip_lock.LOCKFILE_NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(lockfile)!r}, 'w'); import time; time.sleep(60)"]
    )
    try:
        for _ in range(100):  # until it has the file open
            if any(pid == holder.pid for pid, _ in chip_lock.holders()):
                break
            time.sleep(0.05)
        line = chip_lock.held_line(f"...\n{REFUSAL}\n")
        assert line.startswith(f"the TPU is held by pid {holder.pid}: ")
        assert " -c f = open(" in line and "\n" not in line  # its command line, cut at 120
    finally:
        holder.kill()
        holder.wait()
    assert "none of them in this host's view" in chip_lock.held_line(REFUSAL)


def test_other_failures_are_not_read_as_a_held_chip():
    assert chip_lock.held_line("Unknown flag in XLA_FLAGS: --xla_nonsense") is None
