"""`python -m dew.bench.site.docs`: a figure in the docs comes from a record of a clean
commit. A marker whose record was made on a dirty tree fails --check in one line naming
the record; the published records, which state no dirty flag, pass."""

from __future__ import annotations

from pathlib import Path

from dew.bench.record.schema import BenchmarkRun, read_run, write_run
from dew.bench.site import docs

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"


def record(dirty: bool | None) -> BenchmarkRun:
    """The published record with one row, its code marked clean, dirty or unknown."""
    base = read_run(PUBLISHED).model_dump(mode="python")
    base["environment"]["code"] = {"commit": "abc1234", "dirty": dirty, "source": "git"}
    base["rows"] = base["rows"][:1]
    return BenchmarkRun.model_validate(base)


def page_with(tmp_path: Path, **records: bool | None) -> Path:
    """A repository in tmp_path with one record per name and a page with a marker for each,
    its table already regenerated."""
    (tmp_path / "pyproject.toml").write_text("")
    parts = ["# Page\n"]
    for name, dirty in records.items():
        write_run(tmp_path / "results" / "runs" / name / "step.json", record(dirty))
        parts.append(f"\n<!-- dew-table: step results/runs/{name}/step.json -->\n")
        parts.append("<!-- /dew-table -->\n")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("".join(parts))
    assert docs.main([str(page)]) == 0
    return page


def test_a_dirty_record_fails_the_check_in_one_line_naming_it(tmp_path, capsys):
    page = page_with(tmp_path, clean=False, dirty=True)
    capsys.readouterr()
    assert docs.main(["--check", str(page)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    marker = "<!-- dew-table: step results/runs/dirty/step.json -->"
    line = page.read_text().splitlines().index(marker) + 1
    assert lines == [f"{page}:{line}: results/runs/dirty/step.json {docs.DIRTY}"]
    assert "dirty tree" in lines[0]


def test_clean_and_unstated_records_pass_the_check(tmp_path, capsys):
    page = page_with(tmp_path, clean=False, unstated=None)
    capsys.readouterr()
    assert docs.main(["--check", str(page)]) == 0
    assert capsys.readouterr().err == ""


def test_regenerating_names_a_dirty_record_but_still_writes_the_table(tmp_path, capsys):
    page = page_with(tmp_path, dirty=True)
    assert "results/runs/dirty/step.json was made on a dirty tree" in capsys.readouterr().err
    assert "| unet | 64x64x3 | 16 |" in page.read_text()


def test_a_parity_marker_names_its_dirty_run_not_its_clean_reference(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    write_run(tmp_path / "results" / "runs" / "run" / "step.json", record(True))
    write_run(tmp_path / "results" / "published" / "ref.json", record(None))
    page = tmp_path / "page.md"
    spec = "parity results/runs/run/step.json results/published/ref.json"
    page.write_text(f"<!-- dew-table: {spec} -->\n<!-- /dew-table -->\n")
    docs.main([str(page)])
    capsys.readouterr()
    assert docs.main(["--check", str(page)]) == 1
    err = capsys.readouterr().err
    assert "results/runs/run/step.json was made on a dirty tree" in err
    assert "results/published/ref.json" not in err


# --- a TPU record's rounds (`chip-rounds RECORD`) -----------------------------------------

CHIP_KEPT = "results/runs/20261207T122611Z-small-small2-tpu-v5e-a1819e0/step.json"


def test_a_chip_record_s_rounds_add_up_to_their_wall_clock():
    from dew.bench.runtime.phases import chip_rounds

    rounds = chip_rounds(read_run(ROOT / CHIP_KEPT).rows)
    assert [(r.number, r.cases) for r in rounds] == [(1, 18), (2, 18), (3, 18)]
    for r in rounds:  # one holder a round: its opening, the loads, then each case in turn
        assert 0 < r.open_s < r.load_s < r.timed_s < r.wall_s
        assert r.open_s + r.load_s + r.init_s + r.timed_s <= r.wall_s + 0.01
        assert r.wall_s - (r.open_s + r.load_s + r.init_s + r.timed_s) < 0.1 * r.wall_s


def test_a_chip_rounds_marker_renders_them_and_refuses_a_record_without_a_chip(tmp_path):
    import pytest

    from dew.bench.common.cli import UsageError

    (tmp_path / "pyproject.toml").write_text("")
    chip = tmp_path / "results" / "runs" / "chip" / "step.json"
    write_run(chip, read_run(ROOT / CHIP_KEPT))
    write_run(tmp_path / "results" / "runs" / "gpu" / "step.json", record(False))
    page = tmp_path / "page.md"
    page.write_text("<!-- dew-table: chip-rounds results/runs/chip/step.json -->\n"
                    "<!-- /dew-table -->\n")  # fmt: skip
    assert docs.main([str(page)]) == 0
    lines = page.read_text().splitlines()
    assert lines[1] == "| round | cases | open s | load s | init s | timed s | round s |"
    assert len(lines) == 2 + 2 + 3 and lines[3].startswith("| 1 | 18 | 7.6 | 37.3 | ")
    page.write_text("<!-- dew-table: chip-rounds results/runs/gpu/step.json -->\n"
                    "<!-- /dew-table -->\n")  # fmt: skip
    with pytest.raises(UsageError, match="has no held-chip round"):
        docs.regenerate(page)
