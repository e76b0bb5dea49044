"""dew's own kinds through KINDS: what compare reads of each, and the registry's refusals."""

from __future__ import annotations

import pytest

from dew.bench.analysis import comparison
from dew.bench.analysis.kinds import KINDS, Kind, register
from dew.bench.analysis.levels.noise import NoiseModel, prior
from dew.bench.record.schema import DataRow, StepRow

NOISE = NoiseModel(prior("cpu", None), {}, "test")


def step_row(**fields) -> StepRow:
    return StepRow(**{"architecture": "unet", "batch": 8, "status": "ok", **fields})


def test_dews_kinds_are_registered_by_their_records_names():
    assert KINDS["step"].row_model is StepRow and KINDS["data"].row_model is DataRow
    assert KINDS["step"].charted and KINDS["data"].feeds_steps
    assert KINDS["data"].timing in KINDS["data"].rates  # samples/s: higher is faster
    with pytest.raises(KeyError, match="no benchmark kind 'train'"):
        KINDS["train"]


def test_a_step_row_without_ms_per_step_is_judged_on_p50():
    row = comparison.compare_rows(
        step_row(p50_ms=11.0), step_row(p50_ms=10.0, ms_per_step=9.0), KINDS["step"], None,
        NOISE,
    )  # fmt: skip
    assert "judged on p50 ms (no ms/step on one side)" in row.notes
    assert row.change == pytest.approx(0.1)


def test_a_step_row_pairs_with_the_reference_row_whose_settings_it_extends():
    run = step_row(case={"condition_in_state": True})
    found, note = KINDS["step"].partner(run, [step_row(), step_row(batch=16)])
    assert found == step_row()
    assert note == "matched to unet, which does not record condition_in_state=True"


def test_a_kind_whose_identity_is_anothers_is_refused():
    class Clash(Kind):
        name, row_model, timings, ratio_fields = "clash", StepRow, ("ms_per_step",), ()

    with pytest.raises(ValueError, match="'architecture' is another kind's identity"):
        register(Clash())
    assert "clash" not in KINDS
