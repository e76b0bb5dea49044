"""dew.bench.analysis.ab: the rounds of `nox -s ab` paired into one record per side, the table of
the
per-round ratios with their intervals and verdicts, and the chart."""

import json
from pathlib import Path

import pytest

from dew.bench.analysis import ab
from dew.bench.record.schema import read_run

ENVIRONMENT = dict.fromkeys(
    ("host", "devices", "driver_version", "cuda_version", "cudnn_version", "container",
     "python", "packages", "env_flags", "jax_config"),
)  # fmt: skip


def _record(figures: dict[str, float | None], commit: str) -> dict:
    """A step record of one round: one row per architecture (None: the case failed)."""
    rows = []
    for name, ms in figures.items():
        if ms is None:
            rows.append({"architecture": name, "batch": 8, "status": "failed", "error": "OOM"})
        else:
            samples = [ms * (1 + 0.01 * (i % 3 - 1)) for i in range(10)]
            rows.append({
                "architecture": name, "batch": 8, "ms_per_step": ms, "p10_ms": ms * 0.99,
                "p50_ms": ms, "p90_ms": ms * 1.01, "status": "ok",
                "repeats": [{"ms_per_step": ms, "synced_ms": samples}],
            })  # fmt: skip
    return {
        "schema_version": 2, "kind": "step", "created": "2026-12-02T10:00:00Z",
        "command": "python tools/benchmark_step.py --preset cpu-smoke",
        "settings": {"preset": "cpu-smoke", "steps": 10, "warmup": 2,
                     "cases": [{"architecture": name, "batch": 8} for name in figures]},
        "environment": {**ENVIRONMENT, "code": {"commit": commit, "dirty": False}},
        "idle_check": None, "rows": rows,
    }  # fmt: skip


def make_run(tmp_path: Path, a: dict[str, list], b: dict[str, list], exits=None) -> Path:
    """An A/B run directory as docker/ab.run_rounds leaves it: a and b give each
    architecture's ms/step per round (one process per architecture, side and round)."""
    run_dir = tmp_path / "run"
    (run_dir / "rounds").mkdir(parents=True)
    rounds = len(next(iter(a.values())))
    order = []
    for r in range(rounds):
        for u, name in enumerate(a):
            for side, figures in (("A", a), ("B", b)) if (r + u) % 2 == 0 else (("B", b), ("A", a)):
                stem = f"{side}-r{r + 1:02d}-c{u + 1:02d}.json"
                record = _record({name: figures[name][r]}, side.lower() * 40)
                (run_dir / "rounds" / stem).write_text(json.dumps(record))
                exit_code = (exits or {}).get(stem, 0)
                order.append({"round": r + 1, "unit": u + 1, "side": side, "record": stem,
                              "exit": exit_code})  # fmt: skip
    sides = {
        side: {"given": given, "kind": "commit", "commit": side.lower() * 40, "image": f"i-{side}"}
        for side, given in (("A", "HEAD~3"), ("B", "HEAD"))
    }
    plan = {"sides": sides, "rounds": rounds, "units": list(a), "band": 5.0, "alpha": 0.05,
            "order": order}  # fmt: skip
    (run_dir / ab.PLAN).write_text(json.dumps(plan))
    return run_dir


def noisy(base: float, rounds: int, scale: float = 1.0) -> list[float]:
    """Round figures around `base` with a little spread (a slow round now and then)."""
    wiggle = [0.0, 0.012, -0.008, 0.02, -0.015, 0.005, -0.003, 0.01, -0.011, 0.004]
    return [base * scale * (1 + wiggle[i % len(wiggle)]) for i in range(rounds)]


def test_the_same_stack_against_itself_has_no_faster_or_slower_row(tmp_path, capsys):
    a = {"simple_dit": noisy(30, 5), "uvit": noisy(40, 5)}
    b = {"simple_dit": noisy(30, 5)[::-1], "uvit": noisy(40, 5)[1:] + noisy(40, 5)[:1]}
    run_dir = make_run(tmp_path, a, b)
    assert ab.main([str(run_dir)]) == 0
    table = capsys.readouterr().out
    assert "| simple_dit |" in table and "| uvit |" in table
    assert "faster" not in table.split("Notes:")[0].split("| verdict |")[1]
    assert "slower" not in table.split("Notes:")[0].split("| verdict |")[1]
    for name in ("a.json", "b.json", "ab.md", "ab.png"):
        assert (run_dir / name).stat().st_size > 0
    side = read_run(run_dir / "a.json")
    assert side.settings.repeats == 5 and len(side.rows) == 2
    row = {r.architecture: r for r in side.rows}["simple_dit"]
    assert len(row.repeats) == 5 and row.ms_per_step == pytest.approx(30, rel=0.02)
    assert row.ms_per_step_ci95 is not None
    assert "A/B side A (HEAD~3)" in side.note


def test_b_faster_in_every_one_of_eight_rounds_is_faster_and_exit_1(tmp_path, capsys):
    a = {"simple_dit": noisy(30, 8)}
    b = {"simple_dit": noisy(30, 8, scale=0.8)}
    run_dir = make_run(tmp_path, a, b)
    assert ab.main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "| faster |" in out
    assert "0.800 (-20.0%)" in out
    assert "B against A: 1 cases: 1 faster" in out


def test_five_rounds_cannot_reach_alpha_and_say_how_many_can(tmp_path, capsys):
    # The exact signed-rank test's smallest two-sided p with 5 pairs is 2/32 = 0.0625.
    run_dir = make_run(tmp_path, {"uvit": noisy(40, 5)}, {"uvit": noisy(40, 5, scale=0.7)})
    assert ab.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "| undecided |" in out
    assert "smallest p after Holm is 0.0625" in out and "6 rounds can" in out


def test_a_failed_round_fails_the_side_row_and_exits_1(tmp_path, capsys):
    a = {"simple_dit": noisy(30, 4)}
    b = {"simple_dit": [30.0, None, 30.5, 29.8]}
    run_dir = make_run(tmp_path, a, b)
    assert ab.main([str(run_dir)]) == 1
    row = read_run(run_dir / "b.json").rows[0]
    assert row.status == "failed" and row.error.startswith("1 of 4 rounds: OOM")
    assert "| 3 |" in capsys.readouterr().out  # three rounds paired


def test_existing_outputs_are_refused_in_one_line_and_left_unchanged(tmp_path, capsys):
    run_dir = make_run(tmp_path, {"uvit": noisy(40, 3)}, {"uvit": noisy(40, 3)})
    (run_dir / "ab.md").write_text("keep me\n")
    assert ab.main([str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dew.bench.analysis.ab: error: RUN_DIR/ab.md")
    assert "--overwrite" in err[0]
    assert (run_dir / "ab.md").read_text() == "keep me\n"
    assert not (run_dir / "a.json").exists()
    assert ab.main([str(run_dir), "--overwrite"]) == 0


@pytest.mark.parametrize(
    ("plan", "expected"),
    [(None, "is not a directory"), ("", "ab-plan.json"), ("[1]", "is not an A/B plan")],
)
def test_bad_run_directories_are_one_line_exit_2(tmp_path, capsys, plan, expected):
    run_dir = tmp_path / "nothing"
    if plan is not None:
        run_dir.mkdir()
    if plan:
        (run_dir / ab.PLAN).write_text(plan)
    assert ab.main([str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]


def test_band_out_of_range_is_refused(tmp_path, capsys):
    run_dir = make_run(tmp_path, {"uvit": noisy(40, 3)}, {"uvit": noisy(40, 3)})
    assert ab.main([str(run_dir), "--band", "0"]) == 2
    assert "--band 0 is not a percentage" in capsys.readouterr().err
