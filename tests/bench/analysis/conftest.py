"""Fixtures the comparison tests share: the committed A/A records and a noise table made from
them the way `python -m dew.bench.analysis.noise --write` makes results/noise.json.

Compare reads results/noise.json for the run level it assumes; a test that pins its verdicts
uses `pinned_noise`, so regenerating that file (more A/A records) does not move them."""

from pathlib import Path

import pytest

from dew.bench.analysis import noise
from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
AA = sorted(RUNS.glob("20261202-cpu-smoke-stats-aa*/step.json"))  # six records, one stack


@pytest.fixture(scope="session")
def aa_records():
    assert len(AA) == 6, AA
    return [(str(path.relative_to(REPO)), read_run(path)) for path in AA]


@pytest.fixture(scope="session")
def aa_table(aa_records):
    kinds = noise.estimate(aa_records)
    return {"command": "tests: the six committed A/A records", "kinds": kinds,
            "default": noise.default_of(kinds)}  # fmt: skip


@pytest.fixture
def pinned_noise(aa_table, monkeypatch):
    """Compare's noise table is the one estimated from the six committed A/A records."""
    monkeypatch.setattr(noise, "read_table", lambda path=noise.TABLE: aa_table)
    return aa_table
