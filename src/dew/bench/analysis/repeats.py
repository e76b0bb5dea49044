"""A row from its repeats: each repeat a fresh process with its own compile and windows.

The row's ms/step and p10/p50/p90 are medians over its repeats of each repeat's own
figures; samples/s, tokens/s and util follow from that ms/step; the row keeps every
repeat's raw samples (`repeats`), the 95% interval of its ms/step (dew.bench.analysis.stats),
its noise warnings, and the fingerprint its repeats share (or a warning that they compiled
otherwise: dew.bench.analysis.programs). With one repeat the figures are that process's,
as before schema 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dew.bench.analysis import programs, stats
from dew.bench.record.schema import DataRepeat, DataRow, StepRepeat, StepRow

DIGITS = 4  # raw samples kept to 0.1 us: a 100-step repeat is about 1 KB of JSON
AUTO_BAND, AUTO_ALPHA = 0.05, 0.05  # --repeats auto aims at compare's defaults


def step_repeat(
    ms_per_step: float,
    synced_ms: Sequence[float],
    compile_s: float | None,
    host_ms: float | None = None,
    host_cores: float | None = None,
):
    """One repeat's raw samples, as the child process measured them."""
    return StepRepeat(
        ms_per_step=round(ms_per_step, DIGITS),
        synced_ms=[round(value, DIGITS) for value in synced_ms],
        compile_s=compile_s,
        host_ms=None if host_ms is None else round(host_ms, DIGITS),
        host_cores=None if host_cores is None else round(host_cores, 3),
    )


def with_host_readings(row, busy: str | None, probe_ms: float | None, load: float | None = None):
    """The step or loader row with the host readings taken before its repeat on each of its
    repeats: why the idle check found the host busy (None: it did not), the CPU other
    processes used then (cores; None: not read) and the host probe's ms
    (dew.bench.runtime.hostprobe; None: not read). A row without repeats is returned as it is."""
    if not row.repeats:
        return row
    probe = None if probe_ms is None else round(probe_ms, DIGITS)
    cores = None if load is None else round(load, 3)
    update = {"host_busy": busy, "host_probe_ms": probe, "host_load_cores": cores}
    return row.model_copy(update={"repeats": [r.model_copy(update=update) for r in row.repeats]})


def summarize_step(
    row: StepRow, repeats: list[StepRepeat], first: StepRow | None = None
) -> StepRow:
    """`row` with its figures the medians over `repeats`, the interval and the warnings."""
    if not repeats:
        return row
    figures = [repeat.ms_per_step for repeat in repeats]
    samples = [repeat.synced_ms for repeat in repeats]
    ms = float(np.median(figures))
    update: dict[str, Any] = {"repeats": repeats, "ms_per_step": ms}
    for name, q in (("p10_ms", 10), ("p50_ms", 50), ("p90_ms", 90)):
        update[name] = float(np.median([np.percentile(s, q) for s in samples if len(s)]))
    for name in ("samples_per_s", "tokens_per_s", "util", "work_util"):  # inversely to time
        value = getattr(row, name)
        if value is not None and row.ms_per_step:
            update[name] = value * row.ms_per_step / ms
    compiles = [repeat.compile_s for repeat in repeats if repeat.compile_s is not None]
    if compiles:
        update["compile_s"] = float(np.median(compiles))
    peaks = [r.peak_gib for r in (first, row) if r is not None and r.peak_gib is not None]
    if peaks:
        update["peak_gib"] = max(peaks)
    interval = stats.row_interval(figures)
    update["ms_per_step_ci95"] = list(interval) if interval else None
    failed = [
        w for w in (first.warnings if first else []) if w.startswith("repeat ") and "failed" in w
    ]
    update["fingerprint"] = programs.shared(repeats)
    compiled = programs.repeats_warning(repeats)
    update["warnings"] = [
        *stats.noise_warnings(figures, samples),
        *([compiled] if compiled else []),
        *busy_warnings(repeats),
        *failed,
        *loss_warnings(row),
    ]
    return StepRow.model_validate({**row.model_dump(), **update})


def loss_warnings(row: StepRow) -> list[str]:
    """A row kept with a loss that is not finite (its run said the step may diverge: a
    row's failure otherwise, dew.bench.sweep.divergence); its note says at which step."""
    if row.loss_finite is not False:
        return []
    return ["the loss is not finite: the step is known to diverge (--loss-may-diverge)"]


def auto_stop(row: StepRow, noise: stats.Noise, *, tests: int, target: float) -> str | None:
    """Why `--repeats auto` adds no more repeats to `row` (None: it goes on): it failed,
    its detectable change (against another run like this one, at compare's default band
    and alpha over `tests` rows) reached `target` (a fraction), or the run level alone
    keeps it above the target whatever the repeats."""
    if row.status != "ok" or not row.repeats:
        return "failed" if row.status != "ok" else None
    figures = [repeat.ms_per_step for repeat in row.repeats]
    if len(figures) < stats.MIN_REPEATS:
        return None
    this = stats.side(figures)
    detect = stats.detectable(this, this, noise, tests=tests, band=AUTO_BAND, alpha=AUTO_ALPHA)
    if detect.mde <= target:
        return f"MDE {detect.mde:.1%} <= target {target:.0%} at {len(figures)} repeats"
    if detect.floor > target:
        return (
            f"MDE {detect.mde:.1%} at {len(figures)} repeats; the run level "
            f"({noise.run:.1%}) keeps it above {detect.floor:.1%} whatever the repeats, "
            f"over the target {target:.0%}"
        )
    return None


def busy_warnings(repeats: Sequence[StepRepeat | DataRepeat]) -> list[str]:
    return [
        f"repeat {index}: the host was busy ({repeat.host_busy})"
        for index, repeat in enumerate(repeats, start=1)
        if repeat.host_busy
    ]


# --- the loader ----------------------------------------------------------------------------


def summarize_data(row: DataRow, repeats: list[DataRepeat]) -> DataRow:
    """A loader row with its figures the medians over `repeats` (ms per batch decides)."""

    if not repeats:
        return row
    per_batch = [1e3 * row.batch / repeat.samples_per_s for repeat in repeats]
    samples = [repeat.intervals_ms for repeat in repeats]
    ms = float(np.median(per_batch))
    interval = stats.row_interval(per_batch)
    update: dict[str, Any] = {
        "repeats": repeats,
        "samples_per_s": 1e3 * row.batch / ms,
        "samples_per_s_ci95": None
        if interval is None
        else [1e3 * row.batch / interval[1], 1e3 * row.batch / interval[0]],
        "p50_ms": float(np.median([np.percentile(s, 50) for s in samples])),
        "p95_ms": float(np.median([np.percentile(s, 95) for s in samples])),
        "warnings": stats.noise_warnings(per_batch, samples, unit="ms/batch")
        + busy_warnings(repeats),
    }
    firsts = [repeat.first_batch_s for repeat in repeats if repeat.first_batch_s is not None]
    if firsts:
        update["first_batch_s"] = float(np.median(firsts))
    return DataRow.model_validate({**row.model_dump(), **update})
