"""Records read as a history: by their content, not their name, each measurement once.

A JSON file is a record when it has a kind dew knows, rows and an environment; a dirty
tree's record without the hash of its diff is no A/A pair of anything and is passed over.
A record whose every repeat figure another record also holds (an A/B round inside its
side's record, a reproduce's copy of its reference) counts once; the records left out of
a history (those compared) take their copies with them. dew.bench.analysis.levels.history fits
what this reads; dew.bench.analysis.levels.history_scope chooses which files it reads.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from dew.bench.analysis.kinds import KINDS
from dew.bench.common.files import RESULTS_ROOT, file_stamp

SKIPPED_DIRS = {"schema", "site"}
T = TypeVar("T")


def _figures(row: dict, *, failed_too: bool = False) -> list[float]:
    """A row's repeat figures as times (ms per step, or per batch for the loader); a failed
    row's none (its ok repeats too, with `failed_too`: what it measured, to tell copies)."""
    if (row.get("status") != "ok" and not failed_too) or not row.get("repeats"):
        return []
    figures = []
    for repeat in row["repeats"]:
        if "ms_per_step" in repeat:
            figures.append(repeat["ms_per_step"])
        elif repeat.get("samples_per_s"):
            figures.append(1e3 * row["batch"] / repeat["samples_per_s"])
    return [f for f in figures if f and f > 0 and math.isfinite(f)]


def walk(directory: Path) -> list[Path]:
    """The JSON files under `directory` at any depth (its schema/ and site/ aside), sorted
    as paths sort (part by part), links to folders not followed (as rglob walks them)."""
    # os.walk with the skipped folders pruned, not rglob then a filter: a comparison walks
    # results/ once per history it fits (the calibration: once per pair), and pathlib's
    # rglob, relative_to and sorting of Path objects cost seven times this
    if not directory.is_dir():
        return []
    found = []
    for top, dirs, files in os.walk(directory):
        dirs[:] = [name for name in dirs if name not in SKIPPED_DIRS]
        found += [os.path.join(top, name) for name in (*dirs, *files) if name.endswith(".json")]
    return [Path(name) for name in sorted(found, key=lambda name: name.split("/"))]


def read(directory: Path, exclude: Iterable[Path] = ()) -> list[tuple[str, dict]]:
    """Every record under `directory` (a JSON object with a kind, an environment and rows),
    less `exclude` and their copies, each once (`read_paths`)."""
    return read_paths(walk(directory), exclude)


def read_paths(paths: Iterable[Path], exclude: Iterable[Path] = ()) -> list[tuple[str, dict]]:
    """The records among `paths` (others are passed over quietly), less `exclude` and the
    records whose every figure one of them holds, each once (`_distinct`)."""
    return leave_out(parse(paths), exclude)[0]


# A file's parse, kept while the file stays as it was (files.file_stamp): a calibration or a
# test reads the same few hundred records once per pair it compares. Read only, never changed.
_PARSED: dict[Path, tuple[tuple[int, int, int], tuple[str, dict] | None]] = {}


# What is read off a parsed record, once asked for, by the record's identity (a record
# `parse` keeps, read only): a history is fitted and left out of once per comparison, and a
# calibration compares hundreds of pairs of the same records (held: leave_out; the rows'
# labels, a pydantic validation each: fit.fit_group).
_KEPT: dict[int, tuple[dict, dict]] = {}


def once(record: dict, what: str, compute: Callable[[dict], T]) -> T:
    """compute(record), kept under `what` for a record `parse` keeps; computed for another."""
    kept = _KEPT.get(id(record))
    if kept is None or kept[0] is not record:
        return compute(record)
    if what not in kept[1]:
        kept[1][what] = compute(record)
    return kept[1][what]


def _held_once(record: dict) -> set[tuple[str, str, float]]:
    return once(record, "held", held)


def resolved(path: Path) -> Path:
    """`path` with its links and `..` resolved, once per absolute path a process meets (a
    relative one each time: the working directory can change)."""
    path = Path(path)
    return _resolved(path) if path.is_absolute() else path.resolve()


@functools.lru_cache(maxsize=65536)
def _resolved(path: Path) -> Path:
    return path.resolve()


def parse(paths: Iterable[Path]) -> list[tuple[str, dict]]:
    """The records among `paths`, each named by its path from the repository's root."""
    found = []
    for path in paths:
        stamp = file_stamp(path)
        if stamp is None:
            continue
        where = resolved(path)
        kept = _PARSED.get(where)
        if kept is None or kept[0] != stamp:
            if kept is not None and kept[1] is not None:
                _KEPT.pop(id(kept[1][1]), None)
            kept = _PARSED[where] = (stamp, _parse_one(path, where))
            if kept[1] is not None:
                _KEPT[id(kept[1][1])] = (kept[1][1], {})
        if kept[1] is not None:
            found.append(kept[1])
    return found


def _parse_one(path: Path, where: Path) -> tuple[str, dict] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("kind") not in KINDS:
        return None
    if not isinstance(record.get("rows"), list) or "environment" not in record:
        return None
    code = record["environment"].get("code") or {}
    if code.get("dirty") and not code.get("diff_sha256"):
        return None  # a dirty tree of unknown content: no A/A pair of anything
    # named from the repository's root where it lies inside
    shown = where.relative_to(RESULTS_ROOT) if where.is_relative_to(RESULTS_ROOT) else where
    return str(shown), record


def leave_out(records: list[tuple[str, dict]], exclude: Iterable[Path] = ()
              ) -> tuple[list[tuple[str, dict]], list[str]]:  # fmt: skip
    """(the history: `records` less the files `exclude` names and their copies, each once;
    the copies' paths). A copy is a record whose every figure a left-out one holds (an A/B
    side's rounds, a byte copy): the same measurement, never its own noise."""
    skip = {resolved(Path(p)) for p in exclude}
    theirs = [_held_once(record) for _, record in parse(skip)]
    kept, copies = [], []
    for path, record in records:
        if resolved(RESULTS_ROOT / path) in skip:
            continue
        mine = _held_once(record)
        if mine and any(mine <= figures for figures in theirs):
            copies.append(path)
        else:
            kept.append((path, record))
    return _distinct(kept), copies


def held(record: dict) -> set[tuple[str, str, float]]:
    """A record's (row, figure) pairs, failed rows' measured repeats included."""
    rows = record.get("rows") if isinstance(record.get("rows"), list) else []
    return {(str(r.get("architecture")), json.dumps(r.get("case")), round(f, 9))
            for r in rows if isinstance(r, dict)
            for f in _figures(r, failed_too=True)}  # fmt: skip


def _distinct(records: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """Drop a record whose (row, figure) pairs another record holds too (the larger one
    stays; of two equal ones, the first path)."""
    sets = [_held_once(rec) for _, rec in records]
    kept = []
    for i, (path, record) in enumerate(records):
        mine = sets[i]
        covered = any(
            j != i and mine <= sets[j] and (len(sets[j]) > len(mine) or j < i)
            for j in range(len(records))
        )
        if mine and not covered:
            kept.append((path, record))
    return kept
