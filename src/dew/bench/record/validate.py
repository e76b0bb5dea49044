"""Validate what dew writes: `dew validate PATH...` (`python -m dew.bench.record.validate`).

A PATH is a file or a folder, whose *.json files are all checked (sorted, every level). What
a file is, is read from its content: a record is checked against the record schema, the
other JSON dew writes (noise.json, ab-plan.json, compare.json, the exported JSON Schemas,
sweep timings: dew.bench.record.schema.documents) against its own model, and any other
JSON object given by name as a record (one found in a folder is someone else's: skipped,
as the site skips it). results/superseded.json is checked against what it names too
(dew.bench.record.superseded_check): each entry a valid record under results/ of its
reason's device kind, made before the commit its reason says removed the cause. Each good
file prints `FILE: ok (...)` on stdout. An invalid one prints one line per error on stderr,
`FILE: $.json.path: message`. A file that is no JSON
object at all (missing, binary, not JSON, JSON but not an object) prints one line,
`dew validate: error: FILE: problem`, and the next file is still checked.

Exit codes (dew.bench.common.cli's, the worst file decides):
    0  every file is valid
    1  some file is invalid: it breaks its schema, or a record has no rows (a record
       without rows holds no result, whatever else it says), or superseded.json names a
       record or a commit it may not
    2  bad input: a file that cannot be read as a JSON object, a folder without JSON, or a
       bad command line

Imports the schema and the stdlib-only cli helpers, no jax: a record validates anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import pydantic
import tyro

from dew import platforms
from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.files import read_json_object  # noqa: F401  (validate's, shared)
from dew.bench.record import superseded_check
from dew.bench.record.schema import ROW_MODELS, BenchmarkRun
from dew.bench.record.schema.documents import RECORD, check_document, document_kind

PROG = "python -m dew.bench.record.validate"
SUPERSEDED = "superseded records"  # documents.KINDS' name of results/superseded.json

# Segments pydantic adds to an error's location for the member of a union it tried; they
# are not part of the document's path (a row's kind, ROW_MODELS's names, is one too).
_UNION_LABELS = {"datetime", "date", "str", "int", "float", "bool", "none"}
NO_ROWS = "$.rows: the record has no rows, so it holds no result"


def json_path(loc: tuple) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _split_loc(loc: tuple) -> tuple[tuple, str | None]:
    """The document path of an error and the union member label, if any."""
    parts, label = [], None
    for i, part in enumerate(loc):
        is_tag = part in ROW_MODELS and i > 0 and isinstance(loc[i - 1], int)
        if isinstance(part, str) and (is_tag or part in _UNION_LABELS or "[" in part):
            label = part
            continue
        parts.append(part)
    return tuple(parts), label


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_errors(error: pydantic.ValidationError) -> list[str]:
    """`$.path: message` lines, one per problem (a union's alternatives merged into one)."""
    grouped: dict[tuple, list[dict]] = {}
    for item in error.errors(include_url=False):
        path, label = _split_loc(item["loc"])
        grouped.setdefault(path, []).append({**item, "label": label})
    lines = []
    for path, items in grouped.items():
        labels = [i["label"] for i in items if i["label"] and i["label"] not in ROW_MODELS]
        if len(items) > 1 and len(labels) == len(items):
            expected = ", ".join(labels[:-1]) + " or " + labels[-1]
            message = f"not a valid {expected}"
        else:
            message = "; ".join(i["msg"].removeprefix("Value error, ") for i in items)
        first = items[0]
        if first["type"] != "missing" and not isinstance(first.get("input"), dict | list):
            message += f" (got {_shown(first.get('input'))})"
        lines.append(f"{json_path(path)}: {message}")
    return lines


def check_file(path: Path, role: str = "") -> tuple[BenchmarkRun | None, list[str]]:
    """The record and no errors, or None and the error lines (without the file name).

    Raises UsageError (one line, naming the file) when the file is no JSON object at all:
    that is bad input, not an invalid record."""
    return check_text(read_json_object(path, role))


def check_text(text: str) -> tuple[BenchmarkRun | None, list[str]]:
    """check_file's verdict on a JSON object's text already read."""
    try:
        record = BenchmarkRun.model_validate_json(text)
    except pydantic.ValidationError as e:
        return None, describe_errors(e)
    if not record.rows:
        return None, [NO_ROWS]
    contradictions = self_contradictions(record)
    if contradictions:
        return None, contradictions
    return record, []


# A row's figure is the median of its repeats': a figure outside their range was not made
# from them. The slack covers the float rounding of a median of two, and the repeats' own
# rounding to 0.1 us (dew.bench.analysis.repeats.DIGITS) beside a row kept unrounded (a
# failed row keeps its one process's figure as measured).
SUMMARIZED = ("ms_per_step", "samples_per_s")
SLACK = 1e-9
ROUNDED = 0.5e-4


def self_contradictions(record: BenchmarkRun) -> list[str]:
    """What a schema-valid record says against itself, one line each: a device kind that
    is not of its platform (cpu with a TPU's kind), a row's figure outside its repeats'."""
    lines = []
    devices = record.environment.devices if record.environment else None
    if devices is not None and devices.platform and devices.kind:
        if not platforms.get(devices.platform).own(devices.kind):
            lines.append(
                f"$.environment.devices: kind {devices.kind!r} is no device of platform "
                f"{devices.platform!r}; the record contradicts itself: measure again"
            )
    for index, row in enumerate(record.rows):
        repeats = getattr(row, "repeats", None) or []
        for field in SUMMARIZED:
            value = getattr(row, field, None)
            figures = [getattr(r, field) for r in repeats if getattr(r, field, None) is not None]
            if value is None or not figures:
                continue
            low, high = min(figures), max(figures)
            if not low * (1 - SLACK) - ROUNDED <= value <= high * (1 + SLACK) + ROUNDED:
                lines.append(
                    f"$.rows[{index}].{field}: {value:g} is outside its {len(figures)} "
                    f"repeats' {low:g}..{high:g}, so not their median; the row was edited "
                    "or damaged: measure again"
                )
    return lines


def load(path: Path, role: str = "") -> BenchmarkRun:
    """A valid record, or UsageError: one line naming the file and its first problem."""
    text = read_json_object(path, role)
    kind = document_kind(json.loads(text))
    if kind not in (RECORD, None):
        name = f"{role} {path}" if role else str(path)
        article = "an" if kind[0] in "AEIOU" else "a"
        raise UsageError(f"{name} is {article} {kind} dew wrote, not a results record; give a "
                         "record (the --json-out of dew step or dew data)")  # fmt: skip
    record, errors = check_text(text)
    if errors:
        name = f"{role} {path}" if role else str(path)
        more = f" (+{len(errors) - 1} more; dew validate {path} lists them)" if errors[1:] else ""
        raise UsageError(f"{name}: {errors[0]}{more}")
    return record


@dataclasses.dataclass
class Args:
    """Validate what dew writes: a record against the results schema (results/schema), its
    other JSON against its own model; a folder's .json files all. Exit 0: all valid; 1: a
    file is invalid, or a record has no rows; 2: a file is not a JSON object, or bad flags."""

    paths: Annotated[
        tuple[str, ...],
        tyro.conf.Positional,
        tyro.conf.arg(metavar="PATH [PATH ...]", help_behavior_hint="(one or more)"),
    ]
    """files dew wrote (records, noise.json, ab-plan.json, compare.json, schemas), or
    folders of them"""


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its usage and error lines (`dew validate`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(prog, lambda: _validate(argv, prog))


def _validate(argv: list[str], prog: str) -> int:
    args = cli.parse(Args, argv, prog=prog)
    if not args.paths:
        raise UsageError("missing PATH: give one or more files dew wrote, or folders of them")
    if "" in args.paths:  # Path("") is the current folder: never what an empty word meant
        raise UsageError("PATH is empty: give a file dew wrote, or a folder of them")
    given = {Path(name) for name in args.paths}
    paths = [path for name in args.paths for path in files_under(Path(name))]
    invalid = unreadable = 0
    for path in paths:
        try:
            text = read_json_object(path)
        except UsageError as error:
            unreadable += 1
            cli.say(prog, cli.one_line(error))
            continue
        kind = document_kind(json.loads(text))
        if kind is None and path not in given:  # found in a folder: JSON of someone else's
            print(f"{path}: skipped (no file dew writes: neither a record nor dew's other JSON)")
            continue
        if kind not in (RECORD, None):
            problem = check_document(kind, text)
            errors = describe_errors(problem) if problem is not None else []
            if not errors and kind == SUPERSEDED:  # the files and commits it names too
                errors = superseded_check.check_text(path, text, check_file)
            verdict = f"ok ({kind})"
        else:
            run, errors = check_text(text)
            verdict = "" if errors else record_verdict(run)
        if errors:
            invalid += 1
            for line in errors:
                print(f"{path}: {line}", file=sys.stderr)
        else:
            print(f"{path}: {verdict}")
    if len(paths) > 1 and (invalid or unreadable):
        print(
            f"{invalid + unreadable} of {len(paths)} files invalid"
            + (f" ({unreadable} not a JSON object)" if unreadable else ""),
            file=sys.stderr,
        )
    if unreadable:
        return cli.EXIT_USAGE
    return cli.EXIT_CHANGED if invalid else cli.EXIT_OK


def files_under(path: Path) -> list[Path]:
    """`path` itself, or a folder's *.json files at every level, sorted; UsageError for a
    folder that holds none (nothing checked is no pass)."""
    if not path.is_dir():
        return [path]
    found = sorted(p for p in path.rglob("*.json") if p.is_file())
    if not found:
        raise UsageError(f"{path} is a folder with no .json file in it; give files dew wrote")
    return found


def record_verdict(run: BenchmarkRun) -> str:
    failed = sum(row.status == "failed" for row in run.rows)
    # a row kept with a NaN or inf loss (--loss-may-diverge) is no plain ok row either
    diverged = sum(
        row.status == "ok" and getattr(row, "loss_finite", None) is False for row in run.rows
    )
    kept = f", {diverged} ok with a loss that is not finite" if diverged else ""
    counts = f"{run.kind} run, {len(run.rows)} rows, {failed} failed{kept}"
    if run.partial:  # valid, but not the whole run: never "ok" alone
        return f"valid but PARTIAL ({counts}; {run.partial})"
    return f"ok ({counts})"


if __name__ == "__main__":
    sys.exit(main())
