"""Is the difference real? The statistics behind every row's interval and every verdict.

A row's figure moves at three levels (docs/conventions.md states the model for users):
the steps inside one process, the processes of one run (its repeats: a fresh compile
each) and the runs (records made at different times: the host's hour, what XLA chose).
On the log scale a repeat's figure is  y = mu + b_run + e_process. A repeat's figure is
already the mean of its window, so its steps sit inside e_process: they feed the noise
warnings, never a second resampling of what the repeat figures already hold.

- **A row's interval** (`row_interval`): the t-interval of the mean of its repeats' logs,
  exp(mean ± t·s/√n): where this run's processes centre. With one repeat there is none.
- **Two rows** (`compare_sides`): d = the difference of the sides' mean logs, the ratio
  exp(d). Its variance is each side's process term (Welch: s²/n a side) plus the run level,
  2·σ_run² (each record has its own b_run; none when the sides were interleaved), with
  Welch-Satterthwaite's degrees of freedom. A side with one process (a published table, a
  plain run) is one draw: it takes the other side's process variance, which makes the
  interval a prediction interval; with one process on both sides the noise table's process
  level stands in (`Noise`). Closed forms, no resampling: the result is deterministic, and
  swapping the sides negates d, so ratios are reciprocal and intervals and verdicts mirror.
- **Verdicts** (`verdict`): the band is symmetric in log space, [1/(1+b), 1+b].
  `slower`/`faster` when the whole interval lies beyond it AND the two-sided t-test's p,
  corrected over the rows by Holm-Bonferroni (`holm`), is under alpha (criterion's rule
  plus a family-wise error rate); `same` when the whole interval lies inside it; otherwise
  `undecided`, saying why.
- **Detectable effect** (`Detectable`): the smallest change the verdict rule calls with 80%
  power at the row's noise, and how many repeats a side a target needs; with the run level
  included it has a floor that no number of repeats goes below.
- **Paired rounds** (`Paired`): A and B interleaved, round by round: a one-sample t on the
  logs of the per-round ratios (the run level cancels within a round), computed by
  dew.bench.analysis.judge.paired_arrays.

scipy is imported inside the functions that test (`tails`): every case's process
imports this module (through dew.bench.analysis.repeats) and would pay for it for nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from dew.bench.analysis.tails import norm_ppf, t_ppf, t_sf

CONFIDENCE = 0.95
POWER = 0.80  # of a detectable effect
SEED = 0  # the host-drift bootstrap's; everything else is closed form
RESAMPLES = 2000
MIN_REPEATS = 3  # fewer draw a warning: a variance from two processes is a guess
WIDE_CV = 0.10  # a repeat whose steps vary this much (std / mean) is noisy
WIDE_TAIL = 1.15  # p90 / p50 of the steps
DISAGREES = 0.10  # a repeat this far from the median of the repeats
MAX_REPEATS_SHOWN = 1000  # `repeats_for` searches no further


# --- the noise a comparison assumes ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Noise:
    """The spread of a row's log figure that two records' repeats cannot show.

    `run`: the run level σ_run (0 when the sides were interleaved); `process`: the process
    level, used only where neither side has two repeats; `df`: the degrees of freedom of
    their estimate (inf: taken as known); `source`: where they came from, for the report."""

    run: float
    process: float
    df: float
    source: str


# Two sides measured round by round on one host (nox -s ab): the run level cancels.
INTERLEAVED = Noise(0.0, 0.0, math.inf, "interleaved rounds: the run level cancels")


# --- one side -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Side:
    """One row's repeats on the log scale: the mean of the logs, their variance, the count."""

    mean: float
    var: float | None  # sample variance (ddof 1); None with one repeat
    n: int


def side(figures: Sequence[float]) -> Side:
    """The log summary of a row's repeat figures (each > 0)."""
    logs = np.log(np.asarray(figures, dtype=float))
    if logs.size == 0 or not np.all(np.isfinite(logs)):
        raise ValueError("a side needs at least one positive, finite figure")
    var = float(np.var(logs, ddof=1)) if logs.size > 1 else None
    return Side(float(logs.mean()), var, int(logs.size))


@functools.lru_cache(maxsize=65536)  # the same quantiles recur across rows and pairs
def _t(q: float, df: float) -> float:
    return float(t_ppf(q, df)) if math.isfinite(df) else float(norm_ppf(q))


def row_interval(figures: Sequence[float]) -> tuple[float, float] | None:
    """The 95% t-interval of where this run's processes centre (the geometric mean of the
    repeat figures); None with one repeat."""
    s = side(figures)
    if s.var is None:
        return None
    half = _t(0.5 + CONFIDENCE / 2, s.n - 1) * math.sqrt(s.var / s.n)
    return math.exp(s.mean - half), math.exp(s.mean + half)


# --- two sides ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Difference:
    """Run against reference on one row; `ratio` > 1 means the run takes longer."""

    ratio: float  # exp(d): the ratio of the geometric means of the repeats
    low: float  # its 95% interval
    high: float
    se: float  # of d, on the log scale
    df: float
    p_value: float | None  # two-sided t-test of d = 0, before Holm; None: no spread at all
    repeats: tuple[int, int]  # (run, reference)
    one_draw: str | None = None  # which side has one process ("run", "reference", "both")

    @property
    def log_ratio(self) -> float:
        return math.log(self.ratio)


def differences(
    run_mean, run_var, run_n, ref_mean, ref_var, ref_n, noise: Noise
) -> dict[str, np.ndarray]:
    """The comparisons of many rows at once (arrays; a variance is NaN with one repeat):
    log ratio `d`, `se`, `df`, interval `low`/`high` (log scale) and two-sided `p` (NaN
    without spread). The one implementation behind `compare_sides` and the calibration."""
    run_mean, run_var, run_n, ref_mean, ref_var, ref_n = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (run_mean, run_var, run_n, ref_mean, ref_var,
                                               ref_n))
    )  # fmt: skip
    both = ~np.isnan(run_var) & ~np.isnan(ref_var)
    # One side with one process borrows the other's variance (a prediction interval);
    # neither with two takes the noise table's process level.
    borrowed = np.where(np.isnan(run_var), ref_var, run_var)
    borrowed_df = np.where(np.isnan(run_var), ref_n - 1, run_n - 1)
    neither = np.isnan(borrowed)
    borrowed = np.where(neither, noise.process**2, borrowed)
    borrowed_df = np.where(neither, noise.df, borrowed_df)
    inverse = 1 / run_n + 1 / ref_n
    with np.errstate(invalid="ignore", divide="ignore"):
        v_run, v_ref = run_var / run_n, ref_var / ref_n
        process = np.where(both, v_run + v_ref, borrowed * inverse)
        run_level = 2 * noise.run**2
        var = process + run_level
        welch = v_run**2 / (run_n - 1) + v_ref**2 / (ref_n - 1)
        pooled = (borrowed * inverse) ** 2 / borrowed_df
        denominator = np.where(both, welch, pooled) + (
            run_level**2 / noise.df if run_level > 0 else 0.0
        )
        df = np.where(denominator > 0, var**2 / denominator, np.inf)
        se = np.sqrt(var)
        d = run_mean - ref_mean
        half = t_ppf(0.5 + CONFIDENCE / 2, df) * se
        p = np.where(se > 0, 2 * t_sf(np.abs(d) / se, df), np.nan)
    half = np.where(se > 0, half, 0.0)
    return {"d": d, "se": se, "df": df, "low": d - half, "high": d + half, "p": p}


def compare_sides(run: Side, ref: Side, noise: Noise) -> Difference:
    """The ratio run / reference with its interval and test (the module docstring)."""
    nan = float("nan")
    out = differences(run.mean, nan if run.var is None else run.var, run.n,
                      ref.mean, nan if ref.var is None else ref.var, ref.n, noise)  # fmt: skip
    one_draw = None
    if run.var is None or ref.var is None:
        one_draw = (
            "both"
            if run.var is None and ref.var is None
            else ("run" if run.var is None else "reference")
        )
    p = float(out["p"])
    return Difference(
        math.exp(float(out["d"])), math.exp(float(out["low"])), math.exp(float(out["high"])),
        float(out["se"]), float(out["df"]), None if math.isnan(p) else p, (run.n, ref.n),
        one_draw,
    )  # fmt: skip


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone), None kept as None."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[index] = running
    return adjusted


def band_limits(band: float) -> tuple[float, float]:
    """The band (a fraction) as ratios, symmetric in log space: [1/(1+b), 1+b]."""
    return 1 / (1 + band), 1 + band


def verdict(diff: Difference, adjusted_p: float | None, *, band: float, alpha: float):
    """(`faster`|`slower`|`same`|`undecided`, why when undecided); band as a fraction."""
    floor, ceiling = band_limits(band)
    low, high = diff.low, diff.high
    shown = f"{low:.3f}-{high:.3f}"
    if floor <= low and high <= ceiling:
        return "same", None
    beyond = low > ceiling or high < floor  # the whole interval, not only the ratio
    significant = adjusted_p is not None and adjusted_p < alpha
    if beyond and significant:
        return ("slower" if diff.ratio > 1 else "faster"), None
    if not beyond and floor <= diff.ratio <= ceiling:
        return "undecided", f"inside the band, but its interval {shown} is not"
    if not beyond:
        return "undecided", f"its interval {shown} reaches into the band"
    p = "n/a" if adjusted_p is None else f"{adjusted_p:.3g}"
    return "undecided", f"beyond the band but not significant (Holm p {p} >= {alpha:g})"


# --- what a comparison could have detected ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Detectable:
    """The smallest change a comparison calls with POWER, and what more repeats would buy.

    Built from the process variance `var` (log scale, `var_df` degrees of freedom), the
    repeats a side, the run level and the verdict rule: the interval must clear the band
    and the p its Holm threshold (alpha / tests, the first step, so never optimistic)."""

    var: float
    var_df: float
    repeats: tuple[int, int]
    noise: Noise
    tests: int
    band: float
    alpha: float
    paired: bool = False  # rounds of paired ratios (nox -s ab): one sample, no run level

    def _log_mde(self, n_run: float, n_ref: float, df: float) -> float:
        v_process = self.var * (1 / n_run + 1 / n_ref)
        v_run = 2 * self.noise.run**2
        var = v_process + v_run
        if var <= 0:
            return math.log1p(self.band)
        denominator = sum(v * v / f for v, f in ((v_process, df), (v_run, self.noise.df)) if v > 0)
        total_df = var * var / denominator if denominator > 0 else math.inf
        se = math.sqrt(var)
        ci = _t(0.5 + CONFIDENCE / 2, total_df) * se + math.log1p(self.band)
        test = _t(1 - self.alpha / (2 * max(1, self.tests)), total_df) * se
        return max(ci, test) + _t(POWER, total_df) * se

    @property
    def mde(self) -> float:
        """The detectable change as a fraction (0.12: 12% slower or faster)."""
        return math.expm1(self._log_mde(*self.repeats, self.var_df))

    def _at(self, n: int) -> float:
        """The detectable change at n repeats a side (the paired design: n rounds)."""
        if self.paired:
            return math.expm1(self._log_mde(n, math.inf, n - 1))
        return math.expm1(self._log_mde(n, n, 2 * (n - 1)))

    @property
    def floor(self) -> float:
        """The least detectable change any number of repeats reaches: the run level, the
        band and the test alone. A minimum over a grid of repeats, not the limit: with an
        estimated run level the degrees of freedom grow with the repeats, so the change is
        not monotone in them."""
        grid = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, MAX_REPEATS_SHOWN)
        limit = math.expm1(self._log_mde(math.inf, math.inf, math.inf))
        return min(limit, *(self._at(n) for n in grid))

    def repeats_for(self, target: float) -> int | None:
        """Repeats a side (both sides alike; rounds when paired) that bring the detectable
        change to `target` (a fraction); None when none up to MAX_REPEATS_SHOWN does."""
        if self.floor > target:
            return None
        return next((n for n in range(2, MAX_REPEATS_SHOWN + 1) if self._at(n) <= target), None)


def detectable(
    run: Side, ref: Side, noise: Noise, *, tests: int, band: float, alpha: float
) -> Detectable:
    """What the comparison of these two sides could have detected (see `Detectable`)."""
    parts = [(s.var, s.n - 1) for s in (run, ref) if s.var is not None]
    if parts:
        dof = sum(df for _, df in parts)
        var = sum(v * df for v, df in parts) / dof
    else:
        var, dof = noise.process**2, noise.df
    return Detectable(var, dof, (run.n, ref.n), noise, tests, band, alpha)


# --- noise warnings --------------------------------------------------------------------------


def noise_warnings(
    figures: Sequence[float], samples: Sequence[Sequence[float]], unit: str = "ms/step"
) -> list[str]:
    """pyperf-style warnings for one row: wide spread, a disagreeing repeat, too few repeats."""
    warnings = []
    arrays = [np.asarray(s, dtype=float) for s in samples]
    spreads = [np.std(s) / np.mean(s) for s in arrays if s.size > 1]
    if spreads and np.median(spreads) >= WIDE_CV:
        warnings.append(f"wide spread: the steps vary by {np.median(spreads):.0%} (CV)")
    tails = [np.percentile(s, 90) / np.percentile(s, 50) for s in arrays if s.size]
    tails = [tail for tail in tails if np.isfinite(tail)]
    if tails and np.median(tails) >= WIDE_TAIL:
        warnings.append(f"long tail: p90 is {np.median(tails):.2f}x p50")
    middle = float(np.median(figures))
    for index, value in enumerate(figures, start=1):
        if len(figures) > 2 and middle > 0 and abs(value / middle - 1) > DISAGREES:
            warnings.append(
                f"repeat {index} reads {value:.4g} {unit}, {value / middle - 1:+.0%} from the "
                f"median {middle:.4g}"
            )
    if 1 < len(figures) < MIN_REPEATS:  # one repeat is the plain run: it claims no more
        warnings.append(f"{len(figures)} repeats: their spread is a guess ({MIN_REPEATS} or more)")
    return warnings


# --- host drift between two records ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Drift:
    """The host probe's ratio run / reference; < 1: the host ran faster during the run."""

    ratio: float
    low: float  # its 95% interval
    high: float
    readings: tuple[int, int]  # (run, reference)


def _median_replicates(values: np.ndarray) -> np.ndarray:
    """Bootstrap medians of `values`, drawn from a seed of the values themselves: a side's
    replicates do not depend on which side it is, so swapping the records mirrors the
    drift's interval exactly."""
    entropy = np.frombuffer(np.sort(values).astype(np.float64).tobytes(), dtype=np.uint32)
    rng = np.random.default_rng([SEED, *entropy.tolist()])
    return np.median(rng.choice(values, (RESAMPLES, values.size)), axis=1)


def drift(run: Sequence[float], reference: Sequence[float]) -> Drift:
    """The ratio of the medians of two sets of probe readings, and its 95% interval."""
    run_ms, ref_ms = np.asarray(run, dtype=float), np.asarray(reference, dtype=float)
    if not (run_ms.size and ref_ms.size):
        raise ValueError("drift needs at least one probe reading on each side")
    ratio = float(np.median(run_ms) / np.median(ref_ms))
    ratios = np.sort(_median_replicates(run_ms) / _median_replicates(ref_ms))
    k = int((1 - CONFIDENCE) / 2 * RESAMPLES)  # order statistics: reciprocals mirror
    low, high = ratios[k], ratios[RESAMPLES - 1 - k]
    # With one reading a side every replicate is the point itself: the interval is that.
    return Drift(ratio, float(min(low, ratio)), float(max(high, ratio)), (run_ms.size, ref_ms.size))


def drift_band(host: Drift, band: float) -> tuple[float, float]:
    """The ratios the host's drift explains: the band (a fraction, symmetric in log space)
    around h.

    Around h itself, not its interval: the probe's median is steady (a reading is already
    the median of five bursts), while the bootstrap interval of five readings spans the
    one reading that caught a hiccup; around that interval a 1.8x change of simple_dit
    read `undecided`."""
    floor, ceiling = band_limits(band)
    return host.ratio * floor, host.ratio * ceiling


def beyond_drift(low: float, high: float, ratio: float, host: Drift, band: float) -> bool:
    """Whether the ratio's whole interval lies beyond the band around the host's drift, on
    the side of the change."""
    floor, ceiling = drift_band(host, band)
    return low > ceiling if ratio > 1 else high < floor


# --- paired rounds -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Paired:
    """A against B over paired rounds: the geometric mean of the per-round ratios A / B."""

    ratio: float
    low: float
    high: float
    se: float  # of the mean log ratio
    p_value: float | None  # one-sample t on the log ratios; None below 2 rounds or no spread
    rounds: int

    def difference(self) -> Difference:
        """As a two-sided comparison (the run level cancelled by the pairing)."""
        return Difference(self.ratio, self.low, self.high, self.se, self.rounds - 1.0,
                          self.p_value, (self.rounds, self.rounds))  # fmt: skip

    def detectable(self, *, tests: int, band: float, alpha: float) -> Detectable:
        """The change these rounds' spread could have called (as `Detectable`, one side
        being the per-round log ratios: var·(1/n + 1/inf))."""
        var = self.se**2 * self.rounds
        return Detectable(var, self.rounds - 1.0, (self.rounds, math.inf), INTERLEAVED,
                          tests, band, alpha, paired=True)  # fmt: skip

    @classmethod
    def of(cls, out: dict, row: int, trial: int = 0) -> Paired:
        """Row `row` of dew.bench.analysis.judge.paired_arrays's output (log scale)."""
        rounds = int(out["rounds"][trial, row])
        se = float(out["se"][trial, row]) if rounds > 1 else 0.0
        p = float(out["p"][trial, row])
        mean, low, high = (math.exp(float(out[key][trial, row])) for key in ("mean", "low", "high"))
        return cls(mean, low, high, se, None if math.isnan(p) else p, rounds)
