"""The noise a comparison assumes: for each row the process level, its own run level and
the whole run's shift, with their degrees of freedom and where they came from.

They are the device kind's, fitted from the records' own A/A history
(dew.bench.analysis.history; results/noise.json caches the fit of results/), each row's
shrunk toward its kind's; a kind with no history gets a stated weak prior of its platform
(`PRIORS`), never another kind's levels, and two records of two kinds get their
platform's prior.
"""

from __future__ import annotations

import dataclasses
import math

from dew.bench.analysis import history

# A kind without history: weak priors, worth PRIOR_PSEUDO_DF degrees of freedom each.
# GPU: a step repeats within about 1% on a quiet card (the RTX 4080's same-commit rerun in
# results/published: 83.0 against 83.26 ms, 0.3%); 2% process, 1% run and shift is wider
# than that. CPU: the 2-core VM's first A/A records read 10-12% process and about 5% run.
PRIOR_PSEUDO_DF = 2.0
PRIORS = {"gpu": (0.02, 0.01, 0.01), "cpu": (0.10, 0.05, 0.05)}  # process, run, shift


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


def prior(platform_name: str | None, kind: str | None) -> Noise:
    """The weak prior of a kind with no history (PRIORS)."""
    family = "cpu" if platform_name in (None, "cpu") else "gpu"
    process, run, shift = PRIORS[family]
    source = (f"{kind or 'this device'} has no A/A history: the weak {family.upper()} prior "
              f"(process {process:.0%}, run {run:.0%}, shift {shift:.0%}, "
              f"{PRIOR_PSEUDO_DF:g} df each)")  # fmt: skip
    return Noise(process, PRIOR_PSEUDO_DF, run, PRIOR_PSEUDO_DF, shift, PRIOR_PSEUDO_DF, source)


@dataclasses.dataclass(frozen=True)
class NoiseModel:
    """The noise one comparison assumes: the kind's levels, and each row's shrunk ones."""

    pooled: Noise
    rows: dict[str, Noise]
    source: str

    def for_row(self, label: str) -> Noise:
        return self.rows.get(label, self.pooled)


def model_for(kind: str | None, platform_name: str | None, table: dict) -> NoiseModel:
    """The noise of `kind` from a fitted table (`fit`'s), or its prior."""
    entry = table.get(kind) if kind is not None else None
    if not entry or (entry["process_df"] <= 0 and entry["run_df"] <= 0):
        noise = prior(platform_name, kind)
        return NoiseModel(noise, {}, noise.source)
    source = (f"{kind}: {entry['records']} records in {len(entry['groups'])} A/A groups "
              f"(process {entry['process']:.1%} over {entry['process_df']:g} df, run "
              f"{entry['run']:.1%} over {entry['run_df']:g} df, shift {entry['shift']:.1%} "
              f"over {entry['shift_df']:g} df)")  # fmt: skip
    fallback = prior(platform_name, kind)

    def level(value: float, df: float, default: float) -> tuple[float, float]:
        return (value, df) if df > 0 else (default, PRIOR_PSEUDO_DF)

    shift = level(entry["shift"], entry["shift_df"], fallback.shift)
    pooled = Noise(*level(entry["process"], entry["process_df"], fallback.process),
                   *level(entry["run"], entry["run_df"], fallback.run), *shift, source)  # fmt: skip
    rows = {
        label: Noise(row["process"], pooled.process_df, row["run"], pooled.run_df, *shift,
                     source)
        for label, row in entry["rows"].items()
    }  # fmt: skip
    return NoiseModel(pooled, rows, source)


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
    platforms = (platform_of(run), platform_of(reference))
    if kind[0] != kind[1]:
        noise = prior("cpu" if "cpu" in platforms else "gpu", f"{kind[0]} against {kind[1]}")
        return NoiseModel(noise, {}, noise.source)
    return model_for(kind[0], platforms[0], kinds)
