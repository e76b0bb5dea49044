"""The records a site is built from: every valid record under the given directories.

What a JSON file is, is read from its content, not its name: an object that claims to be
a record (it has `schema_version`, or a `kind` and `rows`) is validated, and one that
fails is skipped with one line naming it (`skipped`, printed by the command, shown in red
on the front page). The other JSON dew writes beside its records (the run level
`noise.json`, an A/B's `ab-plan.json`, a comparison's `compare.json`, the sweep timings,
the JSON Schemas) is known by its keys (dew.bench.record.schema.documents), checked
against its own model and listed by kind (`others`), never as a broken record (one that
breaks its own model is skipped with its line); any other JSON object is ignored quietly.
A file that is not JSON at all is skipped with its line. Nothing under the site's own
output directory is read.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

from dew.bench.common.cli import UsageError, one_line
from dew.bench.record.schema import BenchmarkRun
from dew.bench.record.schema.documents import OUTCOMES, RECORD, check_document, document_kind
from dew.bench.record.validate import check_text, read_json_object

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
    skipped: list[str]  # one line per file that claims to be a record and is not a valid one
    empty: list[Path]  # given directories that held no record file at all
    others: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # kind -> files


def other_label(path: Path, kind: str, value: dict) -> str:
    """How the front page names a JSON file that is not a record: its path, and for a
    comparison the outcome it reached (compare's three words; an older compare's JSON
    has none, and its summary's word came from another rule, so none is shown)."""
    if kind == "comparison" and value.get("outcome") in OUTCOMES:
        return f"{path}: {value['outcome']}"
    return str(path)


def record_files(directory: Path, exclude: Path | None) -> list[Path]:
    """The *.json files under `directory`, sorted, without `exclude` (what each is, is read
    from its content: load_all)."""
    found = []
    for path in sorted(directory.rglob("*.json")):
        if not path.is_file():
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
    others: dict[str, list[str]] = {}
    for directory in directories:
        paths = record_files(directory, excluded)
        claimed = 0
        for path in paths:
            if path.resolve() in seen:  # two given directories may overlap
                continue
            seen.add(path.resolve())
            try:
                text = read_json_object(path)
            except UsageError as error:  # not JSON, or not an object: it is nothing of dew's
                skipped.append(one_line(error))
                claimed += 1
                continue
            value = json.loads(text)
            kind = document_kind(value)
            if kind != RECORD:
                problem = check_document(kind, text) if kind is not None else None
                if problem is not None:  # dew's file, broken: named like a broken record
                    skipped.append(f"{path}: invalid {kind}: {one_line(problem)}")
                elif kind is not None:
                    others.setdefault(kind, []).append(other_label(path, kind, value))
                continue
            claimed += 1
            record, errors = check_text(text)
            if errors:
                more = f" (+{len(errors) - 1} more)" if errors[1:] else ""
                skipped.append(f"{path}: {errors[0]}{more}")
                continue
            published = PUBLISHED_DIR_NAME in path.parts
            entries.append(Entry(path, record, _slug(path, taken), published))
        if not claimed:
            empty.append(directory)
    entries.sort(key=lambda e: (e.when, str(e.path)))
    return Loaded(entries, skipped, empty, others)
