"""Which rows pair up: a run's rows against a reference's, and whether two are one step.

Rows match on `row.key()` (`match_rows`); a leftover run row may then pair with a leftover
reference row, with a note saying how (`_partner`): a published record predates case
settings a run now records (condition_in_state). Two GFLOP/step counts are one step's when
they agree within GFLOP_TOLERANCE (`same_gflop`). The timing comparison
(dew.bench.analysis.comparison) and the parity table (dew.bench.analysis.parity) pair rows
this one way.
"""

from __future__ import annotations

from dew.bench.record.schema import StepRow

GFLOP_TOLERANCE = 1e-3  # 0.1%: the HLO count is exact; beyond this the step differs


def match_rows(run_rows, ref_rows) -> list[tuple]:
    """(run row, reference row, note) pairs; None on a side without a partner. Rows match
    on `row.key()`; a leftover run row may then pair with a leftover reference row, with a
    note saying how (`_partner`)."""
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
        partner, note = _partner(row, left_run, left_ref)
        if partner is None:
            unmatched.append((row, None, None))
        else:
            left_ref.remove(partner)
            pairs.append((row, partner, note))
    return pairs + unmatched + [(None, r, None) for r in left_ref]


def _partner(row, left_run: list, left_ref: list) -> tuple[object | None, str | None]:
    """A leftover reference row for a leftover run row, and why they pair: a published
    record predates case settings a run now records (condition_in_state), so a step row
    whose settings extend those of exactly one reference row of the same architecture,
    batch, head_chunks and attention_impl (the one sharing most settings) is that row's
    case; else the one row of its name, when it is the only one on both sides."""
    key = row.key()
    if isinstance(row, StepRow):
        settings = set(key[4])
        extended = [r for r in left_ref if r.key()[:4] == key[:4] and set(r.key()[4]) < settings]
        most = max((len(r.key()[4]) for r in extended), default=-1)
        closest = [r for r in extended if len(r.key()[4]) == most]
        if len(closest) == 1:
            extra = sorted(settings - set(closest[0].key()[4]))
            shown = ", ".join(f"{name}={value}" for name, value in extra)
            return closest[0], f"matched to {closest[0].label()}, which does not record {shown}"
    same_run = [r for r in left_run if r.key()[0] == key[0]]
    same_ref = [r for r in left_ref if r.key()[0] == key[0]]
    if len(same_run) == 1 and len(same_ref) == 1:
        return same_ref[0], f"matched by name only: {row.label()} vs {same_ref[0].label()}"
    return None, None


def same_gflop(a: float, b: float) -> bool:
    """Two GFLOP/step counts of one step: equal within GFLOP_TOLERANCE."""
    return abs(a - b) <= GFLOP_TOLERANCE * max(a, b)
