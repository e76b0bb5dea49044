"""Where a case's process spends its time: named phases with their wall-clock starts.

A sweep's time is mostly not the timed windows: process start and imports, tracing and
lowering, the XLA compile, the FLOP count, the state's initialisation. Every case process
times its phases with one `PhaseClock`; the phases land in the repeat's `phases` (schema 3,
names in dew.bench.schema.PHASES), the table ends with their totals (dew.bench.report), and
the wall-clock starts show that no compile ran while another case was timed
(`overlaps`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence

from dew.bench.schema import Phase, StepRow


class PhaseClock:
    """The phases of one process, in the order they ran."""

    def __init__(self):
        self.phases: list[Phase] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name`; a block that raises is still recorded."""
        began, start = time.time(), time.perf_counter()
        try:
            yield
        finally:
            self.add(name, began, time.perf_counter() - start)

    def add(self, name: str, began: float, seconds: float) -> None:
        self.phases.append(Phase(name=name, start=round(began, 3), seconds=round(seconds, 3)))

    def dump(self) -> list[dict]:
        return [phase.model_dump() for phase in self.phases]


def of_rows(rows: Iterable[StepRow]) -> list[Phase]:
    """Every phase of every repeat of `rows` (none for rows of records before schema 3)."""
    return [phase for row in rows for repeat in row.repeats or [] for phase in repeat.phases or []]


def totals(phases: Iterable[Phase]) -> dict[str, float]:
    """Seconds per phase name over many phases (a sweep's rows), in PHASES order."""
    from dew.bench.schema import PHASES

    sums: dict[str, float] = {}
    for phase in phases:
        sums[phase.name] = sums.get(phase.name, 0.0) + phase.seconds
    return {name: sums[name] for name in PHASES if name in sums}


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
