"""dew.bench.analysis.ab: the rounds of `nox -s ab` paired into one record per side, the table of
the per-round ratios with their intervals and verdicts, and the chart."""

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


def shifted(base: float, rounds: int, scale: float = 1.0, by: int = 1) -> list[float]:
    """`noisy` with its rounds rotated: the same spread, paired with other rounds' wiggle."""
    figures = noisy(base, rounds, scale)
    return figures[by:] + figures[:by]


def case_table(out: str) -> dict[str, dict[str, str]]:
    """The first table of ab's output: each case's cells by column name."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| case |"))
    headers = [cell.strip() for cell in lines[start].strip("|").split("|")]
    table = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):  # the table ends at its first other line
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0]] = dict(zip(headers, cells, strict=True))
    return table


def test_the_same_stack_against_itself_has_no_faster_or_slower_row(tmp_path, capsys):
    a = {"simple_dit": noisy(30, 5), "uvit": noisy(40, 5)}
    b = {"simple_dit": noisy(30, 5)[::-1], "uvit": shifted(40, 5)}
    run_dir = make_run(tmp_path, a, b)
    assert ab.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    table = case_table(out)
    assert set(table) == {"simple_dit", "uvit"}
    assert {row["verdict"] for row in table.values()} <= {"same", "undecided"}
    assert "B against A: 2 cases: 0 faster, 0 slower" in out
    for row in table.values():  # the paired spread is small: what it could detect is too
        assert row["pairs"] == "5" and float(row["MDE"].rstrip("%")) < 10
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
    row = case_table(out)["simple_dit"]
    assert row["verdict"] == "faster" and row["B/A"] == "0.800 (-20.0%)"
    assert "B against A: 1 cases: 1 faster" in out


def test_seven_rounds_of_a_clear_change_decide_every_case_of_a_preset_after_holm(tmp_path, capsys):
    # 17 cases, B 10% slower in each, 7 rounds. The signed-rank test's smallest p at 7 pairs
    # is 2/128 = 0.0156: Holm over 17 cases takes it to 0.27 and nothing would be decided.
    # The t on the logs of the per-round ratios decides every case.
    names = [f"arch{index:02d}" for index in range(17)]
    a = {name: noisy(20 + index, 7) for index, name in enumerate(names)}
    b = {name: shifted(20 + index, 7, 1.10, by=1 + index % 3) for index, name in enumerate(names)}
    run_dir = make_run(tmp_path, a, b)
    assert ab.main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    table = case_table(out)
    assert list(table) == names
    for row in table.values():
        assert row["verdict"] == "slower" and row["pairs"] == "7"
        assert float(row["p (Holm)"]) < 0.05
        low, high = (float(x) for x in row["95% interval"].split("-"))
        assert 1.05 < low < 1.10 < high
        assert float(row["MDE"].rstrip("%")) < 10  # 10% was detectable, and was detected
    assert "B against A: 17 cases: 0 faster, 17 slower, 0 same, 0 undecided" in out
    assert "smallest p" not in out  # no signed-rank note any more


def test_one_paired_round_is_no_verdict(tmp_path, capsys):
    run_dir = make_run(tmp_path, {"uvit": [40.0]}, {"uvit": [30.0]})
    assert ab.main([str(run_dir)]) == 3  # INCONCLUSIVE
    out = capsys.readouterr().out
    assert case_table(out)["uvit"]["verdict"] == "undecided"
    assert "- uvit: 1 paired round: a verdict needs 2 or more" in out


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


def test_a_side_of_code_from_outside_dew_names_it_and_every_module_its_cases_used(tmp_path, capsys):
    """Each case ran in its own process, so each round's record names only its own module;
    the side's record names all of them, and the table each side's packages."""
    a = {"my_mixer": noisy(30, 3), "pkg.steps:make": noisy(2, 3)}
    run_dir = make_run(tmp_path, a, {name: noisy(base[0], 3) for name, base in a.items()})
    modules = {"c01": ("pkg.models", "my_mixer"), "c02": ("pkg.steps", "pkg.steps:make")}
    for path in (run_dir / "rounds").glob("*.json"):
        record = json.loads(path.read_text())
        module, used_by = modules[path.stem.rsplit("-", 1)[1]]
        version = "0.1.0" if path.name.startswith("A") else "0.2.0"
        record["environment"]["outside_code"] = [{
            "distribution": "pkg", "version": version, "module": module, "used_by": [used_by],
            "commit": "c" * 40, "dirty": None, "source": "direct_url",
        }]  # fmt: skip
        path.write_text(json.dumps(record))
    plan = json.loads((run_dir / ab.PLAN).read_text())
    for side, version in (("A", "0.1.0"), ("B", "0.2.0")):
        plan["sides"][side]["outside"] = [
            {"given": "../pkg", "distribution": "pkg", "version": version, "commit": "c" * 40}
        ]
    (run_dir / ab.PLAN).write_text(json.dumps(plan))
    assert ab.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "from outside dew: pkg 0.1.0 @ ccccccc" in out
    assert "from outside dew: pkg 0.2.0 @ ccccccc" in out
    for side, version in (("a", "0.1.0"), ("b", "0.2.0")):
        code = read_run(run_dir / f"{side}.json").environment.outside_code
        assert sorted(item.module for item in code) == ["pkg.models", "pkg.steps"]
        assert {item.version for item in code} == {version}


def test_a_side_that_does_other_work_is_said_to_and_keeps_its_verdict(tmp_path, capsys):
    """B's model changed (twice the GFLOP/step): its rows are slower, and the table says the
    ratio times another step, where compare would call the rows not comparable."""
    run_dir = make_run(tmp_path, {"my_mixer": noisy(30, 7)}, {"my_mixer": noisy(50, 7)})
    for path in (run_dir / "rounds").glob("*.json"):
        record = json.loads(path.read_text())
        for row in record["rows"]:
            row["gflop_per_step"] = 0.0405 if path.name.startswith("B") else 0.0203
            row["params"] = 247_888
        path.write_text(json.dumps(record))
    assert ab.main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert case_table(out)["my_mixer"]["verdict"] == "slower"
    assert case_table(out)["my_mixer"]["compiled"] == "—"  # no fingerprints in these records
    assert (
        "- my_mixer: B does other work than A (GFLOP/step differs (0.0405 vs 0.0203)): the "
        "ratio is the time of another step, not the same step's speed"
    ) in out
