"""The step benchmark's run, the orchestrator: every case, one row each, the record
written after every row. `run` reads top to bottom:

    the environment   captured once (dew.bench.record.capture); a --resume record checked
                      against it and this run's settings, refused naming the difference
    RunRecord         the record, opened or resumed; each result accepted into its case's
                      row and written (dew.bench.sweep.run_record)
    Executor          runs a round's cases, yielding each result as it comes: in this
                      process, each case in its own (in waves), or in every process of a
                      cluster (dew.bench.sweep.executors)
    the progress      an observer of the run's events (dew.bench.runtime.progress)
    HostReadings      the idle check and the host probe each round's repeats carry

Rounds: every case once per round, so drift spreads over all of them; `--repeats auto`
stops a case once its row can detect --target-mde. A crash or a `kill -9` loses at most
the case that was running.

`--resume` continues a record: every row already in it stays, whatever this run selects;
an `ok` row is reused only when the record was measured with the same settings and on the
same environment (device, code, packages, flags), otherwise the run is refused, naming
the difference, rather than mixing rows measured two ways under one header.

A run that cannot go on stops cleanly, its children and the forkserver ended first
(`stopping`): a write that fails raises RecordNotWritten (the record as it was before that
write, the row's figures for stdout, no further case started); a stop signal
(common.errors.Interrupted) leaves with the line saying how many cases the record keeps.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dew.bench.analysis.tables import num
from dew.bench.common.cli import UsageError, one_line
from dew.bench.common.errors import Interrupted
from dew.bench.common.files import read_json_object
from dew.bench.multihost.combine import process_table
from dew.bench.record.capture import capture
from dew.bench.record.schema import BenchmarkRun, Environment, StepRow
from dew.bench.record.stack import identity_differences
from dew.bench.runtime import hostprobe, idle
from dew.bench.runtime.progress import LogProgress, SilentProgress
from dew.bench.sweep.executors import end_case_processes, executor_for
from dew.bench.sweep.locked_clocks import check_resume
from dew.bench.sweep.presets import Case, outside_modules
from dew.bench.sweep.run_record import Result, RunRecord, measured, merged_cases
from dew.bench.sweep.settings import Options, measured_with, settings_record
from dew.train.distributed import process_count, process_index

SHOWN = 3  # differences a --resume refusal names; the count of the rest follows


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(
    options: Options,
    cases: Sequence[Case],
    *,
    json_out: str | None = None,
    resume: bool = False,
    command: str | None = None,
    idle_check: str = "off",
    warnings: Sequence[str] = (),
    log: Callable[[str], None] = say,
    progress: SilentProgress | None = None,
    locked_clocks: Any = None,
    identity: tuple[Any, Any] | None = None,
) -> BenchmarkRun:
    """Run every case once per round, `options.repeats` rounds (or until --repeats auto
    stops it); write the record after every row; return it.

    Several processes (dew.train.distributed): every one runs every case in-process and
    times it; rows combine across processes; only process 0 writes and is heard.
    `progress` (dew.bench.runtime.progress) hears the cases' phases and every row's result
    line, or `log` the lines without it. `locked_clocks`: the cards' locks
    (dew.bench.sweep.locked_clocks), for the environment. `identity`: the devices and
    backend as the device probe read them (dew.bench.sweep.preflight); None: read here,
    from the backend this process holds (a cluster's process)."""
    processes, leader = process_count(), process_index() == 0
    progress = progress or (LogProgress(log) if leader else SilentProgress())
    previous = read_previous(json_out) if resume and json_out and Path(json_out).exists() else None
    environment = environment_for(merged_cases(previous, cases), processes, locked_clocks, identity)
    if previous is not None:
        check_same_measurement(previous, options, environment, json_out)
    host = HostReadings(idle_check, options)
    record = RunRecord.open(
        options, cases, previous=previous, environment=environment, idle_check=host.first,
        command=command, warnings=warnings, path=json_out, writes=leader, processes=processes,
    )  # fmt: skip
    executor = executor_for(options, processes, progress, environment.devices, cases)
    with stopping(record.interrupted_line, end=executor.stop):
        for round_index in range(record.rounds.count):
            for case, why in record.stop_measured():
                progress.note(f"[auto] {case.label()}: stops: {why}")
            if record.all_stopped:
                break
            done, todo = record.split(round_index)
            for position in done if round_index == 0 else ():
                progress.note(f"{counter(record, position, 0)} {cases[position].label()}: "
                              f"ok in {json_out}, kept")  # fmt: skip
            host.before_round(round_index)
            with contextlib.closing(executor.round(todo, round_index, host.read_probe)) as results:
                for result in results:
                    row = record.accept(result, busy=host.busy, load=host.load,
                                        probe_ms=host.probe_ms)  # fmt: skip
                    line = result_line(record, result, row, round_index)
                    progress.finish(result.position, line, ok=row.status == "ok")
                    if result.row.note:  # a damaged cache entry recompiled, a loss not finite
                        progress.note(f"warning: {result.case.label()}: {result.row.note}")
    record.close()
    return record.run


# --- the environment, and a --resume record against it ----------------------------------


def environment_for(
    cases: Sequence[Case], processes: int, locked_clocks: Any = None, identity: Any = None
) -> Environment:
    """Where the run measures (dew.bench.record.capture): the process table of a
    multi-process run, the code from outside dew that `cases` (every row's) use, the locks,
    the devices as the process that held them read them (`identity`)."""
    table = process_table() if processes > 1 else None
    environment = capture(processes=table, outside=outside_modules(cases), identity=identity)
    return environment.model_copy(update={"locked_clocks": locked_clocks})


def read_previous(path: str) -> BenchmarkRun:
    """The record --resume continues (UsageError: one line, when it is not one: missing,
    empty, not JSON, not a record)."""
    text = read_json_object(Path(path), "--resume")
    try:
        record = BenchmarkRun.model_validate_json(text)
    except ValueError as error:
        raise UsageError(f"--resume: {path} is not a results record: {one_line(error)}") from None
    if record.kind != "step":
        raise UsageError(f"--resume: {path} is a {record.kind!r} record; need a step record")
    return record


def check_same_measurement(
    previous: BenchmarkRun, options: Options, environment: Environment, path: str
) -> None:
    """Refuse to continue a record measured with other settings or on another stack: one
    line naming what differs first (the record's value -> this run's), the record's path
    last (a long line is cut at its end)."""
    now = measured_with(settings_record(options, []))
    for name, then in measured_with(previous.settings).items():
        if then != now[name]:
            raise UsageError(
                f"--resume: {name} differs: {then!r} in the record, {now[name]!r} in this run; "
                f"rerun with the same settings or write a new --json-out (the record: {path})"
            )
    check_resume(previous.environment, environment, path)  # the same --lock-clocks
    dumped = [env.model_dump(mode="json") for env in (previous.environment, environment)]
    differences = identity_differences(*dumped)
    if differences:
        shown = "; ".join(differences[:SHOWN])
        more = f" (and {len(differences) - SHOWN} more)" if len(differences) > SHOWN else ""
        raise UsageError(
            f"--resume: the stack differs (the record's -> this run's): {shown}{more}; "
            f"write a new --json-out (the record: {path})"
        )


# --- the host readings a round's repeats carry --------------------------------------------


class HostReadings:
    """The idle check before the first case (dew.bench.runtime.idle.guard: raises
    HostNotIdle in mode "error"), then per round why the host is busy (None: it is not),
    and the host probe's ms (dew.bench.runtime.hostprobe), read again before each time
    stage. A compile-only run measures no time, so it neither waits for a quiet host nor
    reads the probe."""

    def __init__(self, mode: str, options: Options):
        self.mode, self.compile_only = mode, options.compile_only
        self.first = idle.guard("off" if self.compile_only else mode)
        self.busy: str | None = None
        self.load: float | None = None  # cores other processes used
        self.probe_ms: float | None = None

    def before_round(self, round_index: int) -> None:
        """The run's own idle check for the first round, a short reading before every later
        one."""
        self.busy = self.load = None
        if self.mode == "off" or self.compile_only:
            return
        check = self.first if round_index == 0 else idle.sample("warn", window_s=1.0)
        self.busy, self.load = idle.busy_and_load(check)

    def read_probe(self) -> None:
        self.probe_ms = None if self.compile_only else hostprobe.measure()


# --- what a finished repeat says ---------------------------------------------------------


def counter(record: RunRecord, position: int, round_index: int) -> str:
    """`[n/total]`: the (round, case) run's place among every one the run may make."""
    cases = len(record.cases)
    return f"[{round_index * cases + position + 1}/{cases * record.rounds.count}]"


def result_line(record: RunRecord, result: Result, row: StepRow, round_index: int) -> str:
    """A finished repeat's line: the case's row as it stands, its figures or its error."""
    which = f" repeat {round_index + 1}" if round_index else ""
    head = f"{counter(record, result.position, round_index)} {row.label()}{which}: {row.status}"
    seconds = result.seconds
    if row.status != "ok":
        return f"{head} ({seconds:.1f} s): {row.error}"
    parts = []
    if row.ms_per_step is not None:
        parts.append(f"{num(row.ms_per_step, 2)} ms/step")
        if row.ms_per_step_ci95 and measured(row) > 1:
            low, high = row.ms_per_step_ci95
            parts[-1] += f" [{num(low, 2)}, {num(high, 2)}] over {measured(row)}"
    if row.gflop_per_step is not None:
        parts.append(f"{num(row.gflop_per_step)} GFLOP")
    if row.compile_s is not None:
        parts.append(f"compile {row.compile_s:.1f} s")
    return f"{head} ({seconds:.1f} s) " + ", ".join(parts)


# --- stopping: a write that fails, a stop signal -------------------------------------------


@contextlib.contextmanager
def stopping(
    line: Callable[[str], str], end: Callable[[], None] = end_case_processes
) -> Iterator[None]:
    """Whatever ends the rounds early ends every case's process and the forkserver first
    (`end`); a stop signal (Interrupted) leaves with `line(its name)`, read when it comes."""
    try:
        yield
    except BaseException as stop:
        end()
        if isinstance(stop, Interrupted):
            stop.message = line(signal.Signals(stop.signum).name)
        raise


def exit_code(record: BenchmarkRun, cases: Sequence[Case] = ()) -> int:
    """0 when every row of this run's cases is ok (every row, without cases), else 1."""
    wanted = {case.key() for case in cases}
    rows = [row for row in record.rows if not wanted or row.key() in wanted]
    return 0 if all(row.status == "ok" for row in rows) else 1
