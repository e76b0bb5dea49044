"""Each row's history across records, what changed between consecutive runs, and where
its time changed (change points).

A series is one case (`row.label()` and batch) on one device group (kind, count,
processes) in one preset and compute dtype: the same model on the same hardware, so its
ms/step over the runs is one signal (a float32 run of a bfloat16 case is another series,
not a change in it). Its points are the records' rows that were timed, oldest first.

Change points, asv-style: ruptures' PELT over the log of the ms/step (a change is a
ratio, whatever the scale), with a BIC-like penalty scaled by the series' own noise
(the larger of the runs' 95% intervals and the robust spread of consecutive runs), so
that a noisy host needs a larger step to be flagged. A break is kept only when the
median after it differs from the median before it by more than the noise band (5%, the
band compare uses); a rejected break is merged away and the rest re-tested. A flagged
change names the first run after it and the stack differences to the run before.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from dew.bench.analysis.kinds import KINDS
from dew.bench.record.schema import StepRow
from dew.bench.record.stack import StackDifference, stack_differences
from dew.bench.site.records import Entry

BAND = 0.05  # a smaller relative change is never flagged (compare's default band)
PENALTY = 2.0  # x sigma^2 x log(n), the BIC's: PELT proposes, the step test decides
Z_CHANGE = 5.0  # a kept break: its step in standard errors of the noise within segments
DEFAULT_DTYPE = "bfloat16"  # the step tool's: a series of another names it in its title
MIN_POINTS = 4  # fewer runs than this have no history to break
MIN_SEGMENT = 2  # runs on each side of a change: one slow run (a busy host) is no change
Z95 = 1.96


@dataclasses.dataclass
class Point:
    entry: Entry
    row: StepRow
    value: float  # ms/step (p50 where a row has no ms/step)
    interval: tuple[float, float] | None
    diffs: list[StackDifference] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Change:
    index: int  # the first point after the change
    before: float  # median ms/step of the segment before
    after: float  # and after

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def percent(self) -> str:
        return f"{(self.ratio - 1) * 100:+.1f}%"


@dataclasses.dataclass
class Series:
    label: str
    batch: int | None
    device: str
    preset: str | None
    sample: str | None
    dtype: str | None
    points: list[Point]
    changes: list[Change] = dataclasses.field(default_factory=list)
    noise: float | None = None  # the sigma (log scale) the penalty was scaled by
    pending: str | None = None  # the latest run alone off its level: no change point yet

    @property
    def title(self) -> str:
        batch = f"batch {self.batch}" if self.batch is not None else "batch not recorded"
        dtype = f" · {self.dtype}" if self.dtype else ""
        return f"{self.device} · {self.preset or 'no preset'} · {batch}{dtype}"

    def change_at(self, index: int) -> Change | None:
        return next((c for c in self.changes if c.index == index), None)


def timing(row: StepRow) -> float | None:
    """The row's ms/step, or its p50 where only that was recorded; None when not timed."""
    if row.status != "ok":
        return None
    value = row.ms_per_step if row.ms_per_step is not None else row.p50_ms
    return value if value else None


def repeat_interval(interval, repeats) -> tuple[float, float] | None:
    """A row's 95% interval as the site shows and weighs it: none from fewer than two
    repeats (records made before schema 2's rule kept one from a single process's steps,
    which is not the run-to-run interval the column means)."""
    if not interval or not repeats or len(repeats) < 2:
        return None
    return (interval[0], interval[1])


def build_series(entries: list[Entry]) -> list[Series]:
    """Every timed step row of `entries` (oldest first) in its series, with the stack
    differences to the previous point and the change points; ordered by label, device."""
    by_key: dict[tuple, Series] = {}
    for entry in entries:
        if not KINDS[entry.record.kind].charted:  # the step's rows: a time per step
            continue
        for row in entry.record.rows:
            value = timing(row)
            if value is None:
                continue
            batch = row.key()[1]
            settings = entry.record.settings
            # Unstated is the default: the published rerun predates the field.
            dtype = settings.dtype if settings.dtype != DEFAULT_DTYPE else None
            key = (row.label(), batch, entry.device, settings.preset, row.sample, dtype)
            series = by_key.get(key)
            if series is None:
                series = by_key[key] = Series(row.label(), batch, *key[2:], points=[])
            interval = repeat_interval(row.ms_per_step_ci95, row.repeats)
            series.points.append(Point(entry, row, value, interval))
    for series in by_key.values():
        for previous, point in zip(series.points, series.points[1:], strict=False):
            diffs, unknown = stack_differences(point.entry.record, previous.entry.record)
            point.diffs = diffs
            point.unknown = unknown
        series.noise, series.changes = change_points(series.points)
        series.pending = latest_alone(series)
    return sorted(by_key.values(), key=lambda s: (s.label, s.device, s.preset or "", s.batch or 0))


def latest_alone(series: Series) -> str | None:
    """The latest run, when it alone leaves its level by more than the band and three times
    the noise: one run cannot be a change point (MIN_SEGMENT), but the user who just ran
    after a stack change should see it, and run again to confirm it."""
    start = series.changes[-1].index if series.changes else 0
    level = [p.value for p in series.points[start:-1]]
    if len(series.points) < 2 or len(level) < MIN_SEGMENT:
        return None
    median = statistics.median(level)
    latest = series.points[-1].value
    relative = latest / median - 1
    spread = noise(series.points[start:]) if len(series.points) - start >= 3 else 0.01
    if abs(relative) <= BAND or abs(math.log(latest / median)) <= 3 * spread:
        return None
    return f"latest run {relative * 100:+.1f}% off its level: run again to confirm a change"


def noise(points: list[Point], *, between: bool = True) -> float:
    """The series' noise on the log scale: the larger of the typical run's own spread (a
    95% interval is about 2 x 1.96 sigma wide) and the robust spread between consecutive
    runs (MAD of the differences, which one step barely moves), at least 1%."""
    logs = [math.log(p.value) for p in points]
    within = [
        (math.log(p.interval[1]) - math.log(p.interval[0])) / (2 * Z95)
        for p in points
        if p.interval and p.interval[0] > 0
    ]
    steps = [abs(b - a) for a, b in zip(logs, logs[1:], strict=False)]
    spread = 1.4826 * statistics.median(steps) / math.sqrt(2) if steps and between else 0.0
    return max(statistics.median(within) if within else 0.0, spread, 0.01)


def change_points(points: list[Point]) -> tuple[float | None, list[Change]]:
    """(sigma, changes) of a series' values; no changes under MIN_POINTS points."""
    if len(points) < MIN_POINTS:
        return None, []
    import numpy as np
    import ruptures  # loaded when a series is long enough to need it

    sigma = noise(points)
    logs = [math.log(p.value) for p in points]
    signal = np.array(logs).reshape(-1, 1)
    penalty = PENALTY * sigma**2 * math.log(len(points))
    pelt = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(signal)
    starts = [b for b in pelt.predict(pen=penalty) if b < len(points)]  # first point after
    floor = noise(points, between=False)
    while starts:  # drop the weakest break that is not a change, then test the rest again
        weak = [(z, i) for i, (z, real) in enumerate(_steps(logs, starts, floor)) if not real]
        if not weak:
            break
        del starts[min(weak)[1]]
    bounds = [0, *starts, len(points)]
    values = [p.value for p in points]
    medians = [statistics.median(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    changes = [Change(start, medians[i], medians[i + 1]) for i, start in enumerate(starts)]
    return sigma, changes


def _steps(logs: list[float], starts: list[int], floor: float) -> list[tuple[float, bool]]:
    """Per break: its step in standard errors (the noise pooled within the segments, at
    least `floor`) and whether it is a change: at least Z_CHANGE of them and, between the
    segments' medians, more than the band."""
    bounds = [0, *starts, len(logs)]
    segments = [logs[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    means = [statistics.fmean(s) for s in segments]
    residual = sum((x - m) ** 2 for s, m in zip(segments, means, strict=True) for x in s)
    freedom = len(logs) - len(segments)
    spread = max(math.sqrt(residual / freedom) if freedom else 0.0, floor)
    out = []
    for a, b, ma, mb in zip(segments, segments[1:], means, means[1:], strict=False):
        z = abs(mb - ma) / (spread * math.sqrt(1 / len(a) + 1 / len(b)))
        relative = abs(math.exp(statistics.median(b) - statistics.median(a)) - 1)
        out.append((z, z >= Z_CHANGE and relative > BAND))
    return out
