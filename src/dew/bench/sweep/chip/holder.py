"""The process that holds the chip for one round: every compiled case loaded and timed.

It opens the chip, says so (messages.Opened), and then takes one TimeJob at a time (a case,
its saved program's folder, what its compile measured), answering each with the case's row
(Timed): its state and batch put on the chip, then the same windows, util and loss checks
as every case (dew.bench.sweep.case_run.measure). The run closes the channel when the round
is over.

The first TimeJob names every program the holder will time (`load_ahead`): they are loaded
onto the chip (dew.train.executables.Program: deserialized, seconds a program) side by
side in threads before any case is timed, so that the round pays the longest load rather
than their sum, and no load runs while a case is timed. Each is unloaded after its case.

A row's peak HBM: memory_stats' peak_bytes_in_use only rises within a process, so it is
the row's own only where this row raised it above every earlier row of the process; else
the row's peak stays null, saying why. `readings` beside each row carry the peak and the
bytes in use, which the run orders the next round by.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import os
import sys
import time
from typing import Any

from dew.bench.common.units import GIB
from dew.bench.runtime import protocol
from dew.bench.runtime.phases import PhaseClock
from dew.bench.sweep.case_run import Prepared, failure, final_row, join, measure
from dew.bench.sweep.chip.messages import Compiled, Opened, Readings, Timed, TimeJob
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.bench.sweep.timing import block

NAME = "the process holding the chip"


def argv() -> list[str]:
    return [sys.executable, "-c", "from dew.bench.sweep.chip.holder import main; main()"]


def job(
    case: Case,
    options: Options,
    folder: str,
    compiled: Compiled,
    load_ahead: list[str] | None = None,
) -> TimeJob:
    """A case to time; `load_ahead`: the folders of every program this holder will time
    (on its first job), loaded side by side before the first is timed."""
    return TimeJob(case, options, folder, compiled, load_ahead or [])


def main() -> None:
    parent = protocol.ToParent.from_environment()
    began, start = time.time(), time.perf_counter()
    import jax

    devices = jax.devices()
    opened = time.perf_counter() - start
    parent.send(Opened(open_s=opened, began=began))
    highest = 0  # the process's peak_bytes_in_use before the current row
    loading: dict[str, concurrent.futures.Future] = {}  # folder -> its load
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        while (work := parent.receive(TimeJob)) is not None:
            for folder in work.load_ahead:
                loading.setdefault(folder, pool.submit(_load, folder))
            concurrent.futures.wait(loading.values())  # none loads while a case is timed
            load = loading.pop(work.folder, None) or pool.submit(_load, work.folder)
            row, readings = time_case(work, devices, highest, load, len(loading))
            highest = max(highest, readings.peak_bytes or 0)
            parent.send(Timed(row, readings))
            del load
            gc.collect()


def _load(folder: str) -> tuple[Any, float, float]:
    """The program in `folder` loaded onto the chip: (Program, start, seconds)."""
    from dew.train.executables import Program

    began, start = time.time(), time.perf_counter()
    return Program(folder), began, time.perf_counter() - start


def time_case(
    work: TimeJob,
    devices: list[Any],
    highest: int,
    load: concurrent.futures.Future,
    others_loaded: int,
) -> tuple[Any, Readings]:
    """One case of the round (its program's `load` begun): its row and what memory_stats
    read after it. `others_loaded`: programs still loaded for later cases."""
    case, options, compiled = work.case, work.options, work.compiled
    figures = dataclasses.replace(compiled.figures)  # this repeat's, from the compile's
    clock = PhaseClock()
    error = diverged = None
    readings = Readings()
    try:
        program, began, seconds = load.result()
        clock.add("deserialize", began, seconds)
        before = _memory(devices[0]).in_use_bytes
        with clock.phase("init"):
            state, batch = block((program.init(), program.batch()))
        prepared = Prepared(case, program, state, batch, figures, compiled.tokens, devices)
        repeat, diverged = measure(prepared, options, figures, clock)
        readings = _memory(devices[0])
        figures.peak_gib, note = own_peak(readings, highest)
        figures.note = join(figures.note, note, _beside(others_loaded, before, figures.peak_gib))
        repeat.phases = [*compiled.phases, *clock.phases]  # measure put it in figures
        del prepared, program, state, batch
    except Exception as failed:
        error = failure(failed)
    return final_row(case, figures, error, diverged), readings


def own_peak(readings: Readings, highest: int) -> tuple[float | None, str | None]:
    """The row's peak GiB where it raised the process's peak above `highest` (every earlier
    row's), else None and why."""
    peak = readings.peak_bytes
    if peak is None:
        return None, None
    if peak > highest:
        return peak / GIB, None
    return None, (
        f"peak HBM not its own: an earlier case in its process peaked at {highest / GIB:.2f} "
        "GiB, and the allocator's peak only rises"
    )


def _beside(others_loaded: int, before: int | None, peak_gib: float | None) -> str | None:
    """What a row's peak holds besides the case: the programs loaded for later cases, where
    the allocator counts them (on a v5e it does not: 0.00 GiB in use before a row's state,
    with 17 programs loaded) at 1% of the peak or more."""
    if not others_loaded or peak_gib is None or before is None:
        return None
    if before < 0.01 * peak_gib * GIB:
        return None
    return (
        f"its peak includes {others_loaded} programs loaded for later cases "
        f"({before / GIB:.2f} GiB in use before its state was placed)"
    )


def _memory(device: Any) -> Readings:
    stats = device.memory_stats() or {}
    return Readings(stats.get("peak_bytes_in_use"), stats.get("bytes_in_use"))
