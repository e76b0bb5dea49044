"""`dew schema --export DIR`: the JSON Schema of a record (dew.bench.record.schema)."""

from __future__ import annotations

SUMMARY = "export the results JSON Schema (--export DIR; nox -s schema: results/schema)"


def main(argv: list[str]) -> int:
    from dew.bench.record.schema.__main__ import main as export

    return export(argv, prog="dew schema")
