"""compare on a terminal fits its width, as the step table does (one terminal_table); a file
or a pipe keeps the full form; a loader row's interval reads the same way in its table and
in its note, and every ratio column carries its unit (issue 52)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.analysis import compare_report, comparison, tables
from dew.bench.analysis.levels import noise
from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
O0 = RUNS / "20261204T173319Z-cpu-smoke-o0-cpu-cbb6b2f" / "step.json"
DEFAULT = RUNS / "20261204T173319Z-cpu-smoke-default-cpu-cbb6b2f" / "step.json"
TCMALLOC = RUNS / "20261202-cpu-smoke-malloc-tcmalloc" / "step.json"
SYSTEM = RUNS / "20261202-cpu-smoke-malloc-system" / "step.json"
LOADER_A = RUNS / "20261202T110051Z-cpu-smoke-cpu-5c00680-dirty" / "data-workers-0.json"
LOADER_B = RUNS / "20261203T072745Z-cpu-smoke-cpu-d90a3f0" / "data-workers-0.json"


def report(run: Path, ref: Path, fmt: str, width: int = 0) -> str:
    a, b = read_run(run), read_run(ref)
    cmp = comparison.compare(a, b, run_label=str(run), reference_label=str(ref))
    return compare_report.comparison(cmp, a, b, fmt, width)


def words_over(text: str, width: int) -> list[str]:
    """The lines wider than `width` that are more than one word (a path is let through)."""
    return [line for line in text.splitlines() if len(line) > width and " " in line.strip()]


CASES = [(O0, DEFAULT, 60), (TCMALLOC, SYSTEM, 60), (LOADER_A, LOADER_B, 80)]


@pytest.mark.parametrize(("run", "ref", "narrowest"), CASES)
@pytest.mark.parametrize("width", [120, 80, 60])
def test_on_a_terminal_every_line_fits(run, ref, narrowest, width):
    """Down to the width of the columns always kept (the row's name whole, its timing ratio
    with its interval, its verdict): the loader's row names are 40 characters."""
    if width < narrowest:
        pytest.skip(f"narrower than {run.parent.name}'s kept columns")
    full = report(run, ref, "md")
    assert max(map(len, full.splitlines())) > 150  # what a file or a pipe still gets
    fitted = report(run, ref, "terminal", width)
    assert words_over(fitted, width) == []
    lines = fitted.splitlines()
    assert lines[0].startswith("Comparison") and "Verdict" in lines
    rows = lines.index("Rows") + 2
    assert lines[rows].startswith("row ") and "verdict" in lines[rows]  # always kept
    if width == 60 and run == TCMALLOC:  # the long LD_PRELOAD value: shortened, and said
        assert any("…" in line for line in lines) and "long values shortened" in fitted


def test_the_dew_command_fits_a_terminal_and_gives_a_pipe_the_full_form():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "80"}
    argv = [sys.executable, "-m", "dew.commands", "compare", str(O0), str(DEFAULT)]
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    assert piped.returncode == 3 and piped.stdout.startswith("## Comparison")
    assert max(map(len, piped.stdout.splitlines())) > 150
    script = ["script", "-qec", " ".join(argv), "/dev/null"]
    try:
        tty = subprocess.run(script, capture_output=True, text=True, env=env, cwd=REPO)
    except FileNotFoundError:
        pytest.skip("needs script(1) for a terminal")
    shown = tty.stdout.replace("\r", "")
    assert shown.startswith("Comparison") and words_over(shown, 80) == [], shown


def test_a_loader_row_of_one_process_a_side_and_no_history_is_not_judged():
    # its noise is known from nothing: neither side's repeats nor an A/A record of it
    text = report(LOADER_A, LOADER_B, "text")
    assert "undecided: one process a side of a row no A/A record holds" in text


def test_a_loader_rows_interval_reads_as_its_table_shows_it():
    # judged at its kind's levels (as a row the history held would be)
    a, b = read_run(LOADER_A), read_run(LOADER_B)
    model = noise.for_records(a, b)
    model = dataclasses.replace(model, unseen=None)
    cmp = comparison.compare(a, b, noise=model)
    text = compare_report.comparison(cmp, a, b, "text", 0)
    row = next(line for line in text.splitlines() if line.startswith("synthetic-images"))
    low, high = row.split("[")[1].split("]")[0].split(", ")
    assert f"its change {low}-{high}" in text  # samples/s, not the time it inverts
    header = next(line for line in text.splitlines() if line.startswith("row "))
    for column in ("p50 ms ratio", "p95 ms ratio", "first batch s ratio"):
        assert column in header


def test_compare_and_the_step_table_share_one_fitting():
    assert compare_report.terminal_table is tables.terminal_table
