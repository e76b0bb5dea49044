"""A new benchmark kind is one module and its registration: a toy "echo" kind, whose
rows time one field, validates, is compared and is shown by the site, with no edit of the
schema, compare, the tables or the site (the block below is all of it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from pydantic import Field

from dew.bench.analysis import compare_command
from dew.bench.analysis.kinds import KINDS, Kind, registered
from dew.bench.record import validate
from dew.bench.record.schema import NonNegFloat, Record, RowBase, read_run
from dew.bench.site import build

REPO = Path(__file__).resolve().parents[4]
ENVIRONMENT = REPO / "results/runs/20261202-cpu-smoke-stats-aa1-a/step.json"  # a CPU host's


# --- the kind: one block ------------------------------------------------------------------


class EchoRepeat(Record):
    ms: NonNegFloat


class EchoRow(RowBase):
    name: str  # its identity: the first field
    ms: NonNegFloat | None = None  # the one timing
    repeats: list[EchoRepeat] | None = None
    warnings: list[str] = Field(default_factory=list)
    status: Literal["ok", "failed"]
    error: str | None = None

    def key(self) -> tuple:
        return (self.name,)

    def label(self) -> str:
        return self.name


class EchoKind(Kind):
    name: ClassVar[str] = "echo"
    row_model: ClassVar[type[EchoRow]] = EchoRow
    timings: ClassVar[tuple[str, ...]] = ("ms",)
    ratio_fields: ClassVar[tuple[str, ...]] = ("ms",)


@pytest.fixture(autouse=True, scope="module")
def echo_kind():
    """The registration (a module of its own would call kinds.register(EchoKind()) at
    import); here for this module's tests only, so the rest of the suite sees dew's kinds."""
    with registered(EchoKind()) as kind:
        yield kind


# ------------------------------------------------------------------------------------------


def echo_record(path: Path, scale: float) -> Path:
    """Two rows of three repeats each, their times `scale` times a fixed set."""
    environment = json.loads(ENVIRONMENT.read_text())["environment"]
    rows = []
    for name, base in (("ping", 10.0), ("pong", 20.0)):
        repeats = [round(base * scale * f, 4) for f in (0.99, 1.0, 1.01)]
        rows.append({"name": name, "ms": repeats[1], "status": "ok",
                     "repeats": [{"ms": ms} for ms in repeats]})  # fmt: skip
    record = {
        "schema_version": 3, "kind": "echo", "created": "2026-12-05T08:00:00Z",
        "command": "echo", "settings": {}, "environment": environment, "idle_check": None,
        "rows": rows,
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
    return path


@pytest.fixture
def records(tmp_path):
    return (echo_record(tmp_path / "echo" / "slow.json", 2.0),
            echo_record(tmp_path / "echo" / "base.json", 1.0))  # fmt: skip


def test_the_kind_is_registered_beside_dews_own():
    assert {"step", "data", "echo"} <= set(KINDS)
    assert KINDS["echo"].timing == "ms"


def test_its_records_validate(records, capsys):
    assert validate.main([str(p) for p in records]) == 0
    run = read_run(records[0])
    assert run.kind == "echo" and isinstance(run.rows[0], EchoRow)
    assert run.rows[1].repeats[0].ms == pytest.approx(39.6)


def test_a_run_twice_as_slow_is_not_reproduced(records, capsys):
    slow, base = records
    assert compare_command.main([str(slow), str(base), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "NOT REPRODUCED" and report["timing"] == "ms"
    assert [row["verdict"] for row in report["rows"]] == ["slower", "slower"]
    first = report["rows"][0]
    assert first["judged"] == "total" and first["changes"]["total"]["ratio"] == pytest.approx(2.0)
    # A copy of the record is no change (two rows of three repeats cannot show it the same
    # within the CPU band at this host's run level: INCONCLUSIVE, exit 3).
    copy = shutil.copy(base, base.with_name("copy.json"))
    assert compare_command.main([str(base), str(copy)]) == 3
    assert "| ms ratio |" in capsys.readouterr().out  # its column named by its field


def test_the_site_renders_its_records(records, tmp_path, capsys):
    out = tmp_path / "site"
    assert build.main([str(records[0].parent), "--out", str(out)]) == 0
    pages = sorted(p.name for p in (out / "runs").iterdir())
    assert len(pages) == 2, pages
    index = (out / "index.html").read_text()
    assert "echo" in index and "slow.json" in index
    page = next((out / "runs").glob("*slow*.html")).read_text()
    assert "<th>row</th><th>ms</th>" in page  # the default table: the label, each timing
    assert "<td>ping</td><td>20.00</td>" in page


def test_another_kinds_row_is_refused_by_name(records):
    record = json.loads(records[0].read_text())
    record["kind"] = "step"
    lines = validate.check_text(json.dumps(record))[1]
    assert lines == ["$: rows[0] is a echo row in a 'step' run"], lines
