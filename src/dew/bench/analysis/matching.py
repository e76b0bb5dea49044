"""Which rows pair up: a run's rows against a reference's, and whether two are one step.

Rows match on `row.key()` (`match_rows`); a leftover run row may then pair with a leftover
reference row, with a note saying how: by its kind's rule first (`partner`, the Kind's:
a step row whose settings extend a published row's, dew.bench.analysis.kinds.step_kind), else
the one row of its name on both sides. Two GFLOP/step counts are one step's when they agree
within GFLOP_TOLERANCE (`same_gflop`). The timing comparison
(dew.bench.analysis.comparison) and the parity table (dew.bench.analysis.parity) pair rows
this one way.
"""

from __future__ import annotations

from collections.abc import Callable

GFLOP_TOLERANCE = 1e-3  # 0.1%: the HLO count is exact; beyond this the step differs


Partner = Callable[[object, list], tuple[object | None, str | None]]


def match_rows(run_rows, ref_rows, partner: Partner | None = None) -> list[tuple]:
    """(run row, reference row, note) pairs; None on a side without a partner. Rows match
    on `row.key()`; a leftover run row may then pair with a leftover reference row, with a
    note saying how (`partner`, the kind's rule, then `_partner`)."""
    ref_by_key: dict[tuple, list] = {}
    for row in ref_rows:
        ref_by_key.setdefault(row.key(), []).append(row)
    pairs, left_run = [], []
    for row in run_rows:
        candidates = ref_by_key.get(row.key())
        if candidates:
            pairs.append((row, candidates.pop(0), None))
        else:
            left_run.append(row)
    left_ref = [r for rows in ref_by_key.values() for r in rows]
    unmatched = []
    for row in left_run:
        found, note = partner(row, left_ref) if partner is not None else (None, None)
        if found is None:
            found, note = _partner(row, left_run, left_ref)
        if found is None:
            unmatched.append((row, None, None))
        else:
            left_ref.remove(found)
            pairs.append((row, found, note))
    return pairs + unmatched + [(None, r, None) for r in left_ref]


def _partner(row, left_run: list, left_ref: list) -> tuple[object | None, str | None]:
    """The one reference row of the run row's name, when it is the only one on both sides."""
    key = row.key()
    same_run = [r for r in left_run if r.key()[0] == key[0]]
    same_ref = [r for r in left_ref if r.key()[0] == key[0]]
    if len(same_run) == 1 and len(same_ref) == 1:
        return same_ref[0], f"matched by name only: {row.label()} vs {same_ref[0].label()}"
    return None, None


def same_gflop(a: float, b: float) -> bool:
    """Two GFLOP/step counts of one step: equal within GFLOP_TOLERANCE."""
    return abs(a - b) <= GFLOP_TOLERANCE * max(a, b)
