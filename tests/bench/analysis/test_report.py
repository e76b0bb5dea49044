"""report: rows name themselves (row.label()) and a chart replaces its file in one step."""

import contextlib
from pathlib import Path

import pytest

from dew.bench.analysis import plots as figure
from dew.bench.analysis import tables as report
from dew.bench.record.schema import StepRow, read_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"


def test_tables_name_rows_by_their_label():
    rows = read_run(RERUN).rows
    text = report.step_table(rows, "tsv")
    assert [line.split("\t")[0] for line in text.splitlines()[1:]] == [r.label() for r in rows]
    failed = StepRow(
        architecture="unet", case={"batch": 16, "moe": True}, status="failed", error="boom"
    )
    table = report.step_table([failed], "md", compile_only=True)
    assert table.splitlines()[2].startswith("| unet (moe) | — | — | failed: boom |")


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
