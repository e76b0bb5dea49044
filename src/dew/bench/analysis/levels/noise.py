"""The noise a comparison assumes: for each row the process level, its own run level and
the whole run's shift, with their degrees of freedom and where they came from.

They are the device kind's, fitted from the records' own A/A history
(dew.bench.analysis.levels.history; results/noise.json caches the fit of results/), each row's
shrunk toward its kind's; a kind with no history gets a stated weak prior of its platform
(`dew.platforms`: each platform's `noise`), never another kind's levels, and two records of
two kinds get the wider prior of their platforms.
"""

from __future__ import annotations

import dataclasses
import math

from dew import platforms
from dew.bench.analysis.levels import history, spread
from dew.bench.analysis.tables import level

# A kind without history: weak priors of its platform, worth PRIOR_PSEUDO_DF degrees of
# freedom each (process, run, shift), each with its source and how far the project's own
# records bear it out (docs/conventions.md, "The priors", says the same for users).
PRIOR_PSEUDO_DF = 2.0


@dataclasses.dataclass(frozen=True)
class Noise:
    """The levels one row's comparison assumes, as standard deviations of the log figure:
    the process level (the prior that moderates the repeats' own variance), the row's own
    run level and the shift its whole record shares, each with its degrees of freedom;
    `source` says where they came from."""

    process: float
    process_df: float
    run: float
    run_df: float
    shift: float
    shift_df: float
    source: str
    seen: bool = True  # False: a row the history does not hold (its kind's typical level)


def prior(platform_name: str | None, kind: str | None) -> Noise:
    """The weak prior of a kind with no history: its platform's (dew.platforms)."""
    platform = platforms.get(platform_name)
    process, run, shift, origin = platform.noise
    source = (f"{kind or 'this device'} has no A/A history: the weak {platform.name.upper()} "
              f"prior (process {process:.1%}, run {run:.1%}, shift {shift:.1%}, "
              f"{PRIOR_PSEUDO_DF:g} df each; from {origin})")  # fmt: skip
    return Noise(process, PRIOR_PSEUDO_DF, run, PRIOR_PSEUDO_DF, shift, PRIOR_PSEUDO_DF, source)


@dataclasses.dataclass(frozen=True)
class NoiseModel:
    """The noise one comparison assumes: the kind's levels, and each row's shrunk ones."""

    pooled: Noise
    rows: dict[str, Noise]
    source: str
    unseen: Noise | None = None  # a row the history does not hold; None: the pooled levels

    def for_row(self, label: str) -> Noise:
        return self.rows.get(label, self.unseen or self.pooled)


def model_for(kind: str | None, platform_name: str | None, table: dict) -> NoiseModel:
    """The noise of `kind` from a fitted table (`fit`'s), or its prior."""
    entry = table.get(kind) if kind is not None else None
    left_out = getattr(table, "left_out", None)  # history_scope.Kinds: what the fit left out
    if not entry or (entry["process_df"] <= 0 and entry["run_df"] <= 0):
        noise = prior(platform_name, kind)
        if left_out is not None:
            noise = dataclasses.replace(noise, source=f"{noise.source}; "
                                        f"{left_out.words(kind, fitted=False)}")  # fmt: skip
        return NoiseModel(noise, {}, noise.source)
    source = (f"{kind}: {entry['records']} records in {len(entry['groups'])} A/A groups "
              f"(process {level(entry['process'])} over {entry['process_df']:g} df, run "
              f"{level(entry['run'])} over {entry['run_df']:g} df, shift {level(entry['shift'])} "
              f"over {entry['shift_df']:g} df)")  # fmt: skip
    for name in entry.get("floored", ()):
        source += f"; {name} at its standard error (estimated at about 0, not known to be 0)"
    fallback = prior(platform_name, kind)

    def fitted_or_prior(value: float, df: float, default: float) -> tuple[float, float]:
        return (value, df) if df > 0 else (default, PRIOR_PSEUDO_DF)

    shift = fitted_or_prior(entry["shift"], entry["shift_df"], fallback.shift)
    run = fitted_or_prior(entry["run"], entry["run_df"], fallback.run)
    confounded = entry["run_df"] <= 0 < entry["shift_df"]
    if confounded:
        # Records of one row: the spread between them is run level and shift at once, fitted
        # as the shift; the run level is taken at it too (never below it, never a prior).
        run = shift
        source += "; one row a record: the run level not told from the shift, taken at it"
    if left_out is not None:
        source += f"; {left_out.words(kind)}"
    pooled = Noise(*fitted_or_prior(entry["process"], entry["process_df"], fallback.process), *run,
                   *shift, source)  # fmt: skip
    # each row at its own level: its history's, shrunk toward its kind's rows as far as they
    # agree (history.row_levels), worth that many degrees of freedom
    rows = {
        label: Noise(row["process"], row["process_df"] if "rows_process" in entry
                     else pooled.process_df, pooled.run if confounded else row["run"],
                     pooled.run_df, *shift, source)
        for label, row in entry["rows"].items()
    }  # fmt: skip
    unseen = None
    if "rows_process" in entry:
        typical = entry["rows_process"] or pooled.process
        # its run level the kind's share of its process level (row_noise.scaled_run moves it
        # with the row's own repeats)
        run_level = pooled.run if confounded else math.sqrt(entry["run_ratio"]) * typical
        unseen = Noise(typical, spread.UNSEEN_DF, run_level, pooled.run_df, *shift, source,
                       seen=False)  # fmt: skip
        source += (
            f"; a row without A/A history of its own: its kind's typical process level "
            f"{level(typical)} worth {spread.UNSEEN_DF:g} df against its repeats"
        )
        pooled, unseen = (dataclasses.replace(n, source=source) for n in (pooled, unseen))
    return NoiseModel(pooled, rows, source, unseen)


def auto_noise(kind: str | None, platform_name: str | None):
    """For --repeats auto (dew.bench.analysis.repeats.auto_stop): per row the run levels a
    comparison with another run like this one carries (its own and the shift, in one
    stats.Noise), from the cached fit of results/ or the kind's prior."""
    from dew.bench.analysis.stats import Noise as Carried

    model = model_for(kind, platform_name, history.kinds_table(None))

    class PerRow:
        def for_row(self, label: str) -> Carried:
            n = model.for_row(label)
            df = min(n.run_df, n.shift_df) if n.run or n.shift else math.inf
            return Carried(math.hypot(n.run, n.shift), n.process, df, model.source)

    return PerRow()


def platform_of(record) -> str | None:
    """A validated record's platform (cpu, gpu, ...)."""
    devices = record.environment.devices
    return devices.platform if devices is not None else None


def for_records(run, reference, kinds: dict | None = None, exclude=()) -> NoiseModel:
    """The levels two validated records are compared at: their device kind's (its
    history's fit, or its prior); of two kinds, the prior of their platform, never one
    kind's levels for another."""
    kinds = history.kinds_table(None, exclude) if kinds is None else kinds
    kind = [r.environment.devices.kind if r.environment.devices else None
            for r in (run, reference)]  # fmt: skip
    names = (platform_of(run), platform_of(reference))
    if kind[0] != kind[1]:
        wider = max(names, key=lambda name: platforms.get(name).noise.process)
        noise = prior(wider, f"{kind[0]} against {kind[1]}")
        left_out = getattr(kinds, "left_out", None)
        if left_out is not None and left_out.uncommitted:
            noise = dataclasses.replace(noise, source=f"{noise.source}; {left_out.unread()}")
        return NoiseModel(noise, {}, noise.source)
    return model_for(kind[0], names[0], kinds)
