"""The tables of the docs, generated from committed records:
`python -m dew.bench.site.docs [FILES...] [--check]`.

A table in a Markdown file sits between two markers that say what it is and which records
it comes from; everything between them is this command's output:

    <!-- dew-table: step results/runs/<run>/step.json -->
    | architecture | ... |
    <!-- /dew-table -->

Kinds: `KIND RECORD` for a record of a benchmark kind, its table
(dew.bench.analysis.kinds: `step RECORD`, the step tool's, a compile-only record with its
columns; `data RECORD`, the loader tool's), `parity RUN REFERENCE` (the parity table
that `python -m dew.bench.analysis.compare_command RUN REFERENCE` prints for a compile-only
run) and `chip-rounds RECORD` (a TPU record's rounds: the chip's opening, the programs'
loads, init, the windows, each round's wall clock). Paths are relative to the repository
root (the directory holding pyproject.toml above the file).

A figure in the docs must come from a clean commit: a record made on a dirty tree
(`environment.code.dirty` true: its change is in no commit, and `nox -s reproduce` refuses
it) is named in one line per marker, `FILE:LINE: RECORD was made on a dirty tree ...`.

Without --check each file's tables are rewritten in place (atomically, only when one
changed) and a dirty record is named as a warning; with --check nothing is written and
exit 1 names every table that differs and every marker whose record is dirty.
Exit 2: bad input (a file or record missing or invalid, a marker not closed or unknown).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import tyro

from dew.bench.analysis.kinds import KINDS
from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.files import atomic_write
from dew.bench.record.validate import load

PROG = "python -m dew.bench.site.docs"
OPEN = re.compile(r"^<!-- dew-table: (?P<spec>.+?) -->$")
CLOSE = "<!-- /dew-table -->"
DEFAULT_FILES = ("docs/performance.md", "docs/tpu.md", "README.md")
DIRTY = (
    "was made on a dirty tree (environment.code.dirty): a figure in the docs must come from "
    "a record of a clean commit"
)


def repository_root(path: Path) -> Path:
    for parent in Path(path).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def render_table(spec: str, root: Path, where: str) -> tuple[str, list[str]]:
    """The Markdown table a marker's spec names, and the paths of its records made on a
    dirty tree."""
    kind, *paths = spec.split()
    records = [load(root / p, f"{where}: {kind}") for p in paths]
    dirty = [p for p, r in zip(paths, records, strict=True) if _dirty(r)]
    return _table(kind, spec, paths, records, where), dirty


def _dirty(record) -> bool:
    """Whether the record says it was made on a dirty tree (unknown is not dirty: the
    published records state no flag)."""
    code = record.environment.code
    return code is not None and code.dirty is True


def _table(kind: str, spec: str, paths: list[str], records: list, where: str) -> str:
    if kind in KINDS and len(records) == 1:  # a record's own table (its kind's)
        (record,) = records
        if record.kind != kind:
            raise UsageError(f"{where}: {paths[0]} is a {record.kind} record, not a {kind} one")
        return KINDS[kind].table(record, "md")
    if kind == "chip-rounds" and len(records) == 1:
        from dew.bench.analysis.tables import chip_rounds_table
        from dew.bench.runtime.phases import chip_rounds

        rounds = chip_rounds(records[0].rows)
        if not rounds:
            raise UsageError(f"{where}: {paths[0]} has no held-chip round (no `open` phase)")
        return chip_rounds_table(rounds, "md")
    if kind == "parity" and len(records) == 2:
        from dew.bench.analysis import parity

        rows = parity.check(*records)
        text = parity.render(rows, *records, paths[0], paths[1], "md")
        return "".join(line + "\n" for line in text.splitlines() if line.startswith("|"))
    raise UsageError(
        f"{where}: {spec!r} is not a table spec; use "
        + ", ".join(f"`{name} RECORD`" for name in KINDS)
        + ", `chip-rounds RECORD` or `parity RUN REFERENCE`"
    )


@dataclasses.dataclass
class Table:
    file: Path
    line: int  # 1-based, the opening marker
    spec: str
    old: str
    new: str
    dirty: list[str] = dataclasses.field(default_factory=list)  # its records from dirty trees


def regenerate(path: Path) -> tuple[str, list[Table]]:
    """The file's text with every table regenerated, and each table found."""
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read: {cli.one_line(error)}") from None
    root = repository_root(path)
    out, tables, index = [], [], 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        opened = OPEN.match(line.strip())
        index += 1
        if not opened:
            continue
        start = index
        while index < len(lines) and lines[index].strip() != CLOSE:
            index += 1
        where = f"{path}:{start}"
        if index == len(lines):
            raise UsageError(f"{where}: the table marker is not closed by {CLOSE}")
        old = "".join(lines[start:index])
        new, dirty = render_table(opened["spec"], root, where)
        tables.append(Table(path, start, opened["spec"], old, new, dirty))
        out.append(new)
    return "".join(out), tables


@dataclasses.dataclass
class Args:
    """Regenerate the tables of Markdown files from the records their markers name; with
    --check, only say which differ. Exit 0: up to date (or rewritten); 1: --check found a
    table that differs or a record made on a dirty tree; 2: bad input."""

    files: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="FILE")] = (
        DEFAULT_FILES
    )
    """Markdown files with <!-- dew-table: ... --> markers"""
    check: bool = False
    """write nothing; exit 1 when a table differs from what its records give, or one of its
    records was made on a dirty tree"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _main(cli.parse(Args, argv, prog=PROG)))


def _main(args: Args) -> int:
    results = [(Path(name), *regenerate(Path(name))) for name in args.files]  # all or none
    stale = dirty = 0
    for path, text, tables in results:
        changed = [t for t in tables if t.old != t.new]
        stale += len(changed)
        for table in changed:
            verb = "differs from" if args.check else "regenerated from"
            print(f"{path}:{table.line}: table {verb} {table.spec}", file=sys.stderr)
        for table in tables:
            for record in table.dirty:
                dirty += 1
                print(f"{path}:{table.line}: {record} {DIRTY}", file=sys.stderr)
        if changed and not args.check:
            atomic_write(path, text)
        state = "stale" if args.check else "rewritten"
        print(f"{path}: {len(tables)} tables, {len(changed)} {state}")
    return cli.EXIT_CHANGED if args.check and (stale or dirty) else cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
