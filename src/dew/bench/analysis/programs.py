"""What the compiler chose, read from step rows' fingerprints (dew.telemetry.fingerprint).

Within a row: whether its repeats (each a fresh compile) made one program, and if not,
the warning that says how many did otherwise and their step times, since the spread
between those repeats is then partly the compiler's choices, not the host's noise.
Between two rows (compare): whether both sides ran the same compiled program:
"same program", "same program, other kernels" (the autotuner chose differently: the
backend configs differ) or "other program"; None where a side has no fingerprint (a
record from before them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from dew.bench.record.schema import Fingerprint, StepRepeat, StepRow

SAME = "same program"
OTHER_KERNELS = "same program, other kernels"
OTHER_PROGRAM = "other program"


def _key(fingerprint: Fingerprint) -> tuple[str, str]:
    return fingerprint.program, fingerprint.kernels


def shared(repeats: Sequence[StepRepeat]) -> Fingerprint | None:
    """The fingerprint every repeat has; None when they differ or one has none."""
    prints = [repeat.fingerprint for repeat in repeats]
    if not prints or None in prints or len({_key(p) for p in prints}) > 1:  # type: ignore[arg-type]
        return None
    return prints[0]


def fingerprints(row: StepRow) -> list[Fingerprint]:
    """A row's fingerprints: one per repeat that has one; the row's own without repeats."""
    if row.repeats:
        return [repeat.fingerprint for repeat in row.repeats if repeat.fingerprint is not None]
    return [row.fingerprint] if row.fingerprint is not None else []


def repeats_warning(repeats: Sequence[StepRepeat]) -> str | None:
    """`2 of 3 repeats chose other kernels ...` when a row's repeats did not all compile to
    the most common fingerprint (ties: the first repeat's); None when they did or fewer
    than two have one."""
    known = [repeat for repeat in repeats if repeat.fingerprint is not None]
    if len(known) < 2:
        return None
    common = Counter(_key(r.fingerprint) for r in known).most_common(1)[0][0]  # type: ignore[arg-type]
    others = [r for r in known if _key(r.fingerprint) != common]  # type: ignore[arg-type]
    if not others:
        return None
    programs = sum(r.fingerprint.program != common[0] for r in others)  # type: ignore[union-attr]
    if programs == 0:
        what = "chose other kernels for the same program"
    elif programs == len(others):
        what = "compiled other programs"
    else:
        what = (
            f"compiled otherwise ({programs} another program, "
            f"{len(others) - programs} other kernels)"
        )
    alike = [r.ms_per_step for r in known if _key(r.fingerprint) == common]  # type: ignore[arg-type]
    unlike = [r.ms_per_step for r in others]
    return (
        f"{len(others)} of {len(known)} repeats {what} (ms/step {_median(unlike)} against "
        f"{_median(alike)} for the other {len(alike)}): the spread between repeats is "
        "partly the compiler's choices"
    )


def _median(values: Sequence[float]) -> str:
    return f"{float(np.median(values)):.4g}"


def between(run: StepRow, reference: StepRow) -> str | None:
    """Whether two rows ran the same compiled program (SAME, OTHER_KERNELS, OTHER_PROGRAM),
    comparing the set of fingerprints of each side's repeats; None when a side has none."""
    a, b = fingerprints(run), fingerprints(reference)
    if not a or not b:
        return None
    if {_key(p) for p in a} == {_key(p) for p in b}:
        return SAME
    if {p.program for p in a} == {p.program for p in b}:
        return OTHER_KERNELS
    return OTHER_PROGRAM


def describe(row: StepRow) -> str:
    """A side's fingerprints for a note: `program a1b2c3d4 kernels e5f6a7b8`, each distinct
    one once (8 hex digits are enough to tell a record's few apart)."""
    seen = dict.fromkeys(_key(p) for p in fingerprints(row))
    return ", ".join(f"program {p[:8]} kernels {k[:8]}" for p, k in seen) or "none"
