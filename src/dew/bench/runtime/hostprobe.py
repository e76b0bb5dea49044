"""How fast is this host right now? A fixed CPU workload, timed, before cases are timed.

Why it exists: two runs of the same commit a few minutes apart on a shared VM read 10-15%
apart (the A/A test of issue 17: uvit 0.878 [0.721, 0.924], every repeat of one run
slower than every repeat of the other), because the host itself ran faster during the
second run. The statistics of one record cannot tell such drift between two runs from a
change of the code. So each time stage of the step benchmark (dew.bench.sweep.waves: the cases
compiled and waiting, timed one after another) and each repeat of the loader is
preceded by `measure()`, recorded as the repeat's `host_probe_ms`, and
`dew.bench.analysis.compare_command` holds a row's change against the drift of the probe
between the two records (dew.bench.analysis.stats.drift): a change the host's own drift
explains is `undecided`.

The workload: one thread per core this process may run on (`cores()`), each hashing the
same BUFFER `CHUNKS` times with hashlib.sha256 (which releases the GIL on buffers this
large, so the threads run in parallel), from a common start to the last one's end; that
is one burst, and the reading is the median wall ms of BURSTS bursts, so one hiccup (a
page-in, a scheduler tick) does not decide it. About 0.3 s in all on the 2-core
development VM. It uses neither jax nor numpy: the probe must not change when the stack
under test does (it does depend on the Python build's OpenSSL, which a stack change of
Python itself would also change: the stack differences of compare show that).

What it sees: the speed the CPU cores give this process now: steal time from other guests
on a shared VM, other processes competing for the cores, frequency scaling and thermal
limits of the CPU. What it cannot see: a GPU's clocks or its other tenants, memory
bandwidth beyond the caches (the buffer fits in L2), the disk. On a GPU host it reads the
host CPU only; compare applies the same rule there (a verdict must also clear the band
around the probe's drift), which is conservative: a CPU drift that did not reach a
GPU-bound step can make a real change `undecided`, never the reverse. The GPU's own
clocks and throttle reasons are the NVML readings of the step row (`gpu`, --gpu-check).

`python -m dew.bench.runtime.hostprobe [--bursts N]` prints one reading; exit 2 on bad flags.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence

from dew.bench.common import cli

PROG = "python -m dew.bench.runtime.hostprobe"
BUFFER = bytes(range(256)) * 1024  # 256 KiB: fits in L2, large enough to release the GIL
CHUNKS = 400  # per thread and burst: ~60 ms on the development VM (SHA-NI cores)
BURSTS = 5


def cores() -> int:
    """The logical cores this process may run on (its affinity; else all of the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def burst(threads: int) -> float:
    """Wall ms for `threads` threads, started together, each to hash the buffer CHUNKS times."""
    ready = threading.Barrier(threads + 1)

    def work() -> None:
        ready.wait()
        digest = hashlib.sha256()
        for _ in range(CHUNKS):
            digest.update(BUFFER)
        digest.digest()

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    ready.wait()  # the last to arrive: every worker starts now
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return (time.perf_counter() - start) * 1e3


def measure(bursts: int = BURSTS) -> float:
    """The host-speed reading: the median wall ms of `bursts` bursts over every core."""
    threads = cores()
    return statistics.median(burst(threads) for _ in range(bursts))


# --- the command line --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Time the fixed CPU workload the benchmarks record before timing (host_probe_ms)."""

    bursts: int = BURSTS
    """bursts whose median is the reading (>= 1)"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _probe(cli.parse(Args, argv, prog=PROG)))


def _probe(args: Args) -> int:
    if args.bursts < 1:
        raise cli.UsageError(f"--bursts must be at least 1 (got {args.bursts})")
    reading = measure(args.bursts)
    print(
        f"host probe: {reading:.1f} ms (median of {args.bursts} bursts; each "
        f"{cores()} threads x {CHUNKS} x {len(BUFFER) // 1024} KiB sha256)"
    )
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
