"""What dew writes, and the checks that guard it: a record is never destroyed or shrunk.

Every output of every entry point goes through here:
- `check_output_file` runs before any work: the path must be a file that can be written,
  not one of the run's inputs, and, when it exists, the user must have said what to do
  with it (`--resume` continues it, `--overwrite` replaces it), as pyperf's `-o` does;
- `check_output_dir` the same for a directory a run writes into (profile, cache);
- `atomic_write` replaces a file in one step: a reader sees the old file or the new one.

Standard library only: the schema writes its records through `atomic_write`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from dew.bench.common.errors import UsageError

# The checkout this package runs from (an editable install): the record's commit and the
# published tables are read from it.
REPO_ROOT = Path(__file__).resolve().parents[4]


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same directory + os.replace."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a record is meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def check_output_file(
    path: str | os.PathLike,
    *,
    flag: str,
    overwrite: bool = False,
    resume: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    may_resume: bool = False,
) -> Path:
    """Refuse, with one UsageError line and before any work, an output that would lose or
    clobber something: a directory, one of the run's inputs, an existing file the user did
    not say to continue or replace, a place that cannot be written. Changes nothing."""
    target = Path(path)
    for source in inputs:
        if source is not None and _same_file(target, Path(source)):
            raise UsageError(f"{flag} {target} is also an input of this run; write elsewhere")
    if target.is_dir():
        raise UsageError(f"{flag} {target} is a directory; give a file path")
    if target.exists() and not (overwrite or resume):
        how = "--resume to continue it or --overwrite" if may_resume else "--overwrite"
        raise UsageError(f"{flag} {target} exists; pass {how} to replace it")
    if resume and not target.exists():
        return target  # nothing to continue: the run starts the record
    directory = _existing_ancestor(target.parent)
    if not directory.is_dir():
        raise UsageError(f"{flag} {target}: {directory} is not a directory")
    _probe_writable(directory, f"{flag} {target}")
    if target.exists():
        try:
            with open(target, "ab"):  # opening for append changes nothing
                pass
        except OSError as error:
            raise UsageError(f"{flag} {target} cannot be written: {error.strerror}") from None
    return target


def check_output_dir(path: str | os.PathLike, *, flag: str) -> Path:
    """A directory a run writes into must be a directory (or creatable) and writable."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{flag} {target} is not a directory")
    directory = _existing_ancestor(target)
    if not directory.is_dir():
        raise UsageError(f"{flag} {target}: {directory} is not a directory")
    _probe_writable(directory, f"{flag} {target}")
    return target


def check_input_file(path: str | os.PathLike, *, flag: str) -> Path:
    """An input the run reads must be an existing file (not a directory)."""
    source = Path(path)
    if not source.exists():
        raise UsageError(f"{flag} {source}: no such file")
    if source.is_dir():
        raise UsageError(f"{flag} {source} is a directory; give a file")
    return source


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe_writable(directory: Path, what: str) -> None:
    """Create and remove a file there: the only check that holds for root and read-only
    mounts alike (os.access says yes to root everywhere)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dew-probe.", dir=directory)
    except OSError as error:
        raise UsageError(f"{what} cannot be written: {error.strerror} ({directory})") from None
    os.close(fd)
    os.unlink(probe)
