"""Issue 60: `dew reproduce` of a TPU record and `dew ab --variant tpu-host` on a TPU host,
with the chip faked at its boundary only (tests/infra/fake_tpu: the device identity a
process that opens the backend reads says TPU v5 lite with libtpu 0.0.42.1, in every
process); the cases run on this CPU. Everything else is dew's
own: the host's stack held against the record's, the rerun by `dew step`, compare's
verdict, ab's paired rounds and their judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHIP = REPO / "tests" / "infra" / "fake_tpu"  # its sitecustomize fakes the identity
LIBTPU = "0.0.42.1"  # what it says
CASES = ["--preset", "cpu-smoke", "--architectures", "simple_dit", "--steps", "3",
         "--warmup", "1"]  # fmt: skip


def dew(*argv: str, chip: Path | None, cwd: Path) -> subprocess.CompletedProcess:
    path = [str(chip)] if chip else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO / "src")]),
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "dew.commands", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=900)  # fmt: skip


@pytest.fixture(scope="module")
def chip() -> Path:
    return CHIP


@pytest.fixture(scope="module")
def record(chip, tmp_path_factory) -> Path:
    """A TPU record made here, by this dew, on the faked chip."""
    folder = tmp_path_factory.mktemp("record")
    # No idle check (its 3 s window): the record's figures are not what the tests judge.
    done = dew("step", *CASES, "--idle-check", "off", "--json-out", str(folder / "step.json"),
               chip=chip, cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "step.json"


def changed(record: Path, into: Path, change) -> Path:
    data = json.loads(record.read_text())
    change(data["environment"])
    into.write_text(json.dumps(data))
    return into


def one_line(done: subprocess.CompletedProcess, prog: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"dew {prog}: error: "), done.stderr
    return lines[0]


def test_the_same_stack_reruns_the_records_cases_and_compares(chip, record, tmp_path):
    data = json.loads(record.read_text())
    assert data["environment"]["devices"]["kind"] == "TPU v5 lite"
    assert data["environment"]["backend"]["libtpu"] == LIBTPU
    run = tmp_path / "run"
    done = dew("reproduce", str(record), "--out", str(run), chip=chip, cwd=tmp_path)
    verdict = json.loads((run / "compare.json").read_text())
    assert done.returncode == verdict["exit"] in (0, 1, 3), done.stderr[-2000:]
    assert verdict["outcome"] in done.stdout  # compare's table, its verdict
    rerun = json.loads((run / "step.json").read_text())
    assert [row["architecture"] for row in rerun["rows"]] == ["simple_dit"]
    assert rerun["settings"]["cases"] == data["settings"]["cases"]
    assert rerun["environment"]["devices"]["kind"] == "TPU v5 lite"
    assert not rerun.get("note") and not (run / "not-matched.txt").exists()
    assert (run / "reference.json").read_text() == record.read_text()


def test_a_differing_jax_or_libtpu_is_refused_in_one_line_naming_it(chip, record, tmp_path):
    def old_jax(env):
        env["packages"]["jax"] = "0.10.2"

    def old_libtpu(env):
        env["backend"]["libtpu"] = "0.0.46.3"

    jax = changed(record, tmp_path / "jax.json", old_jax)
    line = one_line(dew("reproduce", str(jax), "--out", str(tmp_path / "a"), chip=chip,
                        cwd=tmp_path), "reproduce")  # fmt: skip
    here = json.loads(record.read_text())["environment"]["packages"]["jax"]
    assert f"jax {here} here, 0.10.2 in the record" in line and "libtpu" not in line.split(
        "not here:")[1].split(":")[0]  # fmt: skip
    assert "--accept-stack-difference" in line and "--dew DIR" in line
    libtpu = changed(record, tmp_path / "libtpu.json", old_libtpu)
    line = one_line(dew("reproduce", str(libtpu), "--out", str(tmp_path / "b"), chip=chip,
                        cwd=tmp_path), "reproduce")  # fmt: skip
    assert f"libtpu {LIBTPU} here, 0.0.46.3 in the record" in line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing rerun


def test_a_host_without_a_tpu_is_refused_in_one_line(record, tmp_path):
    line = one_line(dew("reproduce", str(record), "--out", str(tmp_path / "run"), chip=None,
                        cwd=tmp_path), "reproduce")  # fmt: skip
    assert "this host has no TPU (the device probe found cpu)" in line
    assert f"`dew reproduce {record}` there" in line
    assert not (tmp_path / "run").exists()


def test_a_difference_accepted_by_the_flag_is_written_into_the_new_record(chip, record, tmp_path):
    libtpu = changed(record, tmp_path / "libtpu.json",
                     lambda env: env["backend"].update(libtpu="0.0.46.3"))  # fmt: skip
    run = tmp_path / "run"
    done = dew("reproduce", str(libtpu), "--accept-stack-difference", "--out", str(run),
               chip=chip, cwd=tmp_path)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    note = json.loads((run / "step.json").read_text())["note"]
    assert "--accept-stack-difference" in note
    assert f"libtpu {LIBTPU} here, 0.0.46.3 in the record" in note
    assert "| libtpu | 0.0.42.1 | 0.0.46.3 |" in (run / "compare.md").read_text()


@pytest.mark.slow
def test_ab_of_two_settings_runs_paired_rounds_to_a_verdict(chip, tmp_path):
    run = tmp_path / "ab"
    # A cache of the test's own: round 1 compiles each side's program, round 2 loads it.
    argv = ["ab", "HEAD", "HEAD", "--variant", "tpu-host", *CASES, "--rounds", "2",
            "--a-dtype", "bfloat16", "--b-dtype", "float32", "--compilation-cache-dir",
            str(tmp_path / "cache"), "--out", str(run)]  # fmt: skip
    done = dew(*argv, chip=chip, cwd=tmp_path)
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    plan = json.loads((run / "ab-plan.json").read_text())
    assert [(e["round"], e["side"], e["exit"]) for e in plan["order"]] == [
        (1, "A", 0), (1, "B", 0), (2, "B", 0), (2, "A", 0)]  # fmt: skip
    assert plan["side_tool"] == {"A": ["--dtype", "bfloat16"], "B": ["--dtype", "float32"]}
    dtypes = {side: json.loads((run / f"{side.lower()}.json").read_text())["settings"]["dtype"]
              for side in "AB"}  # fmt: skip
    assert dtypes == {"A": "bfloat16", "B": "float32"}
    table = (run / "ab.md").read_text()
    assert "| simple_dit |" in table and ("REPRODUCED" in table or "INCONCLUSIVE" in table)
    # one stack against itself: the header says what sets the sides apart
    assert "(this one)`; --dtype bfloat16" in table and "(this one)`; --dtype float32" in table
    again = dew(*argv, chip=chip, cwd=tmp_path)  # every run kept: nothing runs again
    assert again.returncode == done.returncode
    assert "round 1/2" not in again.stderr
    assert json.loads((run / "ab-plan.json").read_text())["order"] == plan["order"]
