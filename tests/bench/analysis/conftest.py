"""Fixtures the comparison tests share: the committed A/A records and the noise fitted from
them the way `python -m dew.bench.analysis.levels.history --write` fits results/.

Compare reads results/noise.json (the fit of every record under results/) for the noise it
assumes; a test that pins its verdicts uses `pinned_noise`, so regenerating that file (more
records) does not move them."""

from pathlib import Path

import pytest

from dew.bench.analysis.levels import history
from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
AA = sorted(RUNS.glob("20261202-cpu-smoke-stats-aa*/step.json"))  # six records, one stack


@pytest.fixture(scope="session")
def aa_records():
    assert len(AA) == 6, AA
    return [(str(path.relative_to(REPO)), read_run(path)) for path in AA]


@pytest.fixture(scope="session")
def aa_table():
    return history.fit(history.read_paths(AA))


@pytest.fixture
def pinned_noise(aa_table, monkeypatch):
    """Compare's noise is the one fitted from the six committed A/A records."""
    monkeypatch.setattr(history, "kinds_table", lambda history_dir=None, exclude=(), **_: aa_table)
    return aa_table
