"""The reports: rows name themselves (row.label()), a comparison's report (md, text, JSON)
says what it assumed and could detect, and a chart replaces its file in one step."""

import contextlib
import json
from pathlib import Path

import pytest

from dew.bench.analysis import compare_report, comparison, tables
from dew.bench.analysis import plots as figure
from dew.bench.record.schema import StepRow, read_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"
RUNS = PUBLISHED.parent / "runs"
AA2_A = RUNS / "20261202-cpu-smoke-stats-aa2-a" / "step.json"
OPT0 = RUNS / "20261202-cpu-smoke-stats-opt0" / "step.json"


def test_tables_name_rows_by_their_label():
    rows = read_run(RERUN).rows
    text = tables.step_table(rows, "tsv")
    assert [line.split("\t")[0] for line in text.splitlines()[1:]] == [r.label() for r in rows]
    failed = StepRow(
        architecture="unet", case={"batch": 16, "moe": True}, status="failed", error="boom"
    )
    table = tables.step_table([failed], "md", compile_only=True)
    assert table.splitlines()[2].startswith("| unet (moe) | — | — | failed: boom |")


@pytest.fixture
def opt0_vs_aa(pinned_noise):
    run, ref = read_run(OPT0), read_run(AA2_A)
    return comparison.compare(run, ref, run_label="opt0", reference_label="aa2-a"), run, ref


def test_the_report_states_the_noise_it_assumed_and_what_it_could_not_detect(opt0_vs_aa):
    cmp, run, ref = opt0_vs_aa
    text = compare_report.comparison(cmp, run, ref, "text")
    header = text.split("Stack differences")[0]
    assert "- host drift: the host probe read 1.016x" in header
    line = next(line for line in header.splitlines() if line.startswith("- noise assumed"))
    assert "from cpu: 4 records in 1 A/A groups" in line
    assert "- the whole run is 41.9% slower (the median of the rows' ratios" in header
    worst = max(row.detect.mde for row in cmp.counted)
    best = min(row.detect.mde for row in cmp.counted)
    assert cmp.detectable == worst and best < worst
    summary = compare_report.summary(cmp)
    assert summary.startswith("NOT REPRODUCED: 4 comparable rows: 1 faster, 1 slower, 2 "
                              "undecided")  # fmt: skip
    assert "uvit slower (+65.0%)" in summary  # its whole change: the shift is undecided
    assert (f"could not detect a change of less than {worst:.0%} in every row ({best:.0%} in "
            "its best row)") in summary  # fmt: skip
    assert summary in text and "\nVerdict\n" in text  # text: no Markdown headings
    md = compare_report.comparison(cmp, run, ref, "md")
    assert "### Verdict" in md
    assert "| against the shift | p (Holm) | MDE | n for 10% | verdict |" in md


def test_a_noise_level_under_one_percent_keeps_two_figures():
    # A TPU's levels are hundredths of a percent: one decimal would print them as zero.
    assert [tables.level(v) for v in (0.164, 0.0102, 0.00045, 0.0001, 0.0)] == [
        "16.4%", "1.0%", "0.045%", "0.01%", "0.0%"]  # fmt: skip
    assert tables.level(1e-7) == "<0.001%"


def test_the_json_report_is_strict_json_for_rows_without_statistics(pinned_noise):
    run, ref = read_run(RERUN), read_run(FIRST)
    cmp = comparison.compare(run, ref)
    document = json.loads(json.dumps(compare_report.as_json(cmp), allow_nan=False))
    rows = {row["label"]: row for row in document["rows"]}
    absent = rows["unet"]  # a reference row the run does not have
    assert absent["verdict"] == "not in this run" and absent["run"] is None
    assert (absent["judged"], absent["changes"]["total"], absent["p_holm"], absent["mde"],
            absent["counts"]) == (None, None, None, None, False)  # fmt: skip
    dit = rows["simple_dit"]
    assert dit["one_process"] == "both" and dit["repeats"] == [1, 1]
    assert dit["repeats_for_target"] is None and dit["mde_floor"] > 0.10  # "never"
    assert document["host_drift"] is None and document["stack"][0]["what"] == "commit"
    assert document["noise"]["shift_df"] is not None and document["noise"]["rows"] == {}
    assert document["outcome"] == "INCONCLUSIVE" and document["exit"] == 3


def _chart_rows():
    from types import SimpleNamespace

    run = StepRow(architecture="a", status="ok", ms_per_step=1.0)
    return [SimpleNamespace(label="a", run=run, reference=run)]


def test_the_chart_replaces_the_file_whole(tmp_path):
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"the previous chart")
    figure.comparison_chart(chart, _chart_rows(), "ms_per_step", "run", "ref")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]  # no temporary left


def test_a_chart_that_fails_to_render_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def half_written(self, target, **kwargs):
        named = isinstance(target, str | Path)  # a file name, or a stream to write into
        with open(target, "wb") if named else contextlib.nullcontext(target) as f:
            f.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"the previous chart")
    with pytest.raises(OSError):
        figure.comparison_chart(chart, _chart_rows(), "ms_per_step", "run", "ref")
    assert chart.read_bytes() == b"the previous chart"
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]


def test_a_comparison_with_no_comparable_row_gives_no_verdict(pinned_noise):
    """cpu-smoke against a published small record: every row another model, so neither
    REPRODUCED nor NOT REPRODUCED: INCONCLUSIVE, saying nothing was compared."""
    cmp = comparison.compare(read_run(AA2_A), read_run(FIRST))
    assert cmp.counted == [] and not cmp.reproduced and cmp.outcome == "INCONCLUSIVE"
    assert compare_report.summary(cmp).startswith(
        "INCONCLUSIVE: nothing compared: no row of the run has a comparable"
    )


def test_on_a_terminal_the_step_table_fits_its_width_with_warnings_as_notes():
    """Issue 42: the README's example printed lines of 154-302 characters with the warnings
    as prose in a column; on a terminal it fits, the warnings numbered under it."""
    record = read_run(RUNS / "20261203T072630Z-cpu-smoke-two-cpu-d90a3f0" / "step.json")
    text = tables.step_table(record.rows, "tsv")
    assert max(len(line) for line in text.splitlines()) > 150  # what a pipe still gets
    headers = tables.step_table(record.rows, "md").splitlines()[0]
    body = [row.split("\t") for row in text.splitlines()[1:]]
    for width in (120, 100, 80):
        shown = tables.terminal_table(headers.strip("| ").split(" | "), body, width)
        lines = shown.splitlines()
        table_lines = [line for line in lines if not line.startswith(("[", "("))]
        assert max(len(line) for line in table_lines) <= width, (width, shown)
        assert lines[0].startswith("architecture") and "notes" in lines[0]
        assert "[1] wide spread: the steps vary by 15% (CV)" in lines
    assert "left out to fit 80 columns: sample" in shown
    assert tables.for_terminal("md") == "md" and tables.for_terminal("auto") == "tsv"  # a pipe
