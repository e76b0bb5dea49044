"""The host-speed probe (dew.bench.runtime.hostprobe): it must read slower while real processes
compete for the cores, and its command line prints one reading or one error line."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dew.bench.runtime import hostprobe


def test_the_probe_reads_slower_while_busy_processes_compete_for_the_cores():
    idle = hostprobe.measure()
    # Twice as many spinning processes as cores: each probe thread gets about a third of a
    # core on a 2-core host, so the reading should grow ~3x; 1.4x leaves room for a noisy host.
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * hostprobe.cores())
    ]
    try:
        time.sleep(0.5)  # let them start spinning (the interpreter's start-up is not load)
        busy = hostprobe.measure()
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
    idle = min(idle, hostprobe.measure())  # the quieter of the readings before and after
    assert busy > 1.4 * idle, f"busy {busy:.1f} ms vs idle {idle:.1f} ms"


def test_a_burst_is_a_fixed_amount_of_work_timed_in_ms():
    readings = [hostprobe.burst(1) for _ in range(3)]
    assert all(0 < reading < 60_000 for reading in readings)
    # More threads than cores: the same work per thread, queued, takes longer.
    assert hostprobe.burst(4 * hostprobe.cores()) > min(readings)


def test_the_command_prints_one_reading(capsys):
    assert hostprobe.main(["--bursts", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("host probe: ") and " ms (median of 1 bursts" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bursts", "0"], "--bursts must be at least 1 (got 0)"),
        (["--bursts", "many"], "--bursts"),
        (["--fast"], "unrecognized argument --fast"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(capsys, argv, message):
    assert hostprobe.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{hostprobe.PROG}: error: ") and err.count("\n") == 1
    assert message in err
