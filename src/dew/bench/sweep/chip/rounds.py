"""HeldChip: the executor of a run on a chip one process at a time can hold (a TPU).

A round: the cases not compiled yet compiled side by side without the chip (compile_job,
up to --compile-jobs at once while the host's memory holds another), then one fresh
process holding the chip loads the round's programs side by side and times its cases one
after another (holder), ordered by the peaks read so far so that each row's peak is its
own. A holder that dies fails the case it was timing and a new one takes the rest. Every
wait has a deadline (dew.bench.sweep.settings.case_deadlines).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from dew.bench.record.schema import StepRow
from dew.bench.runtime import protocol
from dew.bench.runtime.conversation import Ready, Result
from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep.case_process import keep_log
from dew.bench.sweep.case_run import make_row
from dew.bench.sweep.chip import compile_job, holder
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import Result as RunResult
from dew.bench.sweep.settings import Options, case_deadlines
from dew.bench.sweep.waves import room_for_another

Todo = list[tuple[int, Case]]


class HeldChip:
    """Compile without the chip, time in one holder per round (module docstring)."""

    def __init__(self, options: Options, progress: SilentProgress, topology: str):
        self.options, self.progress, self.topology = options, progress, topology
        self.compile_s, self.timed_s = case_deadlines(options)
        self.folder = tempfile.mkdtemp(prefix="dew-chip-")
        atexit.register(shutil.rmtree, self.folder, ignore_errors=True)
        self.compiled: dict[int, dict[str, Any]] = {}  # position -> its compile's fields
        self.peaks: dict[int, int] = {}  # position -> the peak bytes its last timing read
        self.children: set[protocol.Child] = set()

    def round(
        self, todo: Todo, round_index: int, before_timing: Callable[[], None]
    ) -> Iterator[RunResult]:
        seconds: dict[int, float] = {}
        yield from self._compile([item for item in todo if item[0] not in self.compiled], seconds)
        ready = []
        for position, case in todo:
            fields = self.compiled[position]
            if fields["error"] is None and self.options.compile_only:  # nothing to time
                row = make_row(case, fields["figures"], status="ok")
                yield RunResult(position, case, row, seconds.get(position, 0.0))
            elif fields["error"] is None:
                ready.append((position, case))
            elif position not in seconds:  # failed in an earlier round: its row again
                yield RunResult(position, case, self._failed(case, fields, fields["error"]), 0.0)
        if ready:
            self.progress.stage("time", [position for position, _ in ready])
            before_timing()
            yield from self._time(self._ordered(ready), seconds)

    def stop(self) -> None:
        for child in list(self.children):
            child.kill()
            child.close()
        self.children.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- the compile stage ---------------------------------------------------------------

    def _compile(self, items: Todo, seconds: dict[int, float]) -> Iterator[RunResult]:
        if not items:
            return
        jobs = self.options.compile_jobs or 1
        self.progress.stage("compile", [position for position, _ in items], parallel=jobs)
        pending, running = list(items), {}
        environment = {**os.environ, **compile_job.ENVIRONMENT}
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            while pending or running:
                while (
                    pending
                    and len(running) < jobs
                    and (not running or room_for_another(self.children))
                ):  # one compile at least, whatever the host's memory: never a wait on none
                    position, case = pending.pop(0)
                    child = self._spawn(compile_job.NAME, compile_job.argv(), environment)
                    folder = os.path.join(self.folder, str(position))
                    child.send(compile_job.job(case, self.options, self.topology, folder))
                    self.progress.set(position, "compiling")
                    future = pool.submit(self._answer, child, "compile", self.compile_s)
                    running[future] = (position, case, child, time.perf_counter())
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    position, case, child, start = running.pop(future)
                    fields = future.result()
                    self._end(child, case)  # here: the children are this thread's alone
                    self.compiled[position] = fields
                    seconds[position] = time.perf_counter() - start
                    if fields["error"] is None:
                        self.progress.set(position, "compiled, waiting")
                        self.progress.finish(position, None)
                    else:
                        row = self._failed(case, fields, fields["error"])
                        yield RunResult(position, case, row, seconds[position])

    @staticmethod
    def _answer(child: protocol.Child, phase: str, deadline: float) -> dict:
        """A compile process's answer (in a pool's thread): its fields, or its failure as
        the error."""
        try:
            message = child.receive(Result, phase=phase, deadline=deadline)
            return dict(message.row)
        except protocol.ChildFailed as failure:
            return {"figures": {}, "tokens": None, "phases": [], "error": str(failure)}

    # --- the time stage ------------------------------------------------------------------

    def _ordered(self, ready: Todo) -> Todo:
        """Lowest peak first, so that each row raises its process's peak: the peaks the
        last round read, else the compiler's estimate."""

        def expected(item: tuple[int, Case]) -> float:
            if item[0] in self.peaks:
                return float(self.peaks[item[0]])
            estimate = self.compiled[item[0]]["figures"].get("compiler_peak_gib")
            return float(estimate or 0.0) * 2**30

        return sorted(ready, key=expected)

    def _time(self, ready: Todo, seconds: dict[int, float]) -> Iterator[RunResult]:
        left = list(ready)
        while left:
            chip = self._spawn(holder.NAME, holder.argv(), dict(os.environ))
            try:
                opened = chip.receive(Ready, phase="opening the chip", deadline=protocol.PROBE_S)
            except protocol.ChildFailed as failure:
                for position, case in left:
                    row = self._failed(case, self.compiled[position], str(failure))
                    yield RunResult(position, case, row, seconds.get(position, 0.0))
                self._end(chip, None)
                return
            open_phase = [{"name": "open", "start": opened.figures["began"],
                           "seconds": round(opened.figures["open_s"], 3)}]  # fmt: skip
            load_ahead = [self._folder(position) for position, _ in left]
            while left:
                position, case = left.pop(0)
                self.progress.set(position, "timing")
                fields = dict(self.compiled[position])
                # the compile's phases on the repeat of the round that compiled it only
                compiled_now = fields["phases"] if position in seconds else []
                fields["phases"] = [*compiled_now, *open_phase]
                open_phase = []
                start = time.perf_counter()
                folder = self._folder(position)
                chip.send(holder.job(case, self.options, folder, fields, load_ahead))
                load_ahead = []
                try:
                    answer = chip.receive(Result, phase="timing", deadline=self.timed_s)
                except protocol.ChildFailed as failure:  # it died: a new one takes the rest
                    row = self._failed(case, fields, str(failure))
                    yield RunResult(position, case, row, seconds.get(position, 0.0))
                    break
                row = StepRow.model_validate(answer.row["row"])
                peak = (answer.row.get("readings") or {}).get("peak_bytes")
                if peak is not None:
                    self.peaks[position] = peak
                took = seconds.get(position, 0.0) + time.perf_counter() - start
                yield RunResult(position, case, row, took)
            self._end(chip, None)

    # --- children --------------------------------------------------------------------------

    def _folder(self, position: int) -> str:
        """Where the case's program is: the one its compile saved, or an earlier run's."""
        return self.compiled[position].get("folder") or os.path.join(self.folder, str(position))

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
            child.keep_log = True
            try:
                kept = keep_log(log_dir, case or "chip")
                shutil.move(child.log, kept)
            except OSError:
                pass
        child.close()
        self.children.discard(child)

    @staticmethod
    def _failed(case: Case, fields: dict[str, Any], error: str) -> StepRow:
        return make_row(case, fields.get("figures") or {}, status="failed", error=error)
