"""How a round's cases run: three executors, each yielding a result per case as it comes.

    InProcess     --no-isolate: every case in this process, one after another
                  (dew.bench.sweep.case_run.run_case)
    Isolated      every case in a fresh process of its own (dew.bench.sweep.case_process),
                  scheduled in waves: up to --compile-jobs compile at once, then they are
                  timed one at a time (dew.bench.sweep.waves)
    HeldChip      a TPU: the cases compiled without the chip, side by side, then timed in
                  one process per round that holds it (dew.bench.sweep.chip)
    MultiProcess  a cluster joined (dew.train.distributed): every process runs every case
                  in-process; each row is made from all processes' figures
                  (dew.bench.multihost.combine)

The run (dew.bench.sweep.run) consumes the results; an executor knows nothing of the
record. `stop` ends whatever processes the executor started, when a run ends early.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import forkserver
from typing import Any, Protocol

from dew import platforms
from dew.bench.multihost.combine import gather_row
from dew.bench.record.schema import Devices, StepRow
from dew.bench.runtime.lifeline import end_descendants
from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep import waves
from dew.bench.sweep.case_process import CaseProcess, stop_forkserver
from dew.bench.sweep.case_run import make_row, run_case
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import Result
from dew.bench.sweep.settings import Options

Todo = Sequence[tuple[int, Case]]  # (position in the run's cases, case): a round's work


class Executor(Protocol):
    def round(
        self, todo: Todo, round_index: int, before_timing: Callable[[], None]
    ) -> Iterator[Result]:
        """Run every case of `todo` once, yielding each result as it is known;
        `before_timing` runs before the cases are timed, when nothing compiles."""
        ...

    def stop(self) -> None:
        """End every process this executor started (the run stops early)."""
        ...


class InProcess:
    """Every case in this process, compiled and timed one after another."""

    def __init__(self, options: Options, progress: SilentProgress):
        self.options, self.progress = options, progress

    def round(
        self, todo: Todo, round_index: int, before_timing: Callable[[], None]
    ) -> Iterator[Result]:
        if todo:
            before_timing()
        for position, case in todo:
            self.progress.stage("run", [position])
            self.progress.set(position, "compiling and timing")
            start = time.perf_counter()
            row = self.measure(case, position, round_index)
            yield Result(position, case, row, time.perf_counter() - start)

    def measure(self, case: Case, position: int, round_index: int) -> StepRow:
        return run_case(case, self.options)

    def stop(self) -> None:  # nothing of its own to end
        pass


class MultiProcess(InProcess):
    """Every process of a cluster times every case in-process; the row combines them all
    (the slowest process's timings, the spread), the same row in every process."""

    def measure(self, case: Case, position: int, round_index: int) -> StepRow:
        return gather_row(run_case(case, self.options), f"row/{round_index}/{position + 1}")


class Isolated:
    """Every case in a fresh process forked from the forkserver, in waves of
    `options.compile_jobs` concurrent compiles, each timed alone: the round scheduler's
    strategy (dew.bench.sweep.waves) where a case's program waits in the process that
    compiled it."""

    def __init__(self, options: Options, progress: SilentProgress):
        self.options, self.progress = options, progress

    def round(
        self, todo: Todo, round_index: int, before_timing: Callable[[], None]
    ) -> Iterator[Result]:
        jobs = self.options.compile_jobs or 1
        return waves.run_round(todo, self, jobs, self.progress, before_timing)

    def stop(self) -> None:
        end_case_processes()

    # --- the strategy: how a case compiles, where its program waits ----------------------

    def start(self, position: int, case: Case) -> CaseProcess:
        return CaseProcess(case, self.options)  # forked: starts in milliseconds

    @staticmethod
    def after_compile(position: int, case: Case, child: CaseProcess, ready: bool) -> Any:
        """The child itself, waiting for its turn; or, ended before it, its row (failed, or
        compile-only)."""
        return child if ready else child.go()

    @staticmethod
    def room(ready: Sequence[waves.Waiting], running: Sequence[CaseProcess]) -> bool:
        return waves.room_for_another([item.program for item in ready])

    @staticmethod
    def open(left: Sequence[waves.Waiting]) -> str | None:
        return None  # each case is timed by the process that waits with it

    @staticmethod
    def time(waiting: waves.Waiting) -> StepRow:
        return waiting.program.go()

    @staticmethod
    def failed(waiting: waves.Waiting, error: str) -> StepRow:
        return make_row(waiting.case, waiting.program.compiled, status="failed", error=error)

    @staticmethod
    def kill(child: CaseProcess) -> None:
        child.kill()

    def close(self) -> None:
        pass


def executor_for(
    options: Options,
    processes: int,
    progress: SilentProgress,
    devices: Devices | None = None,
    cases: Sequence[Case] = (),
) -> Executor:
    """The executor of a run: several processes run every case in each of them; a platform
    with an executor of its own (dew.platforms: a TPU's HeldChip) whose topology the device
    probe read (`devices`) compiles without the chip and times in one holder per round,
    unless a case is a step of the user's (dew's Trainer builds what a compile process
    saves); otherwise --isolate (the default) gives each case its own process."""
    if processes > 1:
        return MultiProcess(options, progress)
    if not options.isolate:
        return InProcess(options, progress)
    holder = platforms.get(devices.platform).executor if devices is not None else None
    if holder and devices.topology and all(case.step is None for case in cases):
        return platforms.resolve(holder)(options, progress, devices.topology)
    return Isolated(options, progress)


def end_case_processes() -> None:
    """Kill every case's process and the forkserver, then let multiprocessing tidy up. The
    waves kill the children they hold, but not the one being timed when a signal comes;
    the server waits for its children (a stopped one for ever), and a fork it was asked
    for before the signal can land after its children were killed: so the server is
    killed too. A child forked in that moment ends with this process (runtime.lifeline)."""
    server = forkserver._forkserver._forkserver_pid  # as case_process reaches it: pinned
    if server is not None:
        end_descendants(server)
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
    stop_forkserver()  # reaps the server and removes its socket
