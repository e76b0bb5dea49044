"""The one console command, `dew`, as `python -m dew.commands` (what `[project.scripts]` installs
as the script `dew`): its help, each subcommand's own help, the commands handing their
arguments and exit codes through, and a wrong command as one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dew.commands.main import COMMANDS

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"


def run(*argv: str) -> subprocess.CompletedProcess:
    """argv through `python -m` in a fresh process, this checkout's src/ first."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, env=env, cwd=REPO
    )


def test_the_console_script_is_the_dispatch():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"dew": "dew.commands.main:main"}


def test_help_lists_every_subcommand_with_one_line():
    done = run("dew.commands", "--help")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
    assert set(COMMANDS) == {
        "step", "data", "compare", "validate", "report", "reproduce", "ab", "schema"
    }  # fmt: skip


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_has_its_own_help(name):
    done = run("dew.commands", name, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout.lower()


@pytest.mark.parametrize("name", ["step", "data"])
def test_step_and_data_help_are_the_tools_own_under_their_dew_name(name):
    done = run("dew.commands", name, "--help")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    tool = subprocess.run(
        [sys.executable, f"tools/benchmark_{name}.py", "--help"],
        capture_output=True, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == tool.returncode == 0
    assert done.stdout.startswith(f"usage: dew {name} ")
    assert tool.stdout.startswith(f"usage: tools/benchmark_{name}.py ")
    # The same flags and text, only the program's name differs.
    assert done.stdout.replace(f"dew {name}", "PROG") == tool.stdout.replace(
        f"tools/benchmark_{name}.py", "PROG"
    )
    assert "--json-out" in done.stdout


def test_validate_a_committed_record():
    done = run("dew.commands", "validate", str(RECORD))
    assert done.returncode == 0, done.stderr
    assert RECORD.name in done.stdout


def test_compare_gives_compares_own_exit_code_and_output():
    through_dew = run("dew.commands", "compare", str(RECORD), str(RECORD), "--format", "json")
    direct = run("dew.bench.analysis.compare_command", str(RECORD), str(RECORD), "--format", "json")
    assert through_dew.returncode == direct.returncode, through_dew.stderr
    assert through_dew.stdout == direct.stdout


def test_a_wrong_command_is_one_line_and_exit_2():
    done = run("dew.commands", "bench")
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dew: error: unknown command 'bench'")
    assert "step" in line and "schema" in line


def test_no_command_prints_the_help_and_exit_2():
    done = run("dew.commands")
    assert done.returncode == 2
    assert "commands:" in done.stderr


def test_the_nox_commands_hand_paths_from_here(tmp_path, monkeypatch):
    """nox runs a session from the noxfile's directory: a record, folder or PATH@REV named
    from the caller's directory is made absolute; a commit, a flag or a number is not."""
    from dew.commands.through_nox import from_here

    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "pkg").mkdir()
    monkeypatch.chdir(tmp_path)
    assert from_here("run.json") == str(tmp_path / "run.json")
    assert from_here("pkg@HEAD~1") == f"{tmp_path / 'pkg'}@HEAD~1"
    assert [from_here(arg) for arg in ("HEAD", "--rounds", "7")] == ["HEAD", "--rounds", "7"]
