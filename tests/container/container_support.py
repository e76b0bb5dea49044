"""What the container tests share (the host side itself is imported as dew.host): the
checkout's git worktrees, which a stack must never leave behind; nox as CI installs it; a
git repository of the example package; and how a missing engine or tool skips a test (or,
under DEW_REQUIRE_ENGINE=1, as .ci/run sets it, fails it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def worktrees() -> list[str]:
    """The checkout's worktrees, by path (not HEAD: a commit made meanwhile is no worktree)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True, text=True
    )
    return [line for line in listed.stdout.splitlines() if line.startswith("worktree ")]


def unavailable(reason: str):
    """Skip: the engine or a tool the test drives is missing; under DEW_REQUIRE_ENGINE=1
    (CI) that is a failure, not a skip."""
    if os.environ.get("DEW_REQUIRE_ENGINE") == "1":
        pytest.fail(f"DEW_REQUIRE_ENGINE=1 but {reason}")
    pytest.skip(reason)


def nox_command() -> list[str]:
    """nox as CI installs it (`python3.12 -m pip install nox`): in the interpreter this
    test's venv was made from, else on PATH; unavailable() when neither has it."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    has_nox = subprocess.run([base, "-c", "import nox"], capture_output=True).returncode == 0
    if has_nox:
        return [str(base), "-m", "nox"]
    if shutil.which("nox"):
        return [shutil.which("nox")]
    unavailable("nox is not installed (`python3.12 -m pip install nox`)")


def reused_venv(name: str, envdir: Path) -> list[str]:
    """nox's arguments that make this test's venv (from locks/dev.txt, as the session's
    would be) session NAME's, linked under `envdir`: `-R` creates and installs nothing. []
    outside a venv, where nox builds the session's own."""
    if sys.prefix == sys.base_prefix:
        return []
    envdir.mkdir(parents=True, exist_ok=True)
    if not (envdir / name).exists():
        (envdir / name).symlink_to(Path(sys.prefix), target_is_directory=True)
    return ["-R", "--envdir", str(envdir)]


def git(repo: Path, *args: str) -> str:
    """git's output in `repo`, as a fixed author (a test's own repository); raises on failure."""
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def example_checkout(repo: Path, project: Path) -> tuple[str, str]:
    """examples/dew-example copied to `project` inside a new git repository `repo` (they may
    be one folder) and committed twice, as version 0.1.0 and then 0.2.0: the commits."""

    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT / "examples" / "dew-example", project, ignore=ignore)
    pyproject = project / "pyproject.toml"
    commits = []
    git(repo, "init", "-q")
    for version in ("0.1.0", "0.2.0"):
        text = re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text())
        pyproject.write_text(text)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", version)
        commits.append(git(repo, "rev-parse", "HEAD"))
    return commits[0], commits[1]
