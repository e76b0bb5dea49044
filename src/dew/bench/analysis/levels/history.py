"""The noise of each device kind, fitted from the records' own history.

    python -m dew.bench.analysis.levels.history [--history DIR] [--write]

The history is the committed records under results/ (those git tracks), or every record
under DIR; what a comparison leaves out of it, and says it left out, is
dew.bench.analysis.levels.history_scope's. A record is read by its content, not its name; one
whose every repeat figure another also holds (an A/B round inside its side's record, a
reproduce's copy of its reference) counts once; a dirty tree's records pair only with
records of the same diff (its hash), and without one are left out. Records that share a
stack identity (commit, packages, driver, Python, environment flags, code from outside
dew, the measuring settings; a loader's rows) and a device identity (device kind and
count, and the cards' UUIDs where there are any) are A/A records: the same thing measured
at different times. Each such group is fitted as dew.bench.analysis.levels.fit says (the
process level, the shift and the run level by the method of moments; each row's own).
Records listed in results/superseded.json (each for a cause a commit removed) stay records
but leave the fit, named under their kind's `superseded`. A kind with no history gets a
stated weak prior (dew.bench.analysis.levels.noise), never another kind's levels. --write
caches the fit of the committed records in results/noise.json (a test checks it is
current). The history's names (fit's and history_records') are read through this module.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

import tyro

from dew.bench.analysis.levels import fit as fit_module
from dew.bench.analysis.levels import history_scope
from dew.bench.analysis.levels.fit import (  # noqa: F401  (the history's names, read here)
    HISTORY,
    MOST_DF,
    SUPERSEDED,
    TABLE,
    Estimate,
    KindFit,
    component,
    device_kind,
    fit,
    fit_group,
    identity,
    platform,
    read_table,
    row_label,
    row_levels,
    row_run,
)
from dew.bench.analysis.levels.history_records import (  # noqa: F401  (history's names, read here)
    SKIPPED_DIRS,
    _distinct,
    _figures,
    held,
    leave_out,
    parse,
    read,
    read_paths,
    walk,
)
from dew.bench.analysis.tables import level
from dew.bench.common import cli, files

PROG = "python -m dew.bench.analysis.levels.history"


def superseded(path: Path) -> dict[str, str]:
    """The records results/superseded.json lists, each with its reason's name: kept
    (compare and the site read them), but no longer their kind's noise
    (history_scope.read_superseded reads the file)."""
    return dict(history_scope.read_superseded(path).records)


def kinds_table(history_dir: Path | None = None, exclude: Iterable[Path] = (), *,
                with_superseded: bool = False) -> dict:  # fmt: skip
    """The fitted kinds a comparison of the records `exclude` assumes, with what was left
    out of them (dew.bench.analysis.levels.history_scope.kinds_table)."""
    return history_scope.kinds_table(history_dir, exclude, with_superseded=with_superseded)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Fit each device kind's noise from the A/A records (the committed ones under results/,
    or every one under --history) and print it, or write results/noise.json (--write)."""

    history: Annotated[str | None, tyro.conf.arg(metavar="DIR")] = None
    """the folder whose records (at any depth) are the history; default: the records under
    results/ that git tracks (outside a checkout, every one under results/)"""
    write: bool = False
    """write results/noise.json, the cache of the fit of the committed records"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _history(cli.parse(Args, argv, prog=PROG)))


def _history(args: Args) -> int:
    directory = None if args.history is None else Path(args.history)
    if directory is not None and not directory.is_dir():
        raise cli.UsageError(f"--history {directory} is not a folder")
    if directory is not None and args.write:
        raise cli.UsageError(f"--write caches the fit of the committed records, not of "
                             f"--history {directory}: leave one of them out")  # fmt: skip
    kinds = history_scope.kinds_table(directory, cache=False)
    if not kinds:
        raise cli.UsageError(f"{directory or fit_module.HISTORY}: no two records of one stack "
                             "and device with rows of repeats: nothing to fit")  # fmt: skip
    table = {"command": f"{PROG} --write", "kinds": dict(kinds)}
    if args.write:
        files.atomic_write(fit_module.TABLE, json.dumps(table, indent=1) + "\n")
        print(f"wrote {fit_module.TABLE}", file=sys.stderr)
    for kind, entry in kinds.items():
        print(f"{kind}: {entry['records']} records, {len(entry['groups'])} groups: process "
              f"{level(entry['process'])} ({entry['process_df']:g} df), run "
              f"{level(entry['run'])} ({entry['run_df']:g} df), shift {level(entry['shift'])} "
              f"({entry['shift_df']:g} df)"
              + (f"; {len(entry['superseded'])} superseded records left out"
                 if entry.get("superseded") else ""))  # fmt: skip
    if kinds.left_out is not None and kinds.left_out.unread():
        print(kinds.left_out.unread(), file=sys.stderr)
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
