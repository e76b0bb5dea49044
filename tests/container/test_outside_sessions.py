"""`nox -s ab` and `nox -s reproduce` on code from outside dew, end to end with podman: the
example package (examples/dew-example) committed at 0.1.0 and 0.2.0 in a git repository
of the test's own; ab times last commit's package against this one's, both on dew's stack
at HEAD, its architecture and its own step in fresh processes; reproduce reruns side A's
record with the package rebuilt at the record's commit, and refuses it, in one line, when
no source of the package is given. Nothing is replaced: the images, pip, the tool, the A/B
table and compare are the real ones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from container_support import (
    ROOT,
    example_checkout,
    git,
    nox_command,
    reused_venv,
    unavailable,
)

from dew.host import engine as containers

EXAMPLE = ROOT / "examples" / "dew-example"
STEP = "dew_example.steps:make_step"

pytestmark = [pytest.mark.slow, pytest.mark.container]  # builds dew's stack at HEAD


def session(name: str, posargs: list[str], tmp: Path, timeout: int = 1800):
    """`nox -s NAME -- POSARGS` with this test's venv (locks/dev.txt, as the session's
    would be) reused as the session's: `-R` installs nothing."""
    argv = [*nox_command(), "-f", str(ROOT / "noxfile.py"), "-s", name,
            *reused_venv(name, tmp / "envdir"), "--", *posargs]  # fmt: skip
    env = dict(os.environ, DEW_ENGINE="podman")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def made_since(started: float, pattern: str) -> list[Path]:
    return [d for d in (ROOT / "results" / "runs").glob(pattern) if d.stat().st_mtime >= started]


def test_ab_and_reproduce_take_a_package_from_outside_dew(tmp_path):
    if sys.prefix == sys.base_prefix:
        pytest.skip("the sessions' record readers need a venv from locks/dev.txt (nox -s tests)")
    try:
        containers.choose({"DEW_ENGINE": "podman"})
    except containers.EngineError:
        unavailable("podman does not answer here")
    if git(ROOT, "status", "--porcelain", "--untracked-files=no", "--", "src", "tools"):
        pytest.skip("dew's stack at HEAD would not hold the uncommitted src/ or tools/ here")
    repo = tmp_path / "models"
    first, second = example_checkout(repo, repo)

    started = time.time()
    kept = []
    try:
        posargs = ["HEAD", "HEAD", "--a-outside", f"{repo}@HEAD~1", "--b-outside", str(repo),
                   "--architectures", "tiny_mixer", "--step", STEP,
                   "--rounds", "2", "--steps", "3", "--warmup", "1"]  # fmt: skip
        ab = session("ab", posargs, tmp_path)
        kept += made_since(started, "*-ab-cpu-smoke-cpu-*")
        assert ab.returncode == 0, ab.stderr[-4000:]
        [run_dir] = kept
        table = (run_dir / "ab.md").read_text()
        assert f"from outside dew: dew-example 0.1.0 @ {first[:7]}" in table
        assert f"from outside dew: dew-example 0.2.0 @ {second[:7]}" in table
        assert "| tiny_mixer |" in table and f"| {STEP} |" in table
        for side, version, commit in (("a", "0.1.0", first), ("b", "0.2.0", second)):
            record = json.loads((run_dir / f"{side}.json").read_text())
            code = record["environment"]["outside_code"]
            assert {item["module"] for item in code} == {"dew_example.models", "dew_example.steps"}
            assert {(item["version"], item["commit"], item["source"]) for item in code} == {
                (version, commit, "direct_url")
            }
            assert record["environment"]["packages"]["dew-example"] == version
            assert [row["status"] for row in record["rows"]] == ["ok", "ok"]
            assert all(len(row["repeats"]) == 2 for row in record["rows"])  # one a round
        plan = json.loads((run_dir / "ab-plan.json").read_text())
        assert all(run["exit"] == 0 for run in plan["order"])
        assert len(plan["order"]) == 8  # 2 rounds x 2 cases x 2 sides

        # The record of side A again, its package rebuilt from the checkout at its commit.
        started = time.time()
        again = session("reproduce", [str(run_dir / "a.json"), "--outside", str(repo)], tmp_path)
        reruns = made_since(started, "*-reproduce-cpu-smoke-cpu-*")
        kept += reruns
        assert again.returncode in (0, 1), again.stderr[-4000:]  # 1: compare found a change
        [rerun] = reruns
        record = json.loads((rerun / "step.json").read_text())
        code = record["environment"]["outside_code"]
        assert {(item["version"], item["commit"]) for item in code} == {("0.1.0", first)}
        assert [row["status"] for row in record["rows"]] == ["ok", "ok"]
        not_matched = rerun / "not-matched.txt"
        assert "package" not in (not_matched.read_text() if not_matched.exists() else "")
        assert (rerun / "compare.md").is_file()

        # Without a source of the package its rows could not run: one line, exit 2, no run.
        started = time.time()
        refused = session("reproduce", [str(run_dir / "a.json")], tmp_path, timeout=600)
        kept += made_since(started, "*-reproduce-*")
        assert refused.returncode == 2, refused.stderr[-2000:]
        errors = [
            line
            for line in refused.stderr.splitlines()
            if line.startswith("nox -s reproduce: error:")
        ]
        assert errors == [
            "nox -s reproduce: error: record a.json used dew-example 0.1.0 "
            f"{first[:7]} from outside dew, "
            "which dew's image lacks: give it with --outside PATH[@REV] (its git checkout or "
            "folder) or --outside WHEEL"
        ]
        assert "Traceback" not in refused.stderr
        assert not made_since(started, "*-reproduce-*")
    finally:
        # Runs of a test's package do not stay among the checkout's runs.
        for index, path in enumerate(kept):
            if path.exists():
                shutil.move(path, tmp_path / f"run-{index}")
