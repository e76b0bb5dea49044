"""The step benchmark's run: every case, one row each, the record written after every row.

A case runs in its own process (dew.bench.sweep.case_process) or in this one
(dew.bench.sweep.case_run);
either way its row lands in the record, which is validated and written atomically after
every row, so a crash or a `kill -9` loses at most the case that was running.

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
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from dew.bench.analysis.repeats import merge_step, with_host_readings
from dew.bench.common.cli import UsageError, one_line
from dew.bench.common.errors import Interrupted, WriteFailed
from dew.bench.record.schema import (
    SCHEMA_VERSION,
    BenchmarkRun,
    Environment,
    StepRow,
    read_run,
    write_run,
)
from dew.bench.record.stack import identity_differences
from dew.bench.runtime import hostprobe
from dew.bench.runtime.progress import Progress
from dew.bench.sweep.presets import Case, outside_modules
from dew.bench.sweep.settings import Options, measured_with, settings_record

SHOWN = 3  # differences a --resume refusal names; the count of the rest follows


def check_idle(mode: str, *, skip: bool):
    """The idle-host readings (dew.bench.runtime.idle); raises HostNotIdle in mode "error".

    A compile-only run measures no time, so it does not wait for the host to be quiet.
    """
    from dew.bench.runtime import idle

    return idle.guard("off" if skip else mode)


# --- resume --------------------------------------------------------------------------------


def read_previous(path: str) -> BenchmarkRun:
    """The record --resume continues (UsageError: one line, when it is not one)."""
    try:
        record = read_run(path)
    except FileNotFoundError:
        raise UsageError(f"--resume: {path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
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
    from dew.bench.sweep.locked_clocks import check_resume

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


def merged_cases(previous: BenchmarkRun | None, cases: Sequence[Case]) -> list[Case]:
    """The record's cases: the previous record's, then this run's new ones."""
    known = [Case.model_validate(c) for c in (previous.settings.cases or [])] if previous else []
    keys = {case.key() for case in known}
    return known + [case for case in cases if case.key() not in keys]


# --- the run -------------------------------------------------------------------------------


def progress_line(progress: str, row: StepRow, seconds: float, round_index: int = 0) -> str:
    from dew.bench.analysis.tables import num

    which = f" repeat {round_index + 1}" if round_index else ""
    head = f"{progress} {row.label()}{which}: {row.status}"
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


def run(
    options: Options,
    cases: Sequence[Case],
    *,
    json_out: str | None = None,
    resume: bool = False,
    command: str | None = None,
    idle_check: str = "off",
    warnings: Sequence[str] = (),
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    progress: Progress | None = None,
    locked_clocks: Any = None,
) -> BenchmarkRun:
    """Run every case `options.repeats` times, in rounds (every case once per round, so
    drift spreads over all of them); write the record after every row; return it.

    Each round runs in waves (dew.bench.sweep.waves): up to `options.compile_jobs` cases compile
    at once, then the compiled ones are timed one at a time. `progress` (dew.bench.runtime.progress)
    shows the cases' phases; every row's result line goes to it, or to `log` without it.
    `locked_clocks`: the cards' locks (dew.bench.sweep.locked_clocks), for the environment."""
    from dew.bench.multihost import combine as multihost
    from dew.bench.record.capture import capture
    from dew.train.distributed import process_count, process_index

    # Several processes (dew.train.distributed): every one runs every case in-process and
    # times it; rows combine across processes; only process 0 writes and logs.
    processes = process_count()
    leader = process_index() == 0
    previous = read_previous(json_out) if resume and json_out and _exists(json_out) else None
    table = multihost.process_table() if processes > 1 else None
    uses = outside_modules(merged_cases(previous, cases))  # every row's code from outside dew
    environment = capture(processes=table, outside=uses)
    environment = environment.model_copy(update={"locked_clocks": locked_clocks})
    if previous is not None:
        check_same_measurement(previous, options, environment, json_out)
    idle = check_idle(idle_check, skip=options.compile_only)
    rows: list[StepRow] = list(previous.rows) if previous else []
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "step",
        "created": previous.created if previous else datetime.now(UTC),
        "command": command,
        "settings": settings_record(options, merged_cases(previous, cases)),
        "environment": environment,
        "idle_check": idle,
        "rows": rows,
        "note": "; ".join(warnings) or None,
    }
    auto = options.repeats == "auto" and not options.compile_only
    if options.compile_only:
        repeats = 1
    else:
        repeats = options.max_repeats if auto else options.repeats
    total = len(cases) * repeats
    stopped: dict[tuple, str] = {}  # --repeats auto: the cases done, and why
    finished = [0]  # the (round, case) runs done, those the record already held included
    said = interrupted_line(finished, len(cases), repeats, json_out, auto=auto)
    with stopping(said):
        for round_index in range(repeats):
            if auto:
                stop_done_cases(cases, rows, stopped, options, environment, log if leader else None)
                if len(stopped) == len(cases):
                    break
            busy = round_busy(idle_check, round_index, options, first=idle)
            # The host's speed (dew.bench.runtime.hostprobe), read again before each wave is timed.
            probe: dict[str, float | None] = {"ms": None}

            def read_probe(probe=probe) -> None:
                probe["ms"] = None if options.compile_only else hostprobe.measure()

            todo = []  # (position in cases, case): what this round measures
            for position, case in enumerate(cases):
                done = _find(rows, case.key())
                if done is not None and done.status == "ok" and measured(done) > round_index:
                    finished[0] += 1
                    if leader and round_index == 0:
                        log(f"[{position + 1}/{total}] {case.label()}: ok in {json_out}, kept")
                    continue
                if case.key() in stopped:
                    continue
                todo.append((position, case))

            def on_row(
                position, case, row, seconds, busy=busy, probe=probe, round_index=round_index
            ):
                index = position + 1
                row = merge_step(
                    _find(rows, case.key()), with_host_readings(row, busy, probe["ms"])
                )
                _put(rows, row)
                if processes > 1:  # a run cut short by a dead process must not read as complete
                    partial = multihost.PARTIAL_NOTE.format(done=index, total=len(cases))
                    record["note"] = None if index == len(cases) else partial
                if json_out and leader:  # on disk before anything else can go wrong
                    write_record(json_out, record, row)
                finished[0] += 1
                if leader:
                    counter = f"[{round_index * len(cases) + index}/{total}]"
                    line = progress_line(counter, row, seconds, round_index)
                    if progress is not None:
                        progress.finish(position, line, ok=row.status == "ok")
                    else:
                        log(line)

            if options.isolate:
                from dew.bench.sweep import waves

                jobs = options.compile_jobs or 1
                waves.run_round(todo, options, jobs, on_row, progress, before_timing=read_probe)
            else:
                read_probe()
                for position, case in todo:
                    if progress is not None:
                        progress.stage("run", [position])
                        progress.set(position, "compiling and timing")
                    start = time.perf_counter()
                    row = _measure_in_process(case, options, processes, position + 1, round_index)
                    on_row(position, case, row, time.perf_counter() - start)
    if auto:
        for case in cases:
            stopped.setdefault(case.key(), f"reached --max-repeats {repeats}")
        for row in rows:  # why each row has as many repeats as it has, in the record
            why = stopped.get(row.key())
            if why is not None:
                _put(
                    rows,
                    row.model_copy(update={"warnings": [*row.warnings, f"repeats auto: {why}"]}),
                )
        if json_out and leader:
            write_record(json_out, record, None)
    return BenchmarkRun.model_validate(record)


# --- stopping: a write that fails, a stop signal -------------------------------------------


class RecordNotWritten(WriteFailed):
    """The record could not take a row (or the last write of --repeats auto): `rows` are
    the figures it could not take, for the table on stdout."""

    def __init__(self, path: str, error: OSError, rows: list[StepRow], kept: str):
        super().__init__(path, error, kept)
        self.rows = rows


def write_record(json_out: str, record: dict[str, Any], row: StepRow | None) -> None:
    """The whole record, atomically; a write that fails (a full disk, a quota, an I/O
    error) leaves the file as it was and raises RecordNotWritten with the row's figures."""
    existed = _exists(json_out)
    try:
        write_run(json_out, record)
    except OSError as error:
        if row is None:  # --repeats auto's last write: every row is in the record already
            rows = list(record["rows"])
            kept = "the record keeps every row, without why each stopped; the table is on stdout"
        else:
            rows, which = [row], f"{row.label()} batch {row.batch}"
            kept = f"the record keeps the rows before {which}" if existed else "no record"
            kept += "; its figures are on stdout; no further case started"
        raise RecordNotWritten(json_out, error, rows, kept) from None


def interrupted_line(
    finished: list[int], cases: int, repeats: int, json_out: str | None, *, auto: bool
) -> Callable[[], str]:
    """The line a stop signal ends the run with, read when it comes: how many case runs
    the record keeps and how to go on."""

    def line() -> str:
        if repeats == 1:
            done = f"{finished[0]} of {cases} cases finished"
        else:
            most = "at most " if auto else ""
            done = (
                f"{finished[0]} of {most}{cases * repeats} case repeats finished "
                f"({cases} cases x {most}{repeats})"
            )
        if json_out is None:
            return f"interrupted: {done}; no --json-out, so no record keeps them"
        if not _exists(json_out):
            return f"interrupted: {done}; no record written"
        return f"interrupted: {done}; the record keeps them; --resume continues"

    return line


@contextlib.contextmanager
def stopping(line: Callable[[], str]) -> Iterator[None]:
    """Whatever ends the rounds early ends every case's process and the forkserver first;
    a stop signal (Interrupted) leaves with `line()`."""
    try:
        yield
    except BaseException as stop:
        end_case_processes()
        if isinstance(stop, Interrupted):
            stop.message = line()
        raise


def end_case_processes() -> None:
    """Kill every case's process and the forkserver, then let multiprocessing tidy up. The
    waves kill the children they hold, but not the one being timed when a signal comes;
    the server waits for its children (a stopped one for ever), and a fork it was asked
    for before the signal can land after its children were killed: so the server is
    killed too. A child forked in that moment ends with this process (runtime.lifeline)."""
    if "dew.bench.sweep.case_process" not in sys.modules:  # --no-isolate: no server
        return
    from multiprocessing import forkserver

    from dew.bench.runtime.lifeline import end_descendants
    from dew.bench.sweep.case_process import stop_forkserver

    server = forkserver._forkserver._forkserver_pid  # as case_process reaches it: pinned
    if server is not None:
        end_descendants(server)
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
    stop_forkserver()  # reaps the server and removes its socket


def stop_done_cases(
    cases: Sequence[Case],
    rows: list[StepRow],
    stopped: dict[tuple, str],
    options: Options,
    environment: Environment,
    log: Callable[[str], None] | None,
) -> None:
    """--repeats auto: mark the cases whose rows need no more repeats (analysis.repeats
    .auto_stop against the noise of this device kind), saying why."""
    from dew.bench.analysis.noise import auto_noise
    from dew.bench.analysis.repeats import auto_stop

    devices = environment.devices
    model = auto_noise(devices.kind if devices else None, devices.platform if devices else None)
    for case in cases:
        row = _find(rows, case.key())
        if row is None or case.key() in stopped:
            continue
        why = auto_stop(row, model.for_row(row.label()), tests=len(cases),
                        target=options.target_mde / 100)  # fmt: skip
        if why is not None:
            stopped[case.key()] = why
            if log is not None:
                log(f"[auto] {case.label()}: stops: {why}")


def measured(row: StepRow) -> int:
    """How many repeats a row holds (a row of schema 1 holds one, summarized)."""
    return len(row.repeats) if row.repeats else 1


def round_busy(idle_check: str, round_index: int, options: Options, first=None) -> str | None:
    """Why the host is busy before a round, or None: the run's own idle check for the first
    round, a short reading before every later one. The round's repeats carry it."""
    if idle_check == "off" or options.compile_only:
        return None
    if round_index == 0:
        if first is None or first.idle is not False:
            return None
        return "; ".join(first.reasons) or "busy"
    from dew.bench.runtime import idle

    check = idle.sample("warn", window_s=1.0)
    return None if check.idle else "; ".join(check.reasons) or "busy"


def _measure_in_process(
    case: Case, options: Options, processes: int, index: int, round_index: int
) -> StepRow:
    """A case in this process (--no-isolate, or a multi-process run): every process times
    it; the rows combine across processes (dew.bench.multihost.combine)."""
    from dew.bench.multihost import combine as multihost
    from dew.bench.sweep.case_run import run_case

    row = run_case(case, options)
    if processes > 1:
        row = multihost.gather_row(row, f"row/{round_index}/{index}")
    return row


def _find(rows: list[StepRow], key: tuple) -> StepRow | None:
    return next((row for row in rows if row.key() == key), None)


def _put(rows: list[StepRow], row: StepRow) -> None:
    """Replace the row of the same case (a failed one being rerun), else append."""
    for index, old in enumerate(rows):
        if old.key() == row.key():
            rows[index] = row
            return
    rows.append(row)


def _exists(path: str) -> bool:
    from pathlib import Path

    return Path(path).exists()


def exit_code(record: BenchmarkRun, cases: Sequence[Case] = ()) -> int:
    """0 when every row of this run's cases is ok (every row, without cases), else 1."""
    wanted = {case.key() for case in cases}
    rows = [row for row in record.rows if not wanted or row.key() in wanted]
    return 0 if all(row.status == "ok" for row in rows) else 1
