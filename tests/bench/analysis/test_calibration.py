"""The verdicts are calibrated (dew.bench.analysis.calibration): a row's interval covers its
run's centre; no ordered pair of the committed A/A records reads faster or slower (the shift
or a row), the pairs mirror; the -O0 records never read REPRODUCED nor the whole run faster; the
docs' tables are what the command writes. (The simulation's cells: test_judge.py.)"""

from __future__ import annotations

import pytest

from dew.bench.analysis import calibration
from dew.bench.common.files import REPO_ROOT

RUNS = REPO_ROOT / "results" / "runs"
# The -O0 records: the issue's, against its own A/A records (uvit, simple_dit, the decoder),
# and the one made with the new A/A records (simple_udit, hybrid_dit, jepa_encoder).
OPT0 = "results/runs/20261202-cpu-smoke-stats-opt0/step.json"
NEW_OPT0 = "results/runs/20261203T090404Z-cpu-smoke-aa-o0-cpu-8c7e84d/step.json"


@pytest.fixture(scope="module")
def held():
    return calibration.pairs([OPT0, NEW_OPT0])


@pytest.mark.parametrize("repeats", [3, 5])
def test_a_rows_interval_covers_its_runs_centre(repeats):
    assert calibration.row_coverage(0.02, repeats, trials=400) >= 0.92


def test_every_ordered_pair_of_the_committed_aa_records_reads_no_change(held):
    same, _ = held
    assert len(same) >= 30  # every ordered pair of each group, the H200's three among them
    assert [pair for pair in same if pair.changed] == []
    assert {pair.outcome for pair in same} <= {"REPRODUCED", "INCONCLUSIVE"}
    by_pair = {(pair.run, pair.reference): (pair.tally, pair.outcome) for pair in same}
    for (run, ref), result in by_pair.items():  # faster and slower would swap: same tally
        assert by_pair[(ref, run)] == result
    assert any("h200" in pair.run for pair in same)


def test_the_o0_records_never_read_reproduced_nor_the_whole_run_faster(held):
    """A row -O0 slows less than the rest may read faster against the shift (a true
    relative change); the whole run never reads faster, and the pair never REPRODUCED."""
    _, against = held
    assert {pair.run for pair in against} == {OPT0, NEW_OPT0}
    for pair in against:
        assert pair.outcome != "REPRODUCED", pair
        assert not any(c.startswith("the whole run faster") for c in pair.changed), pair


def test_the_docs_table_is_what_the_command_writes_from_the_committed_records(held):
    text = (REPO_ROOT / "docs" / "calibration.md").read_text()
    assert calibration.render_pairs(*held) in text
