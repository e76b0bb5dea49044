"""The records a site is built from: every valid record under the given directories.

A file that is not a valid record is skipped with one line naming it (`skipped` in the
result, printed by the command); JSON Schema files (`*.schema.json`) and anything under
the site's own output directory are not records and are not read at all.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, date, datetime
from pathlib import Path

from dew.bench.common.cli import UsageError, one_line
from dew.bench.record.schema import BenchmarkRun
from dew.bench.record.validate import check_file

PUBLISHED_DIR_NAME = "published"  # results/published/: the seed's tables, the references


@dataclasses.dataclass
class Entry:
    """One record and how the site names it."""

    path: Path
    record: BenchmarkRun
    slug: str  # its page: runs/<slug>.html
    published: bool

    @property
    def when(self) -> datetime:
        """`created` as an aware datetime for ordering (a date alone sorts at its midnight,
        no date at all first)."""
        created = self.record.created
        if created is None:
            return datetime.min.replace(tzinfo=UTC)
        if not isinstance(created, datetime):
            return datetime(created.year, created.month, created.day, tzinfo=UTC)
        return created if created.tzinfo else created.replace(tzinfo=UTC)

    @property
    def day(self) -> str:
        created = self.record.created
        if created is None:
            return "date not recorded"
        if isinstance(created, datetime):
            return created.strftime("%Y-%m-%d %H:%M")
        return created.isoformat() if isinstance(created, date) else str(created)

    @property
    def device(self) -> str:
        """The device group of this record's rows: kind, count and processes."""
        env = self.record.environment
        devices = env.devices
        kind = (devices.kind if devices and devices.kind else None) or "device not recorded"
        text = kind + (f" ×{devices.count}" if devices and devices.count else "")
        if env.processes and len(env.processes) > 1:
            text += f" ({len(env.processes)} processes)"
        return text

    @property
    def commit(self) -> str:
        code = self.record.environment.code
        if not code or not code.commit:
            return "not recorded"
        return code.commit[:7] + ("-dirty" if code.dirty else "")


@dataclasses.dataclass
class Loaded:
    entries: list[Entry]
    skipped: list[str]  # one line per file that is not a valid record
    empty: list[Path]  # given directories that held no record file at all


def record_files(directory: Path, exclude: Path | None) -> list[Path]:
    """The *.json files under `directory`, sorted, without `exclude`, the schema files and
    the sweep timings of scripts/sweep_time.py (*.sweep.json: not records)."""
    found = []
    for path in sorted(directory.rglob("*.json")):
        if path.name.endswith((".schema.json", ".sweep.json")) or not path.is_file():
            continue
        if exclude is not None and path.resolve().is_relative_to(exclude):
            continue
        found.append(path)
    return found


def _slug(path: Path, taken: set[str]) -> str:
    """A file name for the record's page from its path: the run directory and file name."""
    parts = path.with_suffix("").parts[-2:]
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", "--".join(parts)).strip("-") or "record"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def load_all(directories: list[Path], exclude: Path | None = None) -> Loaded:
    """Every valid record under `directories` (each must be a directory: UsageError else),
    oldest first; invalid files are listed in `skipped`, one line each."""
    for directory in directories:
        if not directory.exists():
            raise UsageError(f"DIRS {directory}: no such directory")
        if not directory.is_dir():
            raise UsageError(f"DIRS {directory} is not a directory; give directories of records")
    excluded = exclude.resolve() if exclude is not None else None
    entries, skipped, empty, seen, taken = [], [], [], set(), set()
    for directory in directories:
        paths = record_files(directory, excluded)
        if not paths:
            empty.append(directory)
        for path in paths:
            if path.resolve() in seen:  # two given directories may overlap
                continue
            seen.add(path.resolve())
            try:
                record, errors = check_file(path)
            except UsageError as error:
                skipped.append(one_line(error))
                continue
            if errors:
                more = f" (+{len(errors) - 1} more)" if errors[1:] else ""
                skipped.append(f"{path}: {errors[0]}{more}")
                continue
            published = PUBLISHED_DIR_NAME in path.parts
            entries.append(Entry(path, record, _slug(path, taken), published))
    entries.sort(key=lambda e: (e.when, str(e.path)))
    return Loaded(entries, skipped, empty)
