"""What the container tests share: the standard-library modules under docker/, imported as
the noxfile imports them, from the package `dew_docker` that the noxfile's `load` makes of
docker/ (no installed package, on no sys.path), so that every test and the sessions share
one module of each; and the checkout's git worktrees, which a stack must never leave behind.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(module: str):
    """docker/<module>.py as `dew_docker.<module>` (the package made first, once, as the
    noxfile's `load` makes it)."""
    if "dew_docker" not in sys.modules:
        spec = importlib.machinery.ModuleSpec("dew_docker", None, is_package=True)
        spec.submodule_search_locations = [str(ROOT / "docker")]
        sys.modules["dew_docker"] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"dew_docker.{module}")


def worktrees() -> list[str]:
    """The checkout's worktrees, by path (not HEAD: a commit made meanwhile is no worktree)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True, text=True
    )
    return [line for line in listed.stdout.splitlines() if line.startswith("worktree ")]
