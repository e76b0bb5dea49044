"""Where a case's process spends its time: named phases with their wall-clock starts.

A sweep's time is mostly not the timed windows: process start and imports, tracing and
lowering, the XLA compile, the FLOP count, the state's initialisation. Every case process
times its phases with one `PhaseClock`; the phases land in the repeat's `phases` (schema 3,
names in dew.bench.record.schema.PHASES), the table ends with their totals
(dew.bench.analysis.tables), and
the wall-clock starts show that no compile ran while another case was timed
(`overlaps`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence

from dew.bench.record.schema import Phase, StepRow


class PhaseClock:
    """The phases of one process, in the order they ran."""

    def __init__(self):
        self.phases: list[Phase] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name`, its wall clock and the process's CPU time (every
        thread's: an XLA compile runs passes in threads of its own); a block that raises is
        still recorded."""
        began, start, cpu = time.time(), time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, began, time.perf_counter() - start, time.process_time() - cpu)

    def add(self, name: str, began: float, seconds: float, cpu: float | None = None) -> None:
        """A phase timed elsewhere; `cpu` None where its process ran other work beside it."""
        cpu_seconds = None if cpu is None else round(max(cpu, 0.0), 3)
        self.phases.append(
            Phase(name=name, start=round(began, 3), seconds=round(seconds, 3),
                  cpu_seconds=cpu_seconds)
        )  # fmt: skip

    def dump(self) -> list[dict]:
        return [phase.model_dump() for phase in self.phases]


def of_rows(rows: Iterable[StepRow]) -> list[Phase]:
    """Every phase of every repeat of `rows` (none for rows of records before schema 3)."""
    return [phase for row in rows for repeat in row.repeats or [] for phase in repeat.phases or []]


def totals(phases: Iterable[Phase]) -> dict[str, float]:
    """Seconds per phase name over many phases (a sweep's rows), in PHASES order."""
    from dew.bench.record.schema import PHASES

    sums: dict[str, float] = {}
    for phase in phases:
        sums[phase.name] = sums.get(phase.name, 0.0) + phase.seconds
    return {name: sums[name] for name in PHASES if name in sums}


def cpu_totals(phases: Iterable[Phase]) -> dict[str, float]:
    """CPU seconds per phase name, for the names whose every phase kept them (records
    before the field, and a holder's loads in threads, keep none)."""
    sums: dict[str, float | None] = {}
    for phase in phases:
        known = sums.get(phase.name, 0.0)
        cpu = phase.cpu_seconds
        sums[phase.name] = None if known is None or cpu is None else known + cpu
    return {name: value for name, value in sums.items() if value is not None}


COMPILING = ("trace_lower", "compile", "init")  # may run XLA (init jits the initial state)


def overlaps(phases: Sequence[Phase]) -> list[tuple[Phase, Phase]]:
    """Every (compiling phase, timed phase) pair whose wall-clock spans intersect: what
    --compile-jobs must never produce. The phases of one process run one after another, so
    any pair found comes from two processes (two rows, or two repeats of one)."""
    timed = [p for p in phases if p.name == "timed"]
    compiling = [p for p in phases if p.name in COMPILING]
    found = []
    for t in timed:
        for c in compiling:
            if c.start < t.start + t.seconds and t.start < c.start + c.seconds:
                found.append((c, t))
    return found


TIMING = ("warmup", "timed", "gpu_window", "profile")  # a case's turn alone on the host


@dataclasses.dataclass(frozen=True)
class ChipRound:
    """One round of the held-chip path (dew.bench.sweep.chip): the process that held the
    chip for it, from its opening to its last timed window."""

    number: int  # 1-based: the repeat it made of every case
    cases: int
    open_s: float  # jax.devices() in the holder
    load_s: float | None  # the programs loaded side by side: first load's start to last's end
    init_s: float  # the cases' states and batches put on the chip, summed
    timed_s: float  # warmups and timed windows, summed
    wall_s: float  # the opening's start to the last timed window's end


def chip_rounds(rows: Iterable[StepRow]) -> list[ChipRound]:
    """The record's held-chip rounds, one per repeat number that has an `open` phase (the
    holder's): what each round's wall clock went to. Empty for a record of another path."""
    by_round: dict[int, list[Phase]] = {}
    cases: dict[int, int] = {}
    for row in rows:
        for number, repeat in enumerate(row.repeats or [], start=1):
            by_round.setdefault(number, []).extend(repeat.phases or [])
            cases[number] = cases.get(number, 0) + 1
    rounds = []
    for number, phases in sorted(by_round.items()):
        opened = [p for p in phases if p.name == "open"]
        if not opened:
            continue
        start = min(p.start for p in opened)
        loads = [p for p in phases if p.name == "deserialize"]
        turns = [p for p in phases if p.name in TIMING]
        end = max((p.start + p.seconds for p in turns), default=start)
        load = (
            max(p.start + p.seconds for p in loads) - min(p.start for p in loads) if loads else None
        )
        rounds.append(ChipRound(
            number, cases[number], sum(p.seconds for p in opened), load,
            sum(p.seconds for p in phases if p.name == "init"),
            sum(p.seconds for p in turns), end - start,
        ))  # fmt: skip
    return rounds


def occupancy(rows: Iterable[StepRow]) -> dict[str, float]:
    """How a sweep's wall clock was spent, from its first phase to its last: the seconds in
    which N case processes were building their case at once (imports to init; keys "1",
    "2", ...), the seconds of timed turns ("timing") and the seconds of neither ("other":
    the parent's own work, processes starting). With --compile-jobs N, the seconds with
    fewer than N building are cores left idle while cases were still to compile."""
    building, timing = [], []
    for row in rows:
        for repeat in row.repeats or []:
            phases = repeat.phases or []
            build = [phase for phase in phases if phase.name not in TIMING]
            turn = [phase for phase in phases if phase.name in TIMING]
            building += [_span(build)] if build else []
            timing += [_span(turn)] if turn else []
    if not building and not timing:
        return {}
    events = sorted([(a, 1) for a, _ in building] + [(b, -1) for _, b in building])
    by_count: dict[str, float] = {}
    busy, previous = 0, 0.0  # read only once a span has begun
    for moment, change in events:
        if busy:
            by_count[str(busy)] = by_count.get(str(busy), 0.0) + moment - previous
        busy, previous = busy + change, moment
    spans = building + timing
    wall = max(b for _, b in spans) - min(a for a, _ in spans)
    timed = sum(b - a for a, b in timing)
    other = wall - timed - sum(by_count.values())
    return {**dict(sorted(by_count.items())), "timing": timed, "other": max(other, 0.0)}


def _span(phases: Sequence[Phase]) -> tuple[float, float]:
    """Wall-clock start and end of phases that ran one after another."""
    return phases[0].start, max(phase.start + phase.seconds for phase in phases)
