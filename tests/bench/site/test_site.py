"""The results site (`nox -s report`): history, change points, pages, bad input, and the
docs' tables generated from committed records. The browser checks are in
test_site_browser.py."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dew.bench.analysis import plots as figure
from dew.bench.record.schema import BenchmarkRun, read_run, write_run
from dew.bench.site import build, docs
from dew.bench.site.records import load_all
from dew.bench.site.row_history import build_series

ROOT = Path(__file__).resolve().parents[3]
FIRST = ROOT / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def make_run(index: int, rows: dict[str, float], *, xla: str = "", commit="abc1234"):
    """A cpu-smoke step record on 8 simulated CPU devices, `index` hours after START, one
    row per architecture with a ±3% interval; `xla` is appended to XLA_FLAGS."""
    base = read_run(FIRST).model_dump(mode="python")
    env = base["environment"]
    env["devices"] = {"platform": "cpu", "kind": "cpu", "count": 8, "memory_gib": None}
    env["driver_version"] = None
    flags = "--xla_force_host_platform_device_count=8" + (f" {xla}" if xla else "")
    env["env_flags"] = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    env["code"] = {"commit": commit, "dirty": False, "source": "git"}
    base.update(
        schema_version=2,
        created=START + timedelta(hours=index),
        command="python tools/benchmark_step.py --preset cpu-smoke",
        source=None,
        note=None,
        settings={"preset": "cpu-smoke", "steps": 20, "dtype": "bfloat16"},
        rows=[
            {"architecture": name, "batch": 8, "sample": "16x16x3", "ms_per_step": value,
             "ms_per_step_ci95": [value * 0.97, value * 1.03], "status": "ok"}
            for name, value in rows.items()
        ],
    )  # fmt: skip
    return BenchmarkRun.model_validate(base)


def write_history(directory: Path, dit: list[float], uvit: list[float], change_at=None):
    """One record per run; from run `change_at` on, XLA's optimizations are off."""
    for i, (a, b) in enumerate(zip(dit, uvit, strict=True)):
        xla = (
            "--xla_backend_optimization_level=0" if change_at is not None and i >= change_at else ""
        )
        write_run(
            directory / f"run-{i}" / "step.json",
            make_run(i, {"simple_dit": a, "uvit": b}, xla=xla, commit=f"c{i:06d}"),
        )


def series_by_label(directory: Path):
    return {s.label: s for s in build_series(load_all([directory]).entries)}


# --- change points --------------------------------------------------------------------------


def test_a_real_change_is_flagged_at_the_first_run_after_it_with_its_stack_difference(
    tmp_path,
):
    # simple_dit doubles when XLA's optimizations go off (run 4); uvit, the same runs,
    # with the noise of the host, doubles too: both flagged at run 4, nothing else.
    write_history(
        tmp_path,
        dit=[20.1, 19.7, 20.6, 20.2, 39.8, 40.9, 40.1],
        uvit=[30.2, 31.4, 29.6, 30.8, 61.0, 59.2, 60.7],
        change_at=4,
    )
    series = series_by_label(tmp_path)
    for label in ("simple_dit", "uvit"):
        (change,) = series[label].changes
        assert change.index == 4
        assert change.ratio == pytest.approx(2.0, rel=0.05)
        point = series[label].points[4]
        assert point.entry.path.parent.name == "run-4"
        diffs = {d.what: (d.run, d.reference) for d in point.diffs}
        assert "--xla_backend_optimization_level=0" in diffs["env XLA_FLAGS"][0]
        assert "commit" in diffs


def test_a_float32_run_is_a_series_of_its_own_not_a_change(tmp_path):
    write_history(tmp_path, dit=[20.1, 19.7, 20.6], uvit=[30.2, 31.4, 29.6])
    slower = make_run(3, {"simple_dit": 27.3, "uvit": 40.8}, commit="c000003")
    slower.settings.dtype = "float32"
    write_run(tmp_path / "run-f32" / "step.json", slower)
    series = [s for s in build_series(load_all([tmp_path]).entries) if s.label == "simple_dit"]
    assert sorted(len(s.points) for s in series) == [1, 3]
    assert all(not s.changes for s in series)
    assert {s.title.endswith(" · float32") for s in series} == {True, False}


def test_a_history_without_a_change_flags_nothing(tmp_path):
    write_history(
        tmp_path,
        dit=[20.1, 19.7, 20.6, 20.2, 19.9, 20.9, 20.1],
        uvit=[30.2, 31.4, 29.6, 30.8, 31.0, 29.2, 30.7],
    )
    assert all(not s.changes for s in series_by_label(tmp_path).values())


def test_noise_within_the_band_is_no_change_and_a_real_step_is():
    from dew.bench.site.row_history import Point, change_points

    class Row:  # only what a Point's value needs
        pass

    def points(values):
        return [Point(None, Row(), v, (v * 0.97, v * 1.03)) for v in values]

    rng = random.Random(0)
    for _ in range(100):  # 2% noise (sd), 4 to 12 runs: never flagged
        flat = [20 * (1 + rng.gauss(0, 0.02)) for _ in range(rng.randint(4, 12))]
        assert change_points(points(flat))[1] == [], flat
    flagged = 0
    for _ in range(50):  # a 25% step in 1% noise: flagged where it is
        values = [20 * (1 + rng.gauss(0, 0.01)) for _ in range(4)]
        values += [25 * (1 + rng.gauss(0, 0.01)) for _ in range(4)]
        changes = change_points(points(values))[1]
        flagged += [c.index for c in changes] == [4]
    assert flagged >= 48
    assert change_points(points([20.0, 40.0]))[1] == []  # two runs: no history yet


# --- the site ---------------------------------------------------------------------------------


@pytest.fixture
def records(tmp_path):
    """A history with a change, the published records beside it."""
    runs = tmp_path / "results" / "runs"
    write_history(
        runs, [20.1, 19.7, 20.6, 20.2, 39.8, 40.9], [30.2, 31.4, 29.6, 30.8, 61.0, 59.2], 4
    )
    published = tmp_path / "results" / "published"
    published.mkdir(parents=True)
    (published / FIRST.name).write_bytes(FIRST.read_bytes())
    return tmp_path / "results"


def test_site_has_every_architecture_run_and_change_and_fetches_nothing(records, capsys):
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.err == ""
    assert f"site: {out / 'index.html'}" in printed.out and "2 change points flagged" in printed.out
    index = (out / "index.html").read_text()
    labels = {row.label() for row in read_run(FIRST).rows} | {"simple_dit", "uvit"}
    for label in labels:
        assert f'data-architecture="{label}"' in index
        assert (out / "arch" / f"{label.replace('_', '-')}.html").is_file()
    assert len(list((out / "runs").glob("*.html"))) == 7
    # The published row beside the CPU run of the same case, on its own device.
    assert "7.90 ms, batch 16, RTX 4080 ×1, 2026-09-02" in index
    page = (out / "arch" / "simple-dit.html").read_text()
    assert "<svg" in page and "Change point: +" in page and "env XLA_FLAGS" in page
    for html in out.rglob("*.html"):  # every script and style is the site's own
        text = html.read_text()
        for fetch in ('src="http', "src='http", 'href="http', "url(http", "@import", "//cdn"):
            assert fetch not in text, (html, fetch)
    assert (out / "static" / "site.js").is_file() and (out / "static" / "site.css").is_file()


def test_an_invalid_record_is_skipped_in_one_line_and_the_site_still_written(records, capsys):
    (records / "runs" / "broken.json").write_text('{"schema_version": 2, "kind": "step"}')
    (records / "runs" / "binary.json").write_bytes(b"\xff\xfe\x00")
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("python -m dew.bench.site: skipped: ") for line in lines)
    assert any("broken.json: $." in line for line in lines)
    assert any("binary.json" in line and "not a text file" in line for line in lines)
    assert (out / "index.html").is_file()


def test_an_empty_directory_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "site"
    assert build.main([str(tmp_path / "empty"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("python -m dew.bench.site: error: no valid record under ")
    assert not out.exists()


@pytest.mark.parametrize(
    "where, message",
    [
        ("file.txt/site", "is not a directory"),  # under a regular file: unwritable, as root
        ("/proc/dew-site", "cannot be written"),
    ],
)
def test_an_unwritable_output_is_one_line_before_any_work(records, capsys, where, message):
    (records.parent / "file.txt").write_text("keep me\n")
    out = where if where.startswith("/") else str(records.parent / where)
    assert build.main([str(records), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and "--out" in err
    assert (records.parent / "file.txt").read_text() == "keep me\n"


def test_another_directory_is_never_replaced_and_our_site_is(records, capsys):
    other = records.parent / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me\n")
    assert build.main([str(records), "--out", str(other)]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (other / "mine.txt").read_text() == "keep me\n"
    # The records' own directory is never an output.
    assert build.main([str(records), "--out", str(records)]) == 2
    assert "holds the records read" in capsys.readouterr().err
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    (out / "stale.html").write_text("old page")
    assert build.main([str(records), "--out", str(out)]) == 0  # ours: replaced whole
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()


def test_missing_directory_and_bad_flag_are_one_line(tmp_path, capsys):
    assert build.main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "s")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert build.main(["--no-such-flag"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_repository_records_render(repository_site):
    index = (repository_site / "index.html").read_text()  # built (exit 0) by conftest.py
    loaded = load_all([ROOT / "results"])
    assert not [line for line in loaded.skipped if "/published/" in line]
    for entry in loaded.entries:
        for row in entry.record.rows if entry.record.kind == "step" else ():
            assert f'data-architecture="{row.label()}"' in index, (entry.path, row.label())


# --- the figure compare --plot shares ----------------------------------------------------------


def test_the_comparison_chart_is_the_sites_figure(tmp_path):
    from dew.bench.analysis import comparison

    rerun = ROOT / "results" / "published" / "2026-09-05-rtx4080-9886c20-rerun.json"
    cmp = comparison.compare(read_run(rerun), read_run(FIRST))
    png = figure.comparison_chart(tmp_path / "chart.png", cmp.rows, "ms_per_step", "a", "b")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = figure.svg_element(figure.draw([figure.Panel("row", [figure.Mark("run", 1.0)])]))
    assert svg.startswith("<svg") and svg == figure.svg_element(
        figure.draw([figure.Panel("row", [figure.Mark("run", 1.0)])])
    )  # the same records make the same page


# --- the docs' tables -------------------------------------------------------------------------


def test_docs_tables_are_regenerated_and_checked(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    record = tmp_path / "results" / "runs" / "a" / "step.json"
    write_run(record, make_run(0, {"simple_dit": 20.0}))
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    marker = "<!-- dew-table: step results/runs/a/step.json -->"
    page.write_text(f"# Page\n\n{marker}\n| stale |\n<!-- /dew-table -->\n\nAfter.\n")
    assert docs.main(["--check", str(page)]) == 1
    assert f"{page}:3: table differs from step results/runs/a/step.json" in capsys.readouterr().err
    assert docs.main([str(page)]) == 0
    text = page.read_text()
    assert "| simple_dit | 16x16x3 | 8 |" in text and text.endswith(
        "<!-- /dew-table -->\n\nAfter.\n"
    )
    capsys.readouterr()
    assert docs.main(["--check", str(page)]) == 0
    page.write_text(f"{marker}\n| never closed |\n")
    assert docs.main([str(page)]) == 2
    assert "not closed" in capsys.readouterr().err
    page.write_text("<!-- dew-table: pie results/runs/a/step.json -->\n<!-- /dew-table -->\n")
    assert docs.main([str(page)]) == 2
    assert "is not a table spec" in capsys.readouterr().err


def test_every_table_in_the_docs_is_what_its_records_give(capsys):
    files = [str(ROOT / "docs" / "performance.md"), str(ROOT / "README.md")]
    assert docs.main(["--check", *files]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "docs/performance.md: 0 tables" not in out


def test_one_slow_latest_run_is_no_change_point_but_is_said(tmp_path, capsys):
    write_history(tmp_path, dit=[20.1, 19.7, 20.6, 20.2, 40.3], uvit=[30.2, 31.4, 29.6, 30.8, 30.1])
    series = series_by_label(tmp_path)
    dit = series["simple_dit"]
    assert dit.changes == [] and dit.pending.startswith("latest run +")
    assert series["uvit"].pending is None
    out = tmp_path / "site"
    assert build.main([str(tmp_path), "--out", str(out)]) == 0
    assert "run again to confirm a change" in (out / "index.html").read_text()


# --- what the site reads, and what it shows beside a row (issue 42) ---------------------------

RUN_DIR = ROOT / "results" / "runs" / "20261203T172659Z-reproduce-cpu-smoke-cpu-975fa3b"
PLAN = ROOT / "results" / "runs" / "20261203T153612Z-ab-cpu-smoke-cpu-d7c7594" / "ab-plan.json"


def test_dews_other_json_is_listed_by_kind_and_only_a_broken_record_is_skipped(records, capsys):
    others = records / "runs" / "others"
    others.mkdir()
    (others / "noise.json").write_bytes((ROOT / "results" / "noise.json").read_bytes())
    (others / "ab-plan.json").write_bytes(PLAN.read_bytes())
    (others / "compare.json").write_bytes((RUN_DIR / "compare.json").read_bytes())
    # named like a record, but a comparison's content: its content decides, not its name
    (others / "step.json").write_bytes((RUN_DIR / "compare.json").read_bytes())
    (others / "notes.json").write_text('{"hello": "not dew\'s"}')  # ignored quietly
    (others / "broken.json").write_text('{"schema_version": 2, "kind": "step"}')
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    (line,) = printed.err.strip().splitlines()  # the broken record alone
    assert line.startswith("python -m dew.bench.site: skipped: ") and "broken.json" in line
    assert "1 file skipped, 4 other JSON files listed" in printed.out
    index = (out / "index.html").read_text()
    lead = index[index.index('<p class="lead">') : index.index("</p>")]
    assert f"run level ({others / 'noise.json'})" in lead
    assert f"A/B plan ({others / 'ab-plan.json'})" in lead
    assert f"comparison ({others / 'compare.json'}, {others / 'step.json'})" in lead
    assert "notes.json" not in index
    assert lead.count('class="warn"') == 1  # red: the broken record only


def _latest(index: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The front page's latest table: (architecture, device) -> (interval, published) of
    its first row (the newest stack's)."""
    import re

    table = index[index.index('id="latest"') :]
    table = table[: table.index("</table>")]
    found = {}
    for label, body in re.findall(r'<tr data-architecture="([^"]+)">(.*?)</tr>', table, re.S):
        cells = [
            re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        ]
        found.setdefault((label, cells[1]), (cells[7], cells[12]))
    return found


def test_published_only_beside_the_same_device_kind_preset_and_batch(records, capsys):
    # A published cpu-smoke record of simple_dit, batch 8, on the CPU: beside the CPU rows
    # of simple_dit; the RTX 4080 small-preset record (batch 16) beside none of them.
    write_run(records / "published" / "cpu.json", make_run(0, {"simple_dit": 18.25}))
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    capsys.readouterr()
    latest = _latest((out / "index.html").read_text())
    assert latest["simple_dit", "cpu ×8"][1].startswith("18.25 ms, batch 8, cpu ×8")
    assert latest["uvit", "cpu ×8"][1] == "no published row"
    assert latest["simple_dit", "RTX 4080 ×1"][1].startswith("7.90 ms, batch 16, RTX 4080")


def test_no_interval_from_one_repeat(records, capsys):
    # make_run's rows carry an interval and no repeats (as records made before schema 2's
    # rule kept one from a single process's steps); two repeats show theirs.
    last = read_run(records / "runs" / "run-5" / "step.json").model_dump(mode="json")
    first = last["rows"][0]
    first["repeats"] = [{"ms_per_step": first["ms_per_step"], "synced_ms": [1.0]}] * 2
    write_run(records / "runs" / "run-6" / "step.json", BenchmarkRun.model_validate(last))
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    capsys.readouterr()
    latest = _latest((out / "index.html").read_text())
    assert latest["simple_dit", "cpu ×8"][0].endswith("(2)")
    assert latest["uvit", "cpu ×8"][0] == "—"


def test_a_comparison_on_the_front_page_names_its_outcome(records, capsys):
    """Issue 40: the site uses compare's three words. A comparison's JSON of today's compare
    is listed with its outcome; an older one's (another rule) with its path alone."""
    import subprocess
    import sys

    others = records / "runs" / "others"
    others.mkdir()
    old = others / "old-compare.json"
    old.write_bytes((RUN_DIR / "compare.json").read_bytes())
    new = others / "compare.json"
    published = ROOT / "results" / "published"
    pair = [published / "2026-09-05-rtx4080-9886c20-rerun.json",
            published / "2026-09-02-rtx4080-6b0f119-small.json"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "dew.bench.analysis.compare_command", *map(str, pair), "--format",
         "json"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # INCONCLUSIVE
    new.write_text(done.stdout)
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    index = (out / "index.html").read_text()
    lead = index[index.index('<p class="lead">') : index.index("</p>")]
    assert f"{new}: INCONCLUSIVE" in lead
    assert f"{old})" in lead or f"{old}," in lead  # no word from an older rule


def test_a_partial_record_is_marked_partial_on_the_index_and_its_page(records, capsys):
    # Issue 63: a run a stop cut short was listed and shown as a whole one
    path = records / "runs" / "run-5" / "step.json"
    cut = read_run(path).model_copy(update={"partial": "stopped by SIGINT: 1 of 2 cases finished"})
    write_run(path, cut)
    out = records.parent / "site"
    assert build.main([str(records), "--out", str(out)]) == 0
    capsys.readouterr()
    assert "(PARTIAL: stopped by SIGINT: 1 of 2 cases finished)" in (out / "index.html").read_text()
    pages = [p.read_text() for p in (out / "runs").glob("*.html")]
    assert sum("PARTIAL: this run did not reach its end" in page for page in pages) == 1
