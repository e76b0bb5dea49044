"""Validate result records: `python -m dew.bench.validate FILES...`.

One line per error, `FILE: $.json.path: message`, and exit 1 when any file is invalid;
`FILE: ok (...)` for each good one. Imports only the schema (pydantic + stdlib).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pydantic

from dew.bench.schema import BenchmarkRun

# Segments pydantic adds to an error's location for the member of a union it tried; they
# are not part of the document's path.
_UNION_LABELS = {"step", "data", "datetime", "date", "str", "int", "float", "bool", "none"}


def json_path(loc: tuple) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _split_loc(loc: tuple) -> tuple[tuple, str | None]:
    """The document path of an error and the union member label, if any."""
    parts, label = [], None
    for i, part in enumerate(loc):
        is_tag = part in ("step", "data") and i > 0 and isinstance(loc[i - 1], int)
        if isinstance(part, str) and (
            is_tag or part in _UNION_LABELS - {"step", "data"} or "[" in part
        ):
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
        labels = [i["label"] for i in items if i["label"] and i["label"] not in ("step", "data")]
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


def check_file(path: Path) -> tuple[BenchmarkRun | None, list[str]]:
    """The record and no errors, or None and the error lines (without the file name)."""
    try:
        text = path.read_text()
    except OSError as e:
        return None, [f"cannot read: {e.strerror or e}"]
    try:
        return BenchmarkRun.model_validate_json(text), []
    except pydantic.ValidationError as e:
        if any(i["type"] == "json_invalid" for i in e.errors()):
            return None, [f"not JSON: {e.errors()[0]['msg']}"]
        return None, describe_errors(e)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dew.bench.validate", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    bad = 0
    for path in args.files:
        run, errors = check_file(path)
        if errors:
            bad += 1
            for line in errors:
                print(f"{path}: {line}", file=sys.stderr)
        else:
            failed = sum(row.status == "failed" for row in run.rows)
            print(f"{path}: ok ({run.kind} run, {len(run.rows)} rows, {failed} failed)")
    if bad:
        print(f"{bad} of {len(args.files)} files invalid", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
