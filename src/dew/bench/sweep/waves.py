"""A round of the step benchmark, scheduled once for every executor that runs its cases
in processes: cases compiled in parallel, then timed one at a time.

Most of a cold sweep is XLA compiling, and a compile uses about one core; the timed windows
need the host to themselves. So a round runs in two stages:

    compile stage   up to `jobs` cases compile at once, each in a process of its own, while
                    the host's free memory holds another (room_for_another); a case that
                    fails there is a failed row at once;
    time stage      once none is compiling, the compiled cases are timed one after another,
                    alone on the host, each yielding its row.

A strategy (`Strategy`) says only how a case compiles and where its program waits:

    Isolated (dew.bench.sweep.executors)    a case's own process forked from the server
                    (dew.bench.sweep.case_process.CaseProcess) compiles it and waits, holding
                    the program, for its turn; in waves, one after another: compile stage,
                    then time stage
    HeldChip (dew.bench.sweep.chip.rounds)  a process of its own compiles it without the
                    chip and saves the program to a folder, once per run; each round one
                    process holding the chip loads and times them all

A wave of the isolated path holds at most WAVE_PER_JOB x `jobs` cases, the round split into
waves of equal size (18 cases, 2 jobs: two waves of 9, not 16 and 2: a wave's last compiles
run with the other cores idle, so even waves waste less; one wave of 18 spent more CPU than
two of 9, docs/performance.md); it ends early when the free memory would not hold one more
waiting child (MIN_FREE_BYTES, or twice the largest waiting one). With one job a wave is
one case: compiled, then timed, as a sweep always ran. No compile runs during a timed
window: the phases' wall-clock starts in the record show it
(dew.bench.runtime.phases.overlaps).

Why not compile into the persistent cache and time each case from it in a fresh process?
That starts, imports and lowers every case twice, needs the cache on (repeats are fresh
compiles with it off), and the timed process would not know its real compile time. Here
the process that compiled is the one that is timed, so the row keeps its compile time and
its allocator peak. (A TPU cannot do that: one process at a time may hold it.)

On a GPU the default is one job (dew.bench.sweep.step_command): concurrent compiles autotune their
kernels concurrently on the one device, which can change the kernels chosen, and every
waiting process holds device memory (JAX preallocates 75% of it per process).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from dew.bench.record.schema import StepRow
from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep.case_run import profile_name
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import Result

WAVE_PER_JOB = 8  # children that may wait, compiled, per compile job
MIN_FREE_BYTES = 2 * 1024**3


@dataclasses.dataclass
class Waiting:
    """A compiled case waiting for its turn to be timed."""

    position: int
    case: Case
    program: Any  # where its program waits: the strategy's (its process, or a saved program)
    seconds: float  # its compile's wall clock in this round (0: compiled in an earlier one)


class Compiling(Protocol):
    """A case's compile under way in a process of its own."""

    @property
    def pid(self) -> int: ...

    def wait(self) -> Any:
        """Block (in a pool's thread) until it is compiled or has ended: its answer."""
        ...

    def kill(self) -> None: ...


class Strategy(Protocol):
    """How a case compiles and where its program waits (the module docstring)."""

    def start(self, position: int, case: Case) -> Compiling:
        """Begin the case's compile."""
        ...

    def after_compile(self, position: int, case: Case, compiling: Compiling, answer: Any) -> Any:
        """(the round's thread) What a compile's `answer` leaves: its program, waiting, or a
        StepRow: the case ended there (failed, or compile-only)."""
        ...

    def room(self, ready: Sequence[Waiting], running: Sequence[Compiling]) -> bool:
        """Whether another compile may start beside these."""
        ...

    def open(self, left: Sequence[Waiting]) -> str | None:
        """Before each case's turn: what times it is ready (None), or why it cannot be, which
        fails every case `left`."""
        ...

    def time(self, waiting: Waiting) -> StepRow:
        """Its turn: the case timed, its row."""
        ...

    def failed(self, waiting: Waiting, error: str) -> StepRow: ...

    def kill(self, program: Any) -> None:
        """End a waiting program's process, if it has one (the round ends early)."""
        ...

    def close(self) -> None:
        """The time stage is over."""
        ...


def run_round(
    items: Sequence[tuple[int, Case]],
    strategy: Strategy,
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
    while pending:
        waiting = yield from compile_stage(pending, strategy, jobs, size, progress)
        yield from time_stage(waiting, strategy, progress, before_timing)


def wave_size(cases: int, jobs: int) -> int:
    """Cases per wave: at most WAVE_PER_JOB x jobs, the round split evenly; 1 for one job."""
    if jobs == 1 or cases == 0:
        return 1
    waves = math.ceil(cases / (jobs * WAVE_PER_JOB))
    return math.ceil(cases / waves)


def compile_stage(
    pending: list[tuple[int, Case]],
    strategy: Strategy,
    jobs: int,
    limit: int,
    progress: SilentProgress,
) -> Iterator[Result]:
    """Start compiles from `pending` (consumed) until `limit` are in the wave; yield the
    result of a case that ended there; return the ones compiled and waiting, in case
    order."""
    ready: list[Waiting] = []
    running: dict[concurrent.futures.Future, tuple[int, Case, Compiling, float]] = {}
    progress.stage("compile", [position for position, _ in pending[:limit]], parallel=jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while pending or running:
                while (
                    pending
                    and len(running) < jobs
                    and len(ready) + len(running) < limit
                    and strategy.room(ready, [compiling for *_, compiling, _ in running.values()])
                ):
                    position, case = pending.pop(0)
                    compiling = strategy.start(position, case)
                    progress.set(position, "compiling")
                    began = time.perf_counter()
                    running[pool.submit(compiling.wait)] = (position, case, compiling, began)
                if not running:
                    break  # the wave is full
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    position, case, compiling, start = running.pop(future)
                    seconds = time.perf_counter() - start
                    program = strategy.after_compile(position, case, compiling, future.result())
                    if isinstance(program, StepRow):  # it ended: a failed or compile-only row
                        yield Result(position, case, program, seconds)
                    else:
                        progress.set(position, "compiled, waiting")
                        progress.finish(position, None)  # its compile stage is over
                        ready.append(Waiting(position, case, program, seconds))
        except BaseException:  # GeneratorExit too: the round was closed while compiling
            for item in ready:
                strategy.kill(item.program)
            for *_, compiling, _ in running.values():
                compiling.kill()
            raise
    return sorted(ready, key=lambda item: item.position)


def time_stage(
    waiting: Sequence[Waiting],
    strategy: Strategy,
    progress: SilentProgress,
    before_timing: Callable[[], None],
) -> Iterator[Result]:
    """Time the `waiting` cases one after another, in that order, yielding each result."""
    if not waiting:
        return
    progress.stage("time", [item.position for item in waiting])
    before_timing()
    left, timing = list(waiting), None  # timing: the case being timed
    try:
        while left:
            error = strategy.open(left)
            if error is not None:  # nothing can time them
                for item in left:
                    row = strategy.failed(item, error)
                    yield Result(item.position, item.case, row, item.seconds)
                left = []
                break
            timing = left.pop(0)
            progress.set(timing.position, "timing")
            start = time.perf_counter()
            row = strategy.time(timing)
            done, timing = timing, None
            yield Result(done.position, done.case, row, done.seconds + time.perf_counter() - start)
    finally:  # an error, Ctrl-C or a generator closed: no child outlives the round
        for item in [timing, *left] if timing else left:  # (and each keeps its log)
            strategy.kill(item.program)
    strategy.close()


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


def keep_log(directory: str, case: Case | str) -> str:
    """A new, empty file for a log in `directory`: `<case>-<n>.log` (a case's), or
    `<name>-<n>.log` for another process's, n the first number free (created
    exclusively: cases compiling at once never share one)."""
    os.makedirs(directory, exist_ok=True)
    stem = case if isinstance(case, str) else profile_name(case)
    number = 1
    while True:
        path = os.path.join(directory, f"{stem}-{number}.log")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return path
        except FileExistsError:
            number += 1


def move_log(log: str, directory: str, case: Case | str) -> str | None:
    """A child's ended `log` moved into `directory` (keep_log's name): its new path, or None
    where it could not be moved (a full disk: it stays where it was written)."""
    kept = None
    try:
        kept = keep_log(directory, case)
        shutil.move(log, kept)
    except OSError:
        if kept is not None:
            with contextlib.suppress(OSError):
                os.unlink(kept)
        return None
    return kept
