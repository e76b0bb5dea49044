"""The record of a step run as it grows: opened new or resumed, one row per case, each
repeat merged into its row, the whole record written atomically after every row.

    record = RunRecord.open(options, cases, previous=..., environment=..., ...)
    done, todo = record.split(round_index)   # what this round measures
    row = record.accept(result, ...)          # one more repeat of a case: its row, on disk
    record.close()                            # --repeats auto: why each row stopped
    record.run                                # the BenchmarkRun

The record is typed from the start (a BenchmarkRun header and StepRows, each validated when
it was made), so a write dumps it without validating it again. A crash or a `kill -9`
loses at most the case that was running: every accepted row is on disk before the next
case starts. `--repeats auto` stops a case once its row could detect --target-mde against
this device kind's noise (dew.bench.analysis.repeats.auto_stop); its rows say why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.levels.noise import auto_noise
from dew.bench.analysis.repeats import auto_stop, with_host_readings
from dew.bench.common.errors import WriteFailed
from dew.bench.common.files import atomic_write
from dew.bench.record.schema import (
    SCHEMA_VERSION,
    BenchmarkRun,
    Environment,
    IdleCheck,
    StepRow,
    dump_run,
)
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, settings_record


@dataclasses.dataclass(frozen=True)
class Result:
    """One repeat of one case, as an executor (dew.bench.sweep.executors) yields it."""

    position: int  # the case's place in the run's cases
    case: Case
    row: StepRow  # this repeat alone, as the case's process made it
    seconds: float  # its wall clock, compile and timing


@dataclasses.dataclass(frozen=True)
class Rounds:
    """How many rounds a run makes (every case once per round) and whether `--repeats
    auto` ends a case's rounds early, at which detectable change (a fraction)."""

    count: int
    auto: bool = False
    target: float | None = None

    @classmethod
    def of(cls, options: Options) -> Rounds:
        if options.compile_only:  # nothing is timed: one compile per case tells all
            return cls(1)
        if options.repeats == "auto":
            return cls(options.max_repeats, auto=True, target=options.target_mde / 100)
        return cls(options.repeats)


class RecordNotWritten(WriteFailed):
    """The record could not take a row (or the last write of --repeats auto): `rows` are
    the figures it could not take, for the table on stdout."""

    def __init__(self, path: str, error: OSError, rows: list[StepRow], kept: str):
        super().__init__(path, error, kept)
        self.rows = rows


class RunRecord:
    """A step run's record: its header, its rows (the resumed record's first), the cases
    this run measures, which of them `--repeats auto` has stopped and why, and how many
    (round, case) runs are finished, those the record already held included.

    `path`: the --json-out it is written to (None: none); `writes`: whether this process
    writes it (process 0 of a multi-process run)."""

    def __init__(
        self,
        header: BenchmarkRun,
        cases: Sequence[Case],
        rounds: Rounds,
        *,
        path: str | None = None,
        writes: bool = True,
        processes: int = 1,
    ):
        self.header = header
        self.rows: list[StepRow] = list(header.rows)
        self.note = header.note
        self.cases = tuple(cases)
        self.rounds = rounds
        self.path, self.writes, self.processes = path, writes, processes
        self.stopped: dict[tuple, str] = {}  # --repeats auto: the cases done, and why
        self.finished = 0
        self.partial: str | None = None  # what the file says until the run reaches its end

    @classmethod
    def open(
        cls,
        options: Options,
        cases: Sequence[Case],
        *,
        previous: BenchmarkRun | None,
        environment: Environment,
        idle_check: IdleCheck | None,
        command: str | None = None,
        warnings: Sequence[str] = (),
        path: str | None = None,
        writes: bool = True,
        processes: int = 1,
    ) -> RunRecord:
        """A new record, or the `previous` one continued (--resume): its rows and its
        cases stay, whatever this run selects, under this run's environment."""
        header = BenchmarkRun(
            schema_version=SCHEMA_VERSION,
            kind="step",
            created=previous.created if previous else datetime.now(UTC),
            command=command,
            settings=settings_record(options, merged_cases(previous, cases)),
            environment=environment,
            idle_check=idle_check,
            rows=list(previous.rows) if previous else [],
            note="; ".join(warnings) or None,
        )
        return cls(header, cases, Rounds.of(options), path=path, writes=writes, processes=processes)

    @property
    def run(self) -> BenchmarkRun:
        """The record as it stands."""
        update = {"rows": list(self.rows), "note": self.note, "partial": self.partial}
        return self.header.model_copy(update=update)

    def row(self, key: tuple) -> StepRow | None:
        return next((row for row in self.rows if row.key() == key), None)

    # --- the rounds ------------------------------------------------------------------------

    def split(self, round_index: int) -> tuple[list[int], list[tuple[int, Case]]]:
        """This round's cases: the positions of those the record holds enough repeats of
        (counted as finished), and the (position, case) pairs to run. A case that --repeats
        auto stopped is in neither."""
        done, todo = [], []
        for position, case in enumerate(self.cases):
            row = self.row(case.key())
            if row is not None and row.status == "ok" and measured(row) > round_index:
                done.append(position)
            elif case.key() not in self.stopped:
                todo.append((position, case))
        self.finished += len(done)
        return done, todo

    def accept(
        self,
        result: Result,
        *,
        busy: str | None = None,
        load: float | None = None,
        probe_ms: float | None = None,
    ) -> StepRow:
        """One more repeat of a case, with the host readings of its round (why the host was
        busy, the cores other processes used, the host probe's ms): the case's row with it
        merged, in the record and on disk before anything else can go wrong."""
        repeat = with_host_readings(result.row, busy, probe_ms, load)
        row = merge_repeat(self.row(result.case.key()), repeat)
        self._put(row)
        self.finished += 1
        # Until close() the file says how far the run got: one cut short by a stop, a crash
        # or a dead process must not read as whole
        self.partial = f"{self.progress()}; the run had not ended at this write"
        self.write(row)
        return row

    def stop_measured(self) -> list[tuple[Case, str]]:
        """--repeats auto: stop the cases whose rows need no more repeats (their detectable
        change reached the target, or cannot), each with why; nothing without auto."""
        if not self.rounds.auto:
            return []
        devices = self.header.environment.devices
        kind, platform = (devices.kind, devices.platform) if devices else (None, None)
        noise = auto_noise(kind, platform)
        stops = []
        for case in self.cases:
            row = self.row(case.key())
            if row is None or case.key() in self.stopped:
                continue
            why = auto_stop(row, noise.for_row(row.label()), tests=len(self.cases),
                            target=self.rounds.target)  # fmt: skip
            if why is not None:
                self.stopped[case.key()] = why
                stops.append((case, why))
        return stops

    @property
    def all_stopped(self) -> bool:
        """--repeats auto has stopped every case: no round is left to run."""
        return self.rounds.auto and len(self.stopped) == len(self.cases)

    def close(self) -> None:
        """The rounds are over: with --repeats auto every row says why it has as many
        repeats as it has; the record, no longer partial, is written once more."""
        self.partial = None
        if not self.rounds.auto:
            self.write()
            return
        for case in self.cases:
            self.stopped.setdefault(case.key(), f"reached --max-repeats {self.rounds.count}")
        for index, row in enumerate(self.rows):
            why = self.stopped.get(row.key())
            if why is not None:
                warnings = [*row.warnings, f"repeats auto: {why}"]
                self.rows[index] = row.model_copy(update={"warnings": warnings})
        self.write()

    # --- writing ---------------------------------------------------------------------------

    def write(self, row: StepRow | None = None) -> None:
        """The whole record, atomically, when this process writes one; a write that fails
        (a full disk, a quota, an I/O error) leaves the file as it was and raises
        RecordNotWritten with `row`'s figures (None: --repeats auto's last write, every
        row)."""
        if self.path is None or not self.writes:
            return
        existed = Path(self.path).exists()
        try:
            atomic_write(self.path, dump_run(self.run))
        except OSError as error:
            if row is None:  # the last write: every row is in the record already
                rows = list(self.rows)
                kept = "the record keeps every row, but still reads partial"
                kept += "; the table is on stdout"
            else:
                rows, which = [row], f"{row.label()} batch {row.batch}"
                kept = f"the record keeps the rows before {which}" if existed else "no record"
                kept += "; its figures are on stdout; no further case started"
            raise RecordNotWritten(self.path, error, rows, kept) from None

    def progress(self) -> str:
        """How many case runs are finished, of how many."""
        cases, repeats = len(self.cases), self.rounds.count
        if repeats == 1:
            return f"{self.finished} of {cases} cases finished"
        most = "at most " if self.rounds.auto else ""
        return (
            f"{self.finished} of {most}{cases * repeats} case repeats finished "
            f"({cases} cases x {most}{repeats})"
        )

    def interrupted_line(self, signal_name: str = "a stop signal") -> str:
        """The line a stop signal ends the run with: how many case runs the record keeps
        and how to go on. A record on disk is marked stopped by it first."""
        done = self.progress()
        if self.path is not None and self.writes and Path(self.path).exists():
            self.partial = f"stopped by {signal_name}: {done}"
            try:
                self.write()
            except WriteFailed:  # the file as it was: marked partial by its last write
                pass
        if self.path is None:
            return f"interrupted: {done}; no --json-out, so no record keeps them"
        if not Path(self.path).exists():
            return f"interrupted: {done}; no record written"
        return f"interrupted: {done}; the record keeps them; --resume continues"

    def _put(self, row: StepRow) -> None:
        """Replace the row of the same case (a failed one being rerun), else append."""
        for index, old in enumerate(self.rows):
            if old.key() == row.key():
                self.rows[index] = row
                return
        self.rows.append(row)


def merge_repeat(previous: StepRow | None, new: StepRow) -> StepRow:
    """The case's row once `new` (one more repeat) has run after `previous` (None: first):
    the medians over every repeat (the step kind's summary, KINDS["step"].summarize); a failed
    repeat after ok ones is a warning on the row, not its failure."""
    if new.status != "ok":
        if previous is None or previous.status != "ok":
            return new
        failed = len(previous.repeats or []) + 1
        note = f"repeat {failed} failed: {new.error}"
        return previous.model_copy(update={"warnings": [*previous.warnings, note]})
    if previous is None or previous.status != "ok" or not previous.repeats:
        return KINDS["step"].summarize(new, new.repeats or [])
    return KINDS["step"].summarize(new, [*previous.repeats, *(new.repeats or [])], previous)


def merged_cases(previous: BenchmarkRun | None, cases: Sequence[Case]) -> list[Case]:
    """The record's cases: the previous record's, then this run's new ones."""
    known = [Case.model_validate(c) for c in (previous.settings.cases or [])] if previous else []
    keys = {case.key() for case in known}
    return known + [case for case in cases if case.key() not in keys]


def measured(row: StepRow) -> int:
    """How many repeats a row holds (a row of schema 1 holds one, summarized)."""
    return len(row.repeats) if row.repeats else 1
