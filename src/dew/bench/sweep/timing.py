"""THE timing loop of the step benchmark, as docs/conventions.md defines the numbers.

warmup (untimed) -> dispatch window: `steps` steps back to back, one block at the end,
divided by `steps` (ms/step: what a training loop that dispatches ahead sees) -> synced
window, a block after every step (one time per step: p10/p50/p90), in which each step
call's own return is timed too: the host's cost of issuing a step with the device's queue
empty (host_ms), which says how much of a step's time is the host's.

The synced window is `steps` long where that spans SYNCED_SPAN_S or less at the dispatch
window's pace, else cut to what spans it, never below SYNCED_MIN_STEPS: its figures are
percentiles and a median, which 20 steps or a second of them settle, and on a slow row the
other 80 steps were most of the case's time (a 65 ms step: 6.5 s of 13).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dew.bench.runtime.phases import PhaseClock

SYNCED_SPAN_S = 1.0  # the synced window's length in time, where `steps` would be longer
SYNCED_MIN_STEPS = 20  # never fewer (or `steps`, where that is fewer)


@dataclasses.dataclass(frozen=True)
class Timings:
    ms_per_step: float  # dispatch window: total / steps
    synced_ms: tuple[float, ...]  # synced window: one figure per step
    host_ms: float | None = None  # median time for a step call to return, the queue empty
    host_cores: float | None = None  # this process's CPU over the dispatch window, in cores

    def percentiles(self) -> dict[str, float]:
        """p10/p50/p90 of the synced window (numpy's linear interpolation)."""
        return percentiles(self.synced_ms)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10_ms": float(p10), "p50_ms": float(p50), "p90_ms": float(p90)}


def block(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def time_steps(
    step: Callable[[Any, Any], tuple[Any, Any]],
    state: Any,
    batch: Any,
    *,
    steps: int,
    warmup: int,
    clock: PhaseClock | None = None,
    on_step: Callable[[Any], None] | None = None,
) -> tuple[Any, Any, Timings]:
    """Warmup, dispatch window, synced window. Returns (state, metrics, timings).

    `step(state, batch) -> (state, metrics)` may donate `state`; it is threaded through.
    Nothing but the step call and `on_step(metrics)` (every step's, in order: it must not
    wait for the device, e.g. keep a reference to the loss) runs inside the dispatch
    window. `clock` times the warmup and the two windows together as phases "warmup" and
    "timed" (its bookkeeping runs outside).
    """
    clock = clock or PhaseClock()
    on_step = on_step or _ignore
    metrics = None
    # A host-bound step pays for each full collection a walk over every object alive in
    # the process: the harness's (loaded programs, other cases) as much as its own. Frozen
    # first, they are left out; the steps' own garbage is collected as in any loop.
    gc.collect()
    gc.freeze()
    try:
        with clock.phase("warmup"):
            for _ in range(warmup):
                state, metrics = step(state, batch)
                on_step(metrics)
            block((state, metrics))
        with clock.phase("timed"):
            state, metrics, timings = _windows(step, state, batch, steps, on_step)
    finally:
        gc.unfreeze()
    return state, metrics, timings


def _ignore(metrics: Any) -> None:
    pass


def _windows(step, state, batch, steps: int, on_step) -> tuple[Any, Any, Timings]:
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
        on_step(metrics)
    block((state, metrics))
    elapsed = time.perf_counter() - start
    cores = (time.process_time() - cpu) / elapsed if elapsed > 0 else None
    ms_per_step = elapsed * 1e3 / steps

    synced, issued = [], []
    for _ in range(synced_steps(steps, ms_per_step)):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        returned = time.perf_counter()
        block((state, metrics))
        synced.append((time.perf_counter() - start) * 1e3)
        issued.append((returned - start) * 1e3)
        on_step(metrics)
    return state, metrics, Timings(ms_per_step, tuple(synced), float(np.median(issued)), cores)


def synced_steps(steps: int, ms_per_step: float) -> int:
    """The synced window's steps: `steps`, cut to what spans SYNCED_SPAN_S at `ms_per_step`
    but never below SYNCED_MIN_STEPS (nor above `steps`)."""
    if ms_per_step <= 0:
        return steps
    spanning = math.ceil(SYNCED_SPAN_S * 1e3 / ms_per_step)
    return min(steps, max(SYNCED_MIN_STEPS, spanning))
