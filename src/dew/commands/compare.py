"""`dew compare`: a run held against a reference (dew.bench.analysis.compare_command)."""

from __future__ import annotations

SUMMARY = "hold a run against a reference: REPRODUCED 0, NOT REPRODUCED 1, INCONCLUSIVE 3"


def main(argv: list[str]) -> int:
    from dew.bench.analysis.compare_command import main as compare

    return compare(argv, prog="dew compare")
