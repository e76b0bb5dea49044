"""A repeat that stands out from its row's others: named, never dropped.

A record is evidence, so a repeat far from its row's others stays in the row (its spread
then widens the row's interval, and a prior it contradicts is left: row_noise.moderated). What
this module adds is that the comparison says so, in its first line, with which row, which
side's repeat and how far, so that a user knows what would settle it.

The test, per repeat of a side with 3 or more: the repeat against the mean of the side's
others, over the row's process level estimated without it from the repeats alone (the
side's other repeats and the other side's: a history's level is not asked, so a row that
got noisier everywhere names no repeat), a two-sided t; a repeat stands out when its p,
times the number of repeats looked at (Bonferroni over the whole comparison), is under
ALPHA. Vectorized over leading axes (`scores`), so the calibration simulates exactly this
test.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dew.bench.analysis.levels import row_noise
from dew.bench.analysis.tails import t_sf

ALPHA = 0.01  # the chance, over a whole comparison, of naming a repeat of an ordinary run
MIN_REPEATS = 3  # a side of two cannot say which of its repeats is the odd one


@dataclasses.dataclass(frozen=True)
class Outlier:
    label: str  # the row
    side: str  # "run" or "reference"
    index: int  # which repeat, from 1
    repeats: int  # of how many
    change: float  # its figure against its side's others' geometric mean, less 1
    p: float  # after Bonferroni over every repeat looked at

    def words(self) -> str:
        return (f"{self.label} repeat {self.index} of {self.repeats} in the {self.side} reads "
                f"{self.change:+.1%} from its other repeats")  # fmt: skip


def scores(logs, other) -> tuple[np.ndarray, np.ndarray]:
    """Per repeat of `logs` [..., n] (n >= 3) its t against the mean of the others and that
    t's degrees of freedom, its process variance pooled from the others and the other
    side's repeats `other` [..., m] (NaN where absent)."""
    logs, other = np.asarray(logs, dtype=float), np.asarray(other, dtype=float)
    n = logs.shape[-1]
    rest = (logs.sum(axis=-1, keepdims=True) - logs) / (n - 1)
    squares = (np.sum(logs**2, axis=-1, keepdims=True) - logs**2) - (n - 1) * rest**2
    rest_var = np.maximum(squares, 0.0) / (n - 2)
    present = ~np.isnan(other)
    m = present.sum(axis=-1, keepdims=True)
    other_mean = np.where(present, other, 0.0).sum(axis=-1, keepdims=True) / np.maximum(m, 1)
    other_var = np.where(present, (other - other_mean) ** 2, 0.0).sum(axis=-1, keepdims=True)
    other_var = np.where(m > 1, other_var / np.maximum(m - 1, 1), np.nan)
    var, df = row_noise.moderated(rest_var, n - 1, np.broadcast_to(other_var, logs.shape),
                              np.broadcast_to(m, logs.shape), 0.0, 0.0)  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (logs - rest) / np.sqrt(var * (1 + 1 / (n - 1)))
    return t, np.broadcast_to(df, logs.shape)


def p_values(t, df) -> np.ndarray:
    return 2 * t_sf(np.abs(t), np.where(np.isfinite(df), df, 1e9))


def find(rows) -> list[Outlier]:
    """The repeats that stand out among the compared rows (comparison.RowComparison with
    both sides' figures, `figures`), largest first; each also noted in its row's notes."""
    found, looked = [], 0
    for row in rows:
        figures = row.figures
        if figures is None:
            continue
        for side, mine, theirs in (("run", *figures), ("reference", *figures[::-1])):
            if len(mine) < MIN_REPEATS:
                continue
            looked += len(mine)
            t, df = scores(np.log(mine)[None], np.log(theirs)[None])
            p = p_values(t, df)[0]
            logs = np.log(mine)
            for index, value in enumerate(p):
                others = np.delete(logs, index).mean()
                found.append((float(value), row.label, side, index + 1, len(mine),
                              math.expm1(float(logs[index] - others))))  # fmt: skip
    named = [Outlier(label, side, index, n, change, min(1.0, p * looked))
             for p, label, side, index, n, change in found if p * looked < ALPHA]  # fmt: skip
    for outlier in named:  # said in its row's notes too
        row = next(r for r in rows if r.label == outlier.label)
        row.notes.append(f"{outlier.words().split(' ', 1)[1]} (Bonferroni p {outlier.p:.2g}): "
                         "kept, and named")  # fmt: skip
    return sorted(named, key=lambda o: -abs(o.change))
