"""The code from outside dew a run used (an architecture from another package, a
`--step MODULE:FACTORY`): which distribution holds each module, its version and, where its
code lies in a git work tree (an editable install, a source tree on PYTHONPATH) or pip
installed it from one (direct_url.json), the commit and whether the tree was dirty.

`describe` fills the record's `environment.outside_code`; capture() adds each version to
`packages` too, so compare's stack differences name a changed version like any package's.
Nothing here imports the modules themselves (only their parent packages, to find them).

An editable install keeps the version it was installed with until it is installed again:
after a bump in its checkout's pyproject.toml, a record would name the old version beside
the new code's commit. `describe` refuses such a stale install in one line (StaleInstall,
exit 2) that names both versions and the command that fixes it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from dew.bench.common.errors import UsageError
from dew.bench.record.schema.environment import OutsideCode
from dew.bench.record.stack import distribution_name

GIT_TIMEOUT_S = 20


def describe(uses: Mapping[str, Sequence[str]]) -> list[OutsideCode]:
    """One OutsideCode per module: `uses` maps a module to the cases' architectures (or
    steps) it holds."""
    if not uses:
        return []
    holders = importlib.metadata.packages_distributions()  # top-level name -> distributions
    described = []
    for module, used_by in uses.items():
        names = holders.get(module.partition(".")[0]) or []
        dist = _distribution(names[0]) if names else None
        stale = stale_install(dist)
        if stale:
            raise StaleInstall(stale)
        commit, dirty, source = _commit(_module_file(module), dist)
        described.append(
            OutsideCode(
                distribution=distribution_name(dist.metadata["Name"]) if dist else None,
                version=dist.version if dist else None,
                module=module,
                used_by=list(used_by),
                commit=commit,
                dirty=dirty,
                source=source,
            )
        )
    return described


class StaleInstall(UsageError):
    """An editable install whose version is not its checkout's: one line, exit 2."""


def stale_install(dist: importlib.metadata.Distribution | None) -> str | None:
    """Why an editable install is stale (its installed version is not the one its
    checkout's pyproject.toml declares), in one line; None when it is not editable, has no
    static version there, or agrees."""
    source = _editable_source(dist)
    if dist is None or source is None:
        return None
    try:
        project = tomllib.loads((source / "pyproject.toml").read_text()).get("project") or {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    declared = project.get("version")
    if not isinstance(declared, str) or "version" in (project.get("dynamic") or []):
        return None
    if _same_version(declared, dist.version):
        return None
    name = distribution_name(dist.metadata["Name"] or "")
    return (
        f"package {name}: installed as {dist.version}, but its checkout declares {declared} "
        f"({source / 'pyproject.toml'}): the editable install is stale, and a record would "
        f"name {dist.version} beside {declared}'s code; install it again: "
        f"python -m pip install -e {source}"
    )


def _same_version(a: str, b: str) -> bool:
    """PEP 440's equality (`0.2` is `0.2.0`, `1.0-rc1` is `1.0rc1`: a build backend writes
    the normalised form), the strings' where one is not a version or `packaging` (in every
    lock, not a pin of dew's) is missing."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return a == b
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _editable_source(dist: importlib.metadata.Distribution | None) -> Path | None:
    """The folder an editable install (PEP 660: direct_url.json) was made from."""
    direct = _direct_url(dist)
    if (direct.get("dir_info") or {}).get("editable") and direct.get("url", "").startswith("file:"):
        return Path(unquote(urlparse(direct["url"]).path))
    return None


def versions(code: Sequence[OutsideCode]) -> dict[str, str | None]:
    """distribution -> version of the described packages (what `packages` gains)."""
    return {item.distribution: item.version for item in code if item.distribution}


def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_file(module: str) -> Path | None:
    """Where the module's code lies, without importing it (its parents are imported);
    the working directory is searched last, as a step's process imports it
    (dew.bench.sweep.own_step)."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.append(os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin)


def _commit(
    file: Path | None, dist: importlib.metadata.Distribution | None
) -> tuple[str | None, bool | None, str | None]:
    """(commit, dirty, source): from the git work tree the module's file lies in, else
    from an editable install's source directory, else the commit pip recorded for a VCS
    install; (None, None, None) for an installed copy."""
    direct = _direct_url(dist)
    places = [file.parent] if file else []
    editable = _editable_source(dist)
    if editable is not None:
        places.append(editable)
    for place in places:
        tree = _work_tree(place, file)
        if tree is not None:
            head = git(tree, "rev-parse", "HEAD")
            if head:
                status = git(tree, "status", "--porcelain", "--untracked-files=no")
                return head, bool(status), "git"
    commit = (direct.get("vcs_info") or {}).get("commit_id")
    return (commit, None, "direct_url") if commit else (None, None, None)


def _direct_url(dist: importlib.metadata.Distribution | None) -> dict:
    """PEP 610's direct_url.json of an install (editable, or from a URL); {} otherwise."""
    if dist is None:
        return {}
    try:
        value = json.loads(dist.read_text("direct_url.json") or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _work_tree(place: Path, file: Path | None) -> Path | None:
    """The git work tree `place` lies in, None when none does or when the module's file
    is one git ignores there (an installed copy in a virtual environment inside a repo)."""
    if not place.is_dir():
        return None
    top = git(place, "rev-parse", "--show-toplevel")
    if not top:
        return None
    if file is not None and file.parent == place:
        if git(place, "check-ignore", "-q", str(file)) is not None:  # exit 0: ignored
            return None
    return Path(top)


def git(where: Path, *args: str) -> str | None:
    """git's output in `where` (None when git is missing or answers otherwise)."""
    if not shutil.which("git"):
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(where), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None
