"""`dew validate`: records checked against the schema (dew.bench.record.validate)."""

from __future__ import annotations

SUMMARY = "check record files against the results schema"


def main(argv: list[str]) -> int:
    from dew.bench.record.validate import main as validate

    return validate(argv, prog="dew validate")
