"""The order a compile stage starts its cases in: the longest first, by what they took before.

A compile stage ends when its last compile does. Started in the preset's order, a long
compile that comes late runs on while the other slots stand idle: on one v5e the small
preset's 18 compiles, 8 at a time, take 37-326 s each (hierarchical_mmdit the longest), and
the stage's tail is the late ones. Started longest first (list scheduling's LPT rule), the
short ones fill the slots at the end. The lengths come from the records of the same
compile: in the checkout's `results/` (`dew.bench.common.files.RESULTS_ROOT`), each record
of this topology, preset and dtype gives its cases' `compile_s`; a case takes the median of its
figures, and a case no record holds comes first (unknown may be long). Only the order of the
compile stage changes: which cases are timed and in what order is the time stage's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dew.bench.analysis.levels import history_records
from dew.bench.common.files import RESULTS_ROOT
from dew.bench.record.schema import StepRow
from dew.bench.sweep.presets import Case

Key = tuple[str, int]  # a case's label and batch: what sets its program beside the settings


def measured(topology: str, preset: str, dtype: str, root: Path | None = None) -> dict[Key, float]:
    """Each case's (label, batch) median `compile_s` over the step records in the results
    folder `root` (default: the checkout's, RESULTS_ROOT/results), runs/*/step.json, made for
    `topology` with this preset and dtype, read by the history's reader (its parse kept per
    file); {} when there are none. A file that is no such record is passed over (this only
    orders work)."""
    seconds: dict[Key, list[float]] = {}
    results = Path(root) if root is not None else RESULTS_ROOT / "results"
    for _, record in history_records.parse(sorted((results / "runs").glob("*/step.json"))):
        if not _same_compile(record, topology, preset, dtype):
            continue
        for row in record.get("rows") or []:
            if isinstance(row, dict) and isinstance(row.get("compile_s"), (int, float)):
                key = _key(row)
                if key is not None:
                    seconds.setdefault(key, []).append(float(row["compile_s"]))
    return {key: statistics.median(values) for key, values in seconds.items()}


def longest_first(
    pending: Sequence[tuple[int, Case]], seconds: dict[Key, float]
) -> list[tuple[int, Case]]:
    """`pending` ((position, case) pairs) with the cases no record holds first, then the
    rest by their measured compile seconds, longest first; ties keep their order."""

    def length(item: tuple[int, Case]) -> float:
        case = item[1]
        return seconds.get((case.label(), case.batch), float("inf"))

    return sorted(pending, key=lambda item: -length(item))


def _same_compile(record: dict[str, Any], topology: str, preset: str, dtype: str) -> bool:
    settings = record.get("settings") or {}
    devices = (record.get("environment") or {}).get("devices") or {}
    return (
        record.get("kind") == "step"
        and devices.get("topology") == topology
        and settings.get("preset") == preset
        and (settings.get("dtype") or "bfloat16") == dtype
    )


def _key(row: dict[str, Any]) -> Key | None:
    try:
        parsed = StepRow.model_validate(row)
    except ValueError:
        return None
    return (parsed.label(), parsed.batch) if parsed.batch is not None else None
