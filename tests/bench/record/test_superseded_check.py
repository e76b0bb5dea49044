"""`dew validate` of results/superseded.json: a record leaves its kind's noise only for a
cause a code change removed, named with that commit. Each bad entry is one line naming it
and what to do (exit 1, an invalid file); validate accepted missing or absolute paths,
empty reasons and records of another kind before."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dew.commands.main import main as dew

REPO = Path(__file__).resolve().parents[3]
TPU_RECORD = REPO / "results/runs/20261206T161309Z-small-aa1-tpu-v5e-04f0382/step.json"
CPU_RECORD = REPO / "results/runs/20261203T085226Z-cpu-smoke-aa1-cpu-8c7e84d/step.json"
TPU = "TPU v5 lite"


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A repository with a record made at `before`, the fix at `fix`, a commit `after`."""
    root = tmp_path / "repo"
    (root / "results" / "runs" / "tpu").mkdir(parents=True)
    git(root, "init", "-q")
    commits = {}
    for name in ("before", "fix", "after"):
        git(root, "commit", "-q", "--allow-empty", "-m", name)
        commits[name] = git(root, "rev-parse", "HEAD")
    shutil.copyfile(CPU_RECORD, root / "results" / "runs" / "cpu.json")
    (root / "results" / "runs" / "bad.json").write_text('{"kind": "step", "rows": []}')
    return root, commits


def listing(root: Path, commits: dict, made_at: str = "before", why: str = "the cause",
            removed_by: str | None = None, records: dict | None = None) -> Path:  # fmt: skip
    record = json.loads(TPU_RECORD.read_text())
    record["environment"]["code"]["commit"] = commits.get(made_at, made_at)
    (root / "results" / "runs" / "tpu" / "step.json").write_text(json.dumps(record))
    reason = {"why": why, "removed_by": removed_by or commits["fix"][:7], "device_kind": TPU}
    table = {"reasons": {"gc": reason},
             "records": records or {"results/runs/tpu/step.json": "gc"}}  # fmt: skip
    path = root / "results" / "superseded.json"
    path.write_text(json.dumps(table))
    return path


def refused(capsys, path: Path) -> str:
    assert dew(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"{path}: $"), err
    return err


def test_an_entry_made_before_the_fix_is_valid(repo, capsys):
    root, commits = repo
    path = listing(root, commits)
    assert dew(["validate", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (superseded records)\n"


def test_the_committed_file_names_its_reason_with_the_commit_that_removed_it(capsys):
    path = REPO / "results" / "superseded.json"
    table = json.loads(path.read_text())
    assert table["reasons"]["collector-not-frozen"]["removed_by"] == "4a3ac6a"
    assert table["reasons"]["collector-not-frozen"]["device_kind"] == TPU
    assert dew(["validate", str(path)]) == 0


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("/abs/step.json", "an absolute path: name the record by its path from the repository"),
        ("results/../outside.json", "outside results/: only a record under results/"),
        ("results/runs/none.json", "no such file under"),
        ("results/runs/bad.json", "not a valid record ("),
        ("results/runs/cpu.json", "a record of cpu, and its reason 'gc' is of TPU v5 lite"),
    ],
)
def test_an_entry_that_names_no_record_of_its_reasons_kind_is_refused(
    repo, capsys, entry, expected
):
    root, commits = repo
    path = listing(root, commits, records={entry: "gc"})
    err = refused(capsys, path)
    assert f"$.records[{entry!r}]: {expected}" in err, err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"why": "  "}, "$.reasons.gc.why: the why is empty: say what the cause was"),
        ({"removed_by": "HEAD~1"}, "$.reasons.gc.removed_by: not a commit: name the commit"),
        ({"records": {"results/runs/tpu/step.json": "gone"}},
         "names the reason 'gone', which reasons does not give (given: gc): add it"),
        ({"removed_by": "deadbee"}, "$.reasons['gc'].removed_by: deadbee is not a commit of "
         "this repository"),
        ({"made_at": "fix"}, "made at {fix}, not before {fix7} (the commit that removed the "
         "cause of 'gc'): a record made since keeps its place in the history; remove the entry"),
        ({"made_at": "after"}, "made at {after}, not before {fix7}"),
    ],
)  # fmt: skip
def test_a_reason_without_a_cause_a_commit_removed_is_refused(repo, capsys, change, expected):
    root, commits = repo
    path = listing(root, commits, **change)
    err = refused(capsys, path)
    short = {name: commit[:7] for name, commit in commits.items()}
    assert expected.format(**short, fix7=short["fix"]) in err, err


def test_the_commits_are_checked_only_where_git_can_tell(repo, tmp_path, capsys):
    """No repository (a copy of results/ elsewhere), or a record's commit this clone does
    not hold: those checks are skipped, never failed."""
    root = tmp_path / "plain"
    (root / "results" / "runs" / "tpu").mkdir(parents=True)
    path = listing(root, {"fix": "deadbeef"}, made_at="0123456")
    assert dew(["validate", str(path)]) == 0, capsys.readouterr().err
    root, commits = repo
    path = listing(root, commits, made_at="0123456")
    assert dew(["validate", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_the_old_form_of_a_reason_is_refused_with_the_new_one(repo, capsys):
    root, commits = repo
    path = root / "results" / "superseded.json"
    path.write_text(json.dumps({"reasons": {"gc": "timed before"}, "records": {}}))
    err = refused(capsys, path)
    assert 'reason \'gc\' is a bare text: give it as {"why": ..., "removed_by"' in err
