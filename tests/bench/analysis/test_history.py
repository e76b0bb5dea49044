"""dew.bench.analysis.levels.history: the levels fitted from records of known truth, what counts
as an A/A record, the weak prior of a kind without history, and the committed cache."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dew import platforms
from dew.bench.analysis.levels import history, history_scope, noise
from dew.bench.common.cli import UsageError


def _record(figures: dict[str, list[float]], *, kind="NVIDIA H200", dirty=False, commit="c1"):
    rows = [{"architecture": name, "status": "ok",
             "repeats": [{"ms_per_step": f, "synced_ms": [f]} for f in values]}
            for name, values in figures.items()]  # fmt: skip
    code = {"commit": commit, "dirty": dirty, "diff_sha256": None}
    env = {"devices": {"platform": "gpu", "kind": kind, "count": 1}, "code": code}
    return {"kind": "step", "environment": env, "settings": {"preset": "small"}, "rows": rows}


def _history(tmp_path, *, records=16, rows=8, repeats=3, process=0.03, run=0.02, shift=0.04,
             seed=0):  # fmt: skip
    rng = np.random.default_rng(seed)
    for r in range(records):
        s = rng.normal(0, shift)
        figures = {f"arch{k}": list(np.exp(1 + k * 0.1 + s + rng.normal(0, run)
                                           + rng.normal(0, process, repeats)))
                   for k in range(rows)}  # fmt: skip
        path = tmp_path / f"run{r}" / "step.json"
        path.parent.mkdir()
        path.write_text(json.dumps(_record(figures)))


def test_the_fit_recovers_the_three_levels_of_known_truth(tmp_path):
    fits = []
    for seed in range(6):
        folder = tmp_path / str(seed)
        folder.mkdir()
        _history(folder, seed=seed)
        fits.append(history.fit(history.read(folder)))
    entries = [f["NVIDIA H200"] for f in fits]
    assert np.median([e["process"] for e in entries]) == pytest.approx(0.03, rel=0.15)
    assert np.median([e["run"] for e in entries]) == pytest.approx(0.02, rel=0.35)
    assert np.median([e["shift"] for e in entries]) == pytest.approx(0.04, rel=0.35)
    entry = entries[0]
    # A level is a difference of two mean squares: Satterthwaite's degrees of freedom, fewer
    # than those of the mean square it came from (15: the records less one; 105 residuals).
    assert entry["records"] == 16 and 2 <= entry["shift_df"] < 15
    assert entry["process_df"] == 16 * 8 * 2 and 2 <= entry["run_df"] < 16 * 8 - 16 - 8 + 1
    assert set(entry["rows"]) == {f"arch{k}" for k in range(8)}


def test_a_record_held_inside_another_counts_once_and_a_dirty_tree_without_hash_never(tmp_path):
    whole = _record({"a": [1.0, 1.1], "b": [2.0, 2.1]})
    part = _record({"a": [1.0, 1.1]})  # an A/B round inside its side's record
    other = _record({"a": [1.2, 1.3], "b": [2.2, 2.3]})
    dirty = _record({"a": [9.0, 9.1], "b": [9.2, 9.3]}, dirty=True)
    for name, record in {"whole": whole, "part": part, "other": other, "dirty": dirty}.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "noise.json").write_text(json.dumps({"kinds": {}}))  # not a record: ignored
    assert sorted(p.split("/")[-1] for p, _ in history.read(tmp_path)) == [
        "other.json",
        "whole.json",
    ]


def test_superseded_records_stay_records_but_leave_their_kinds_noise(tmp_path):
    # Two A/A groups of one kind: an old one, noisy (its host-bound rows paid for the
    # collector), and a quiet one made after the change that removed the cause.
    rng = np.random.default_rng(1)
    for name, commit, spread in (("old", "c1", 0.05), ("new", "c2", 0.0005)):
        for r in range(3):
            figures = {f"arch{k}": list(np.exp(k + rng.normal(0, spread, 3))) for k in range(4)}
            (tmp_path / f"{name}{r}.json").write_text(json.dumps(_record(figures, commit=commit)))
    records = history.read(tmp_path)
    old = sorted(path for path, _ in records if "/old" in path)
    listed = tmp_path / "superseded.json"
    reason = {"why": "timed before the change", "removed_by": "4a3ac6a",
              "device_kind": "NVIDIA H200"}  # fmt: skip
    listed.write_text(json.dumps({"reasons": {"gc": reason},
                                  "records": {path: "gc" for path in old}}))  # fmt: skip
    both = history.fit(records)["NVIDIA H200"]
    quiet = history.fit(records, history.superseded(listed))["NVIDIA H200"]
    assert both["records"] == 6 and "superseded" not in both
    assert quiet["records"] == 3 and quiet["superseded"] == old
    assert quiet["process"] < both["process"] / 10
    assert history.superseded(listed) == dict.fromkeys(old, "gc")
    assert history.superseded(tmp_path / "absent.json") == {}  # nothing superseded
    bare = json.dumps({"reasons": {"gc": "timed before"}, "records": {}})  # the old form
    empty = json.dumps({"reasons": {"gc": {**reason, "why": " "}}, "records": {}})
    for broken in ("not json", "[]", '{"reasons": {}}', bare, empty):
        listed.write_text(broken)
        with pytest.raises(UsageError, match="is not a list of superseded records: check it"):
            history.superseded(listed)


def test_a_kind_without_history_gets_its_weak_prior_never_another_kinds_levels():
    table = {
        "cpu": {
            "process": 0.17,
            "process_df": 160,
            "run": 0.0,
            "run_df": 18,
            "shift": 0.13,
            "shift_df": 11,
            "records": 18,
            "groups": [[]],
            "rows": {},
        }
    }
    model = noise.model_for("NVIDIA B200", "gpu", table)
    prior = platforms.get("gpu").noise
    assert (model.pooled.process, model.pooled.run, model.pooled.shift) == prior[:3]
    assert model.pooled.process_df == noise.PRIOR_PSEUDO_DF
    assert "no A/A history" in model.source
    cpu = noise.model_for("cpu", "cpu", table)
    assert cpu.pooled.shift == 0.13 and "18 records" in cpu.source


def test_a_row_level_shrinks_toward_its_kind():
    # simple_udit's 12% run level from 2 df, toward its kind's 2% (100 df)
    shrunk = math.sqrt(float(history.row_run(0.12**2, 2, 0.02**2, 100, 0.0)))
    assert 0.02 < shrunk < 0.06
    assert float(history.row_run(-0.01, 2, 0.02**2, 100, 0.015**2)) == 0.015**2  # the floor


def test_the_committed_cache_is_the_fit_of_the_committed_records():
    cached = history.read_table()
    assert cached is not None, (
        "results/noise.json: python -m dew.bench.analysis.levels.history --write"
    )
    fitted = history_scope.kinds_table(None, cache=False)
    assert fitted.left_out.history == "the committed records under results/"
    assert cached["kinds"] == json.loads(json.dumps(dict(fitted))), (
        "results/noise.json is stale: python -m dew.bench.analysis.levels.history --write"
    )


def test_levels_are_pooled_unclipped_and_read_as_0_only_after(tmp_path):
    """Issue 40: each row's run variance was clipped at 0 before pooling, so noisy
    negative estimates could only push the pool up. A group that reads -x and one that
    reads +x pool to about 0 now; clipping first would keep +x/2."""
    pooled = history.Estimate()
    pooled.add(-0.0004, 10)
    pooled.add(0.0004, 10)
    assert pooled.var == pytest.approx(0.0) and pooled.df == 20
    clipped = history.Estimate()
    clipped.add(max(0.0, -0.0004), 10)
    clipped.add(0.0004, 10)
    assert clipped.var == pytest.approx(0.0002)  # what the old pooling made of the same


def test_a_round_inside_a_side_whose_row_failed_still_counts_once(tmp_path):
    """An A/B side's row fails when one of its rounds died; its other rounds' figures are
    still in it, so the round records are copies, not A/A records of their own."""
    side = _record({"a": [1.0, 1.1, 1.2]})
    side["rows"][0]["status"] = "failed"
    round_ = _record({"a": [1.1]})
    (tmp_path / "side.json").write_text(json.dumps(side))
    (tmp_path / "round.json").write_text(json.dumps(round_))
    assert [p.split("/")[-1] for p, _ in history.read(tmp_path)] == ["side.json"]


def test_rows_100x_apart_in_noise_leave_the_run_level_and_shift_at_the_quiet_rows(tmp_path):
    # an 18-case TPU table: 16 device-bound rows at 0.05% between processes, 2 host-bound at
    # 5%, a run level and a shift of 0.2% each (the chip's committed 04f0382 pair: its noisy
    # rows had filled every row's run level and the shift with their own process noise). The
    # kind's run level is read at its mean process level, each row's scaled to its own
    # (row_levels): the quiet rows' is theirs, the noisy rows' no smaller than the truth.
    fits = []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        folder = tmp_path / str(seed)
        for r in range(4):
            s = rng.normal(0, 0.002)
            figures = {f"arch{k}": list(np.exp(1 + k * 0.1 + s + rng.normal(0, 0.002)
                                               + rng.normal(0, 0.05 if k < 2 else 0.0005, 3)))
                       for k in range(18)}  # fmt: skip
            path = folder / f"run{r}" / "step.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(_record(figures)))
        fits.append(history.fit(history.read(folder))["NVIDIA H200"])
    quiet = [row["run"] for e in fits for label, row in e["rows"].items()
             if label not in ("arch0", "arch1")]  # fmt: skip
    assert np.median(quiet) == pytest.approx(0.002, rel=0.5)
    assert min(e["rows"][label]["run"] for e in fits for label in ("arch0", "arch1")) >= 0.002
    assert np.median([e["shift"] for e in fits]) == pytest.approx(0.002, rel=0.6)
