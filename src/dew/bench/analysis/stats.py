"""Is the difference real? The statistics behind every row's interval and every verdict.

A row's figure is the median over its repeats (fresh processes, a fresh compile each) of
each repeat's figure: for the step benchmark the dispatch window's ms/step, for the loader
its ms per batch. Two levels of noise move it: the process (XLA may choose differently
between compiles of the same code; a slow minute of the host) and the steps within one.

- **Interval of a row** (`interval`): a two-level bootstrap. Each replicate draws the
  repeats with replacement, then each drawn repeat's steps with replacement, and takes the
  median over repeats of their means. scipy.stats.bootstrap resamples one level only,
  which with steps pooled would ignore the process-to-process variation that matters most
  (and with repeats alone says nothing for one repeat); so this one level of nesting is
  written here, on numpy's generator with a fixed seed (a record's interval is repeatable).
- **Comparing two rows** (`repeat_ratio`): the ratio of the figures with its interval from
  the same bootstrap on both sides, and a test whose unit is the repeat: Welch's t-test
  (scipy.stats.ttest_ind, unequal variances) on the logs of the repeats' figures, one value
  per repeat, so that it speaks of ratios. Why the repeat: the steps of one process share
  its compile and its minute of the host, so a test on the pooled steps counts one
  process's luck a hundred times (in A/A runs of one commit a Mann-Whitney U on the steps
  called causal_transformer's 0.83x real while its repeats overlapped). Why not a rank test
  on the repeats: its smallest p is 0.1 with 3 repeats a side and 0.008 with 5, which a
  Holm correction over a preset's 17 rows can never bring under 0.05; pyperf, too, tests
  its processes' values with a t-test. The p-values of all rows compared are corrected
  together by Holm-Bonferroni (`holm`).
- **Verdicts** (`verdict`): `slower`/`faster` only when the whole interval of the ratio lies
  beyond the band (criterion's rule) AND the change is significant at alpha after Holm;
  `same` when the whole interval lies inside the band; otherwise `undecided`, saying why.
  Fewer than MIN_REPEATS repeats on a side is undecided: one process says nothing of the
  next one's compile.
- **Paired rounds** (`paired`): for A/B measurements in one process or interleaved rounds
  (scripts/step_overhead.py, scripts/loader_speedup.py): the median of the per-round
  ratios, its interval from scipy.stats.bootstrap, and a Wilcoxon signed-rank test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95
MIN_REPEATS = 3  # below this on either side a comparison is `undecided`
WIDE_CV = 0.10  # a repeat whose steps vary this much (std / mean) is noisy
WIDE_TAIL = 1.15  # p90 / p50 of the steps
DISAGREES = 0.10  # a repeat this far from the median of the repeats


def groups_of(figures: Sequence[float], samples: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Each repeat's samples scaled so that their mean is the repeat's own figure.

    The step benchmark's figure is the dispatch window (steps back to back), its samples
    the synced window (a block after each): scaling puts the samples on the figure's scale
    while keeping their spread. A repeat without samples is its figure alone."""
    groups = []
    for figure, values in zip(figures, samples, strict=True):
        values = np.asarray(values, dtype=float)
        if values.size and values.mean() > 0:
            groups.append(values * (figure / values.mean()))
        else:
            groups.append(np.array([figure], dtype=float))
    return groups


def figure(groups: Sequence[np.ndarray]) -> float:
    """The row's figure: the median over repeats of each repeat's mean."""
    return float(np.median([group.mean() for group in groups]))


def replicates(groups: Sequence[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """RESAMPLES bootstrap replicates of `figure`, resampling repeats then samples."""
    # The loop is the hot path of compare and of every row's interval: plain sums and a
    # sorted list give exactly np.mean's and np.median's values at half their overhead.
    count, half = len(groups), len(groups) // 2
    sizes = [group.size for group in groups]
    out = np.empty(RESAMPLES)
    for index in range(RESAMPLES):
        drawn = rng.integers(0, count, count).tolist()
        means = sorted(
            groups[i][rng.integers(0, sizes[i], sizes[i])].sum() / sizes[i] for i in drawn
        )
        out[index] = means[half] if count % 2 else (means[half - 1] + means[half]) / 2
    return out


def interval(groups: Sequence[np.ndarray]) -> tuple[float, float]:
    """The 95% interval of the row's figure (see the module docstring)."""
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(replicates(groups, np.random.default_rng(SEED)), [tail, 100 - tail])
    return float(low), float(high)


# --- noise warnings ----------------------------------------------------------------------------


def noise_warnings(
    figures: Sequence[float], samples: Sequence[Sequence[float]], unit: str = "ms/step"
) -> list[str]:
    """pyperf-style warnings for one row: wide spread, a disagreeing repeat, too few repeats."""
    warnings = []
    spreads = [np.std(s) / np.mean(s) for s in map(np.asarray, samples) if s.size > 1]
    if spreads and np.median(spreads) >= WIDE_CV:
        warnings.append(f"wide spread: the steps vary by {np.median(spreads):.0%} (CV)")
    tails = [np.percentile(s, 90) / np.percentile(s, 50) for s in map(np.asarray, samples)]
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
        warnings.append(f"{len(figures)} repeats: too few for a verdict ({MIN_REPEATS} or more)")
    return warnings


# --- comparing two rows ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RepeatRatio:
    """Run against reference for one row; `ratio` > 1 means the run takes longer."""

    ratio: float
    low: float | None  # the ratio's 95% interval; None when a side has no samples
    high: float | None
    p_value: float | None  # Welch's t on the repeats' log figures, two-sided, before Holm
    repeats: tuple[int, int]  # (run, reference)

    def span(self) -> tuple[float, float]:
        """The ratio's interval; the ratio itself at both ends when a side has no samples."""
        low = self.ratio if self.low is None else self.low
        high = self.ratio if self.high is None else self.high
        return low, high


def repeat_ratio(run: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> RepeatRatio:
    """The ratio run / reference of the rows' figures, its interval and the repeat test's p."""
    ratio = figure(run) / figure(reference)
    rng = np.random.default_rng(SEED)
    ratios = replicates(run, rng) / replicates(reference, rng)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    p_value = repeat_test(run, reference)
    return RepeatRatio(ratio, float(low), float(high), p_value, (len(run), len(reference)))


def repeat_test(run: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float | None:
    """Two-sided p of Welch's t-test on the logs of the repeats' figures (one value per
    repeat: the module docstring says why); None with fewer than 2 repeats a side or no
    spread at all."""
    run_logs = np.log([group.mean() for group in run])
    ref_logs = np.log([group.mean() for group in reference])
    if run_logs.size < 2 or ref_logs.size < 2:
        return None
    from scipy import stats as scipy_stats  # here, not at the top: see `paired`

    p = float(scipy_stats.ttest_ind(run_logs, ref_logs, equal_var=False).pvalue)
    return p if np.isfinite(p) else None


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone), None kept as None."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[index] = running
    return adjusted


def verdict(
    comparison: RepeatRatio, adjusted_p: float | None, *, band: float, alpha: float
) -> tuple[str, str | None]:
    """(`faster`|`slower`|`same`|`undecided`, why when undecided); band as a fraction."""
    low, high = comparison.low, comparison.high
    if low is None or high is None:  # a side without samples: the band alone
        if comparison.ratio > 1 + band:
            return "slower", None
        if comparison.ratio < 1 - band:
            return "faster", None
        return "same", None
    fewest = min(comparison.repeats)
    if fewest < MIN_REPEATS:
        run, reference = comparison.repeats
        why = f"too few repeats ({run} and {reference}; a verdict needs {MIN_REPEATS} a side)"
        return "undecided", why
    if 1 - band <= low and high <= 1 + band:
        return "same", None
    beyond = low > 1 + band or high < 1 - band  # the whole interval, not only the ratio
    significant = adjusted_p is not None and adjusted_p < alpha
    if beyond and significant:
        return ("slower" if comparison.ratio > 1 else "faster"), None
    if not beyond and 1 - band <= comparison.ratio <= 1 + band:
        return "undecided", f"inside the band, but its interval {low:.3f}-{high:.3f} is not"
    if not beyond:
        return "undecided", f"its interval {low:.3f}-{high:.3f} reaches into the band"
    shown = "n/a" if adjusted_p is None else f"{adjusted_p:.3g}"
    return "undecided", f"beyond the band but not significant (Holm p {shown} >= {alpha:g})"


# --- host drift between two records ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Drift:
    """The host probe's ratio run / reference; < 1: the host ran faster during the run."""

    ratio: float
    low: float  # its 95% interval
    high: float
    readings: tuple[int, int]  # (run, reference)


def drift(run: Sequence[float], reference: Sequence[float]) -> Drift:
    """The ratio of the medians of two sets of probe readings, and its 95% interval."""
    run_ms, ref_ms = np.asarray(run, dtype=float), np.asarray(reference, dtype=float)
    if not (run_ms.size and ref_ms.size):
        raise ValueError("drift needs at least one probe reading on each side")
    ratio = float(np.median(run_ms) / np.median(ref_ms))
    rng = np.random.default_rng(SEED)
    ratios = np.median(rng.choice(run_ms, (RESAMPLES, run_ms.size)), axis=1) / np.median(
        rng.choice(ref_ms, (RESAMPLES, ref_ms.size)), axis=1
    )
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    # With one reading a side every replicate is the point itself: the interval is that.
    return Drift(ratio, float(min(low, ratio)), float(max(high, ratio)), (run_ms.size, ref_ms.size))


def drift_band(host: Drift, band: float) -> tuple[float, float]:
    """The ratios the host's drift explains: the band (a fraction) around h.

    Around h itself, not its interval: the probe's median is steady (a reading is already
    the median of five bursts), while the bootstrap interval of five readings spans the
    one reading that caught a hiccup; around that interval a 1.8x change of simple_dit
    read `undecided`."""
    return host.ratio * (1 - band), host.ratio * (1 + band)


def beyond_drift(comparison: RepeatRatio, host: Drift, band: float) -> bool:
    """Whether the ratio's whole interval (the point without one) lies beyond the band
    around the host's drift, on the side of the change."""
    low, high = comparison.span()
    floor, ceiling = drift_band(host, band)
    return low > ceiling if comparison.ratio > 1 else high < floor


# --- paired rounds -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Paired:
    """A against B over paired rounds: the median of the per-round ratios A / B."""

    median: float
    low: float
    high: float
    p_value: float | None  # Wilcoxon signed-rank on the log ratios; None below 2 rounds
    rounds: int


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """The median of the per-round ratios a/b, its 95% interval and a signed-rank test."""
    ratios = np.asarray(a, dtype=float) / np.asarray(b, dtype=float)
    median = float(np.median(ratios))
    if ratios.size < 2:
        return Paired(median, median, median, None, int(ratios.size))
    # scipy is imported where a test runs, not with the module: every case's process
    # imports this one (through dew.bench.analysis.repeats) and would pay 0.66 s for nothing.
    from scipy import stats as scipy_stats

    result = scipy_stats.bootstrap(
        (ratios,), np.median, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
        method="percentile", random_state=np.random.default_rng(SEED),
    )  # fmt: skip
    logs = np.log(ratios)
    p_value = float(scipy_stats.wilcoxon(logs).pvalue) if np.any(logs != 0) else 1.0
    ci = result.confidence_interval
    return Paired(median, float(ci.low), float(ci.high), p_value, int(ratios.size))
