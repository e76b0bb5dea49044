"""HeldChip: the executor of a run on a chip one process at a time can hold (a TPU).

A round runs on the step benchmark's one scheduler (dew.bench.sweep.waves: its compile
stage, its time stage), HeldChip the strategy that says how a case compiles and where its
program waits. A round: the cases not compiled yet compiled side by side without the chip
(compile_job, up to --compile-jobs at once while the host's memory holds another, in the
preset's order), each program saved in a folder; then one fresh process holding the chip
loads the round's programs side by side and times its cases one after another (holder),
ordered by the peaks read so far so that each row's peak is its own. A holder that dies
fails the case it was timing and a new one takes the rest. Every wait has a deadline
(dew.bench.sweep.settings.case_deadlines); every message is typed (messages).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence

from dew.bench.record.schema import Phase, StepRow
from dew.bench.runtime import protocol
from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep import waves
from dew.bench.sweep.case_run import make_row
from dew.bench.sweep.chip import compile_job, holder
from dew.bench.sweep.chip.messages import Compiled, Opened, Timed
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import Result
from dew.bench.sweep.settings import Options, case_deadlines

Todo = list[tuple[int, Case]]


@dataclasses.dataclass
class Compiling:
    """A case's compile process, its job sent."""

    child: protocol.Child
    deadline: float

    @property
    def pid(self) -> int:
        return self.child.pid

    def wait(self) -> Compiled:
        """Its answer (in a pool's thread), or its failure as the error."""
        try:
            return self.child.receive(Compiled, phase="compile", deadline=self.deadline)
        except protocol.ChildFailed as failure:
            return Compiled(figures={}, error=str(failure))

    def kill(self) -> None:
        self.child.kill()


class HeldChip:
    """Compile without the chip, time in one holder per round (module docstring): the round
    scheduler's strategy (dew.bench.sweep.waves) where a case's program waits in a folder."""

    def __init__(self, options: Options, progress: SilentProgress, topology: str):
        self.options, self.progress, self.topology = options, progress, topology
        self.compile_s, self.timed_s = case_deadlines(options)
        self.folder = tempfile.mkdtemp(prefix="dew-chip-")
        atexit.register(shutil.rmtree, self.folder, ignore_errors=True)
        self.compiled: dict[int, Compiled] = {}  # position -> its compile's answer
        self.peaks: dict[int, int] = {}  # position -> the peak bytes its last timing read
        self.children: set[protocol.Child] = set()
        self._holder: protocol.Child | None = None  # the round's process holding the chip
        self._open_phase: list[Phase] = []  # its "open", for the first case it times
        self._load_ahead: list[str] = []  # for its first job
        self._compiled_now: set[int] = set()  # the positions this round compiled

    def round(
        self, todo: Todo, round_index: int, before_timing: Callable[[], None]
    ) -> Iterator[Result]:
        self._compiled_now = set()
        pending = [item for item in todo if item[0] not in self.compiled]
        ready = []
        for position, case in todo:  # compiled in an earlier round
            if position not in self.compiled:
                continue
            fields = self.compiled[position]
            if fields.error is not None:  # failed then: its row again
                yield Result(position, case, self._failed(case, fields, fields.error), 0.0)
            elif self.options.compile_only:  # nothing to time
                yield Result(position, case, make_row(case, fields.figures, status="ok"), 0.0)
            else:
                ready.append(waves.Waiting(position, case, fields, 0.0))
        if pending:
            # The preset's order, not the longest first: a TPU compile slows with the compiles
            # beside it, the long ones most (on a v5e the 8 longest of the small preset took
            # 276-373 s side by side, 144-326 s each beside short ones: results/runs/
            # 20261207T210918Z-small-small1-tpu-v5e-9e13d79 against ...120807Z-...-a1819e0).
            jobs = self.options.compile_jobs or 1
            stage = waves.compile_stage(pending, self, jobs, len(pending), self.progress)
            ready += yield from stage
        order = {position: index for index, (position, _) in enumerate(todo)}
        ready = self._ordered(sorted(ready, key=lambda item: order[item.position]))
        yield from waves.time_stage(ready, self, self.progress, before_timing)

    def stop(self) -> None:
        for child in list(self.children):
            child.kill()
            child.close()
        self.children.clear()
        self._holder = None
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- the compile stage: a process of its own per case, the program saved ------------

    def start(self, position: int, case: Case) -> Compiling:
        environment = {**os.environ, **compile_job.ENVIRONMENT}
        child = self._spawn(compile_job.NAME, compile_job.argv(), environment)
        folder = os.path.join(self.folder, str(position))
        child.send(compile_job.job(case, self.options, self.topology, folder))
        return Compiling(child, self.compile_s)

    def after_compile(
        self, position: int, case: Case, compiling: Compiling, answer: Compiled
    ) -> Compiled | StepRow:
        self._end(compiling.child, case)  # here: the children are this thread's alone
        self.compiled[position] = answer
        self._compiled_now.add(position)
        if answer.error is not None:
            return self._failed(case, answer, answer.error)
        if self.options.compile_only:  # nothing to time
            return make_row(case, answer.figures, status="ok")
        return answer

    def room(self, ready: Sequence[waves.Waiting], running: Sequence[Compiling]) -> bool:
        # one compile at least, whatever the host's memory: never a wait on none
        return not running or waves.room_for_another(running)

    # --- the time stage: one process holds the chip and times every case in turn ---------

    def _ordered(self, ready: list[waves.Waiting]) -> list[waves.Waiting]:
        """Lowest peak first, so that each row raises its process's peak: the peaks the
        last round read, else the compiler's estimate."""

        def expected(item: waves.Waiting) -> float:
            if item.position in self.peaks:
                return float(self.peaks[item.position])
            estimate = item.program.figures.compiler_peak_gib
            return float(estimate or 0.0) * 2**30

        return sorted(ready, key=expected)

    def open(self, left: Sequence[waves.Waiting]) -> str | None:
        if self._holder is not None:
            return None
        holder_ = self._spawn(holder.NAME, holder.argv(), dict(os.environ))
        try:
            opened = holder_.receive(Opened, phase="opening the chip", deadline=protocol.PROBE_S)
        except protocol.ChildFailed as failure:
            self._end(holder_, None)
            return str(failure)
        self._holder = holder_
        self._open_phase = [Phase(name="open", start=opened.began, seconds=round(opened.open_s, 3))]
        self._load_ahead = [self._folder(item.position) for item in left]
        return None

    def time(self, waiting: waves.Waiting) -> StepRow:
        position, case, fields = waiting.position, waiting.case, waiting.program
        # the compile's phases on the repeat of the round that compiled it only
        compiled_now = fields.phases if position in self._compiled_now else []
        fields = dataclasses.replace(fields, phases=[*compiled_now, *self._open_phase])
        self._open_phase = []
        job = holder.job(case, self.options, self._folder(position), fields, self._load_ahead)
        self._load_ahead = []
        assert self._holder is not None  # open() started it
        self._holder.send(job)
        try:
            answer = self._holder.receive(Timed, phase="timing", deadline=self.timed_s)
        except protocol.ChildFailed as failure:  # it died: a new one takes the rest
            self.close()
            return self._failed(case, fields, str(failure))
        if answer.readings.peak_bytes is not None:
            self.peaks[position] = answer.readings.peak_bytes
        return answer.row

    def failed(self, waiting: waves.Waiting, error: str) -> StepRow:
        return self._failed(waiting.case, waiting.program, error)

    def kill(self, program: Compiled) -> None:
        pass  # a saved program: no process of its own (stop ends the holder)

    def close(self) -> None:
        if self._holder is not None:
            self._end(self._holder, None)
            self._holder = None

    # --- children --------------------------------------------------------------------------

    def _folder(self, position: int) -> str:
        """Where the case's program is: the one its compile saved, or an earlier run's."""
        return self.compiled[position].folder or os.path.join(self.folder, str(position))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> protocol.Child:
        child = protocol.spawn(name, argv, env=env)
        self.children.add(child)
        return child

    def _end(self, child: protocol.Child, case: Case | None) -> None:
        """The child's end: told (a holder waits for its next case), reaped, its channel
        closed, its log kept in --log-dir (a case's compile as <case>-<n>.log, a holder as
        chip-<n>.log) or removed."""
        child.hang_up()
        child.finish()
        log_dir = self.options.log_dir
        if log_dir and child.log and os.path.exists(child.log):
            child.keep_log = True  # moved, or where it was written when it cannot be
            waves.move_log(child.log, log_dir, case or "chip")
        child.close()
        self.children.discard(child)

    @staticmethod
    def _failed(case: Case, fields: Compiled, error: str) -> StepRow:
        return make_row(case, fields.figures, status="failed", error=error)
