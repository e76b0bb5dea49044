"""A round of the step benchmark: cases compiled in parallel, then timed one at a time.

Most of a cold sweep is XLA compiling, and a compile uses about one core; the timed windows
need the host to themselves. So a round runs in waves of child processes
(dew.bench.sweep.case_process.CaseProcess):

    compile stage   up to `jobs` children at once import, lower, compile and initialise
                    their case, then wait, each holding its own process and memory;
    time stage      once none is compiling, the waiting children are timed one after
                    another, alone on the host, each printing its row; then the next wave.

A wave holds at most WAVE_PER_JOB x `jobs` cases, the round split into waves of equal
size (18 cases, 2 jobs: two waves of 9, not 16 and 2: a wave's last compiles run with the
other cores idle, so even waves waste less; one wave of 18 spent more CPU than two of 9,
docs/performance.md); it ends early when the free memory
would not hold one more waiting child (MIN_FREE_BYTES, or twice the largest waiting one).
With one job a wave is one case: compiled, then timed, as a sweep always ran. No compile
runs during a timed window: the phases' wall-clock starts in the record show it
(dew.bench.runtime.phases.overlaps).

Why not compile into the persistent cache and time each case from it in a fresh process?
That starts, imports and lowers every case twice, needs the cache on (repeats are fresh
compiles with it off), and the timed process would not know its real compile time. Here
the process that compiled is the one that is timed, so the row keeps its compile time and
its allocator peak.

On a GPU the default is one job (dew.bench.sweep.step_command): concurrent compiles autotune their
kernels concurrently on the one device, which can change the kernels chosen, and every
waiting process holds device memory (JAX preallocates 75% of it per process).
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep.case_process import CaseProcess
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import Result
from dew.bench.sweep.settings import Options

WAVE_PER_JOB = 8  # children that may wait, compiled, per compile job
MIN_FREE_BYTES = 2 * 1024**3

Waiting = tuple[int, Case, CaseProcess, float]  # (position, case, its child, compile seconds)


def run_round(
    items: Sequence[tuple[int, Case]],
    options: Options,
    jobs: int,
    progress: SilentProgress | None = None,
    before_timing: Callable[[], None] = lambda: None,
) -> Iterator[Result]:
    """Run the cases `items` ((position, case) pairs) once each, in waves, yielding every
    result as it is known: a case that fails to compile as soon as it fails, the others
    after their timed windows, in the order of `items`. `before_timing` runs before each
    time stage, when nothing compiles (the step benchmark reads the host's speed there).
    `progress` hears every stage and phase (dew.bench.runtime.progress; silent by default).
    Closing the generator early (an error where its results go, Ctrl-C) kills the
    children it holds."""
    progress = progress or SilentProgress()
    pending = list(items)
    size = wave_size(len(pending), jobs)
    waiting: list[Waiting] = []
    timing: CaseProcess | None = None  # the case being timed
    try:
        while pending:
            waiting = yield from _compile_stage(pending, options, jobs, size, progress)
            progress.stage("time", [position for position, *_ in waiting])
            if waiting:
                before_timing()
            while waiting:
                position, case, timing, compile_seconds = waiting.pop(0)
                progress.set(position, "timing")
                start = time.perf_counter()
                row = timing.go()
                timing = None
                yield Result(position, case, row, compile_seconds + time.perf_counter() - start)
    finally:  # an error, Ctrl-C or a generator closed: no child outlives the round
        for *_, child, _ in waiting:  # (and each keeps its log)
            child.kill()
        if timing is not None:
            timing.kill()


def wave_size(cases: int, jobs: int) -> int:
    """Cases per wave: at most WAVE_PER_JOB x jobs, the round split evenly; 1 for one job."""
    if jobs == 1 or cases == 0:
        return 1
    waves = math.ceil(cases / (jobs * WAVE_PER_JOB))
    return math.ceil(cases / waves)


def _compile_stage(
    pending: list[tuple[int, Case]],
    options: Options,
    jobs: int,
    limit: int,
    progress: SilentProgress,
) -> Iterator[Result]:
    """Start children from `pending` (consumed) until `limit` are in the wave; yield the
    result of a child that ended early; return the ones compiled and waiting, in case
    order."""
    ready: list[Waiting] = []
    running: dict[concurrent.futures.Future, Waiting] = {}
    progress.stage("compile", [position for position, _ in pending[:limit]], parallel=jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while pending or running:
                while (
                    pending
                    and len(running) < jobs
                    and len(ready) + len(running) < limit
                    and room_for_another([child for *_, child, _ in ready])
                ):
                    position, case = pending.pop(0)
                    child = CaseProcess(case, options)  # forked: starts in milliseconds
                    progress.set(position, "compiling")
                    running[pool.submit(child.wait_ready)] = (
                        position,
                        case,
                        child,
                        time.perf_counter(),
                    )
                if not running:
                    break  # the wave is full
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    position, case, child, start = running.pop(future)
                    seconds = time.perf_counter() - start
                    if future.result():
                        progress.set(position, "compiled, waiting")
                        progress.finish(position, None)  # its compile stage is over
                        ready.append((position, case, child, seconds))
                    else:  # it ended before its turn: a failed row (or a compile-only one)
                        yield Result(position, case, child.go(), seconds)
        except BaseException:  # GeneratorExit too: the round was closed while compiling
            for *_, child, _ in [*ready, *running.values()]:
                child.kill()
            raise
    return sorted(ready, key=lambda item: item[0])


def room_for_another(waiting: Iterable[Any]) -> bool:
    """Whether the host's free memory holds one more compiled, waiting child (or one more
    compiling process: `waiting` are children with a pid, a CaseProcess or a protocol.Child)."""
    import psutil

    largest = 0
    for child in waiting:
        try:
            largest = max(largest, psutil.Process(child.pid).memory_info().rss)
        except psutil.Error:  # it just exited: it holds nothing
            continue
    return psutil.virtual_memory().available > max(MIN_FREE_BYTES, 2 * largest)
