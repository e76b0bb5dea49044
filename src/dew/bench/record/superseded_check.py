"""What `dew validate` checks of results/superseded.json beyond its model: the files its
entries name and the commits its reasons name.

A record leaves its kind's noise only for a cause a code change removed, so each entry must
name a record under results/ (a path from the repository's root, as history reads it) that
is a valid record of its reason's device kind and was made before the commit that removed
the cause (its own commit an ancestor of `removed_by`, not that commit itself). The commits
are checked where git answers for the repository; a shallow clone, a missing git or a
record's commit this clone does not hold skips that check, never fails it.

Each problem is one line, `$.path: what is wrong: what to do`, as validate prints a model's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dew.bench.common.errors import UsageError
from dew.bench.common.files import RESULTS_ROOT
from dew.bench.record.schema.documents import Superseded

CheckFile = Callable[[Path], tuple[Any, list[str]]]  # a record file: (the record, its errors)


def root_of(path: Path) -> Path:
    """The repository root an entry's path is read from: the folder above the results/
    folder holding the file; for a file elsewhere (a copy), dew's own checkout."""
    folder = Path(path).resolve().parent
    return folder.parent if folder.name == "results" else RESULTS_ROOT


def problems(path: Path, table: Superseded, check_file: CheckFile) -> list[str]:
    """The lines naming each entry of a valid Superseded model that is wrong on disk or in
    git; `check_file` is how a listed record is validated (validate.check_file, which
    imports this module)."""

    root = root_of(path)
    results = (root / "results").resolve()
    git = _Git(root)
    lines = []
    for name, reason in table.reasons.items():
        if git.missing(reason.removed_by):
            lines.append(f"$.reasons[{name!r}].removed_by: {reason.removed_by} is not a commit of "
                         f"this repository ({root}): name the commit whose change removed the "
                         "cause")  # fmt: skip
    for entry, name in table.records.items():
        where = f"$.records[{entry!r}]"
        given = Path(entry)
        if given.is_absolute():
            lines.append(f"{where}: an absolute path: name the record by its path from the "
                         "repository's root (results/...)")  # fmt: skip
            continue
        file = (root / given).resolve()
        if not file.is_relative_to(results):
            lines.append(f"{where}: outside results/: only a record under results/ is part "
                         "of the history; remove the entry")  # fmt: skip
            continue
        if not file.is_file():
            lines.append(f"{where}: no such file under {root}: correct the path or remove "
                         "the entry")  # fmt: skip
            continue
        try:
            record, errors = check_file(file)
        except UsageError as error:
            record, errors = None, [str(error)]
        if record is None:
            first = errors[0] if errors else "not a record"
            lines.append(f"{where}: not a valid record ({first}): `dew validate {entry}` "
                         "lists its problems; correct it or remove the entry")  # fmt: skip
            continue
        reason = table.reasons[name]
        devices = record.environment.devices
        kind = devices.kind if devices is not None else None
        if kind != reason.device_kind:
            lines.append(f"{where}: a record of {kind or 'no device kind'}, and its reason "
                         f"{name!r} is of {reason.device_kind}: name a reason of its own "
                         "kind, or remove the entry")  # fmt: skip
            continue
        commit = record.environment.code.commit if record.environment.code else None
        if git.made_at_or_after(commit, reason.removed_by):
            lines.append(f"{where}: made at {commit[:7]}, not before {reason.removed_by} (the "
                         f"commit that removed the cause of {name!r}): a record made since keeps "
                         "its place in the history; remove the entry")  # fmt: skip
    return lines


def check_text(path: Path, text: str, check_file: CheckFile) -> list[str]:
    """`problems` of a file whose model already passed."""
    return problems(path, Superseded.model_validate(json.loads(text)), check_file)


class _Git:
    """The repository's answers, or None for each question git cannot answer here."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shallow = self._run("rev-parse", "--is-shallow-repository")
        self.usable = shallow is not None and shallow.returncode == 0
        self.shallow = not self.usable or shallow.stdout.strip() != "false"

    def _run(self, *args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(["git", "-C", str(self.root), *args], capture_output=True,
                                  text=True, timeout=30, check=False)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None

    def commit(self, name: str | None) -> str | None:
        """The whole hash of a commit this clone holds, else None."""
        if not self.usable or not name:
            return None
        done = self._run("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        return done.stdout.strip() if done is not None and done.returncode == 0 else None

    def missing(self, name: str) -> bool:
        """Whether `name` is surely no commit of the repository (a whole clone lacks it)."""
        return self.usable and not self.shallow and self.commit(name) is None

    def made_at_or_after(self, commit: str | None, fix: str) -> bool:
        """Whether a record's commit is the fix or comes after it (not its ancestor); False
        where either commit is not in this clone."""
        mine, theirs = self.commit(commit), self.commit(fix)
        if mine is None or theirs is None:
            return False
        if mine == theirs:
            return True
        done = self._run("merge-base", "--is-ancestor", mine, theirs)
        return done is not None and done.returncode == 1
