"""`dew reproduce`: `nox -s reproduce` (dew.host.sessions.reproduce_session), once the record
is known to be a whole, valid record (this command runs in dew's own environment, which
holds the schema the host side does without)."""

from __future__ import annotations

import json
import os
from pathlib import Path

SUMMARY = "rerun a step record on its own stack, then compare (nox -s reproduce)"


def main(argv: list[str]) -> int:
    """A TPU record is rerun on this host (dew.commands.on_chip: a TPU host has no nox and no
    image to build); any other through `nox -s reproduce`."""
    from dew.commands.through_nox import run_session
    from dew.host.sessions.reproduce_session import check_arguments, help_text

    if not {"-h", "--help"} & set(argv):
        from dew.bench.record import stack
        from dew.host.benchmarks import TYPED_COMMAND

        os.environ[TYPED_COMMAND] = "dew reproduce"
        try:
            record = check_record(argv)
        except SystemExit as stop:  # its line is out
            return stop.code if isinstance(stop.code, int) else 2
        if stack.recorded_variant(record) == stack.TPU_HOST:
            from dew.commands.on_chip import reproduce

            return reproduce(argv)

    def check(argv: list[str], python: str) -> None:
        check_record(argv)
        check_arguments(argv, python)

    return run_session("reproduce", help_text("dew reproduce"), argv, check)


def check_record(argv: list[str]) -> dict:
    """The record (its JSON) validated by the schema (which refuses one of no rows); else one
    line, exit 2."""
    from dew.bench.common.errors import UsageError
    from dew.bench.record.validate import check_file
    from dew.host import replay

    record_path, _, _ = replay.parse_reproduce(argv)
    try:
        _, errors = check_file(Path(record_path), "RECORD")
    except UsageError as error:
        replay.usage("reproduce", str(error))
    if errors:  # a record of no rows, or of a schema this dew cannot read, included
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        replay.usage("reproduce", f"RECORD {record_path} is no valid record: {errors[0]}{more}; "
                                  f"dew validate {record_path} lists them")  # fmt: skip
    return json.loads(Path(record_path).read_text())
