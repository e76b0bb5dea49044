"""`dew data`: the loader benchmark, `tools/benchmark_data.py` (dew.bench.loader.data_command)."""

from __future__ import annotations

SUMMARY = "time input loading on its own (tools/benchmark_data.py)"


def main(argv: list[str]) -> int:
    from dew.bench.loader.data_command import main as benchmark_data

    return benchmark_data(argv, prog="dew data")
