"""What dew writes, and the checks that guard it: a record is never destroyed or shrunk.

Every output of every entry point goes through here:
- `check_output_file` runs before any work: the path must be a file that can be written,
  not one of the run's inputs, and, when it exists, the user must have said what to do
  with it (`--resume` continues it, `--overwrite` replaces it), as pyperf's `-o` does;
- `check_output_dir` the same for a directory a run writes into (profile, cache);
- `atomic_write` replaces a file in one step: a reader sees the old file or the new one;
- `one_writer` holds an output for one run at a time: a second run on it is refused;
- `read_json_object` reads what a command is given: a JSON object, or one line saying what
  the file is instead (the host's sessions read a record with it before pydantic exists).

Standard library only: the schema writes its records through `atomic_write`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from dew.bench.common.errors import UsageError

# The checkout this package runs from (an editable install): the record's commit is read
# from it.
REPO_ROOT = Path(__file__).resolve().parents[4]


def _is_checkout(path: Path) -> bool:
    return (path / "src" / "dew" / "__init__.py").is_file() and (path / "results").is_dir()


def _results_root() -> Path:
    """The checkout whose results/ dew reads (the history a comparison's noise is fitted
    from, the published tables, results/superseded.json): the one around this package; for
    a dew installed from a wheel or a bundle, which sits in no checkout, the current
    directory where it is a dew checkout (a TPU host runs the bundle's dew from the
    checkout's root, docs/tpu-install.md). Its commit is not the record's: that stays the
    installed dew's."""
    if _is_checkout(REPO_ROOT):
        return REPO_ROOT
    here = Path.cwd().resolve()
    return here if _is_checkout(here) else REPO_ROOT


RESULTS_ROOT = _results_root()


def file_stamp(path: str | os.PathLike | None) -> tuple[int, int, int] | None:
    """Which file is at `path` and as it was last written: its inode (an atomic write makes
    a new one, so a rewrite within one tick of the clock is still told apart), modification
    time and size; None when there is none."""
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size) if stat else None


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


@contextlib.contextmanager
def one_writer(path: str | os.PathLike | None, *, flag: str) -> Iterator[None]:
    """Hold `path` (a record, or the site's directory) for this run alone while inside; a
    run that finds it held is refused with one UsageError line naming the holder.

    Refuse rather than merge: two runs writing one record would each rewrite it whole from
    their own rows, and the last write would drop the other's rows. The lock is an OS lock
    (flock) on `.<name>.lock` beside the path, holding the holder's pid: the OS releases it
    when the holder ends, however it ends (a kill -9 included), so a dead run never blocks
    the next one. The lock file is removed on the way out. None: nothing to hold."""
    if path is None:
        yield
        return
    target = Path(path)
    lock = target.parent / f".{target.name}.lock"
    made: list[Path] = []
    try:
        _make_directories(lock.parent, made)
        descriptor = _lock(lock, flag, target)
    except OSError as error:  # checked writable before; a directory can change since
        _remove_empty(made)
        raise UsageError(f"{flag} {target} cannot be written: {error.strerror}") from None
    except BaseException:
        _remove_empty(made)
        raise
    try:
        yield
    finally:
        # Removed while still held, then released: a run waiting on this file then sees it
        # gone and locks a new one (_lock), never a file nobody else can see.
        lock.unlink(missing_ok=True)
        os.close(descriptor)
        _remove_empty(made)


def _lock(lock: Path, flag: str, target: Path) -> int:
    """An open descriptor holding the flock of `lock`, with this process's pid in it."""
    while True:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(descriptor)
            os.close(descriptor)
            raise UsageError(
                f"{flag} {target} is being written by another run ({holder}, lock {lock}); "
                "wait for it to end or write elsewhere"
            ) from None
        except OSError as error:  # a filesystem without locks: say so rather than risk it
            os.close(descriptor)
            raise UsageError(f"{flag} {target} cannot be locked: {error.strerror}") from None
        except BaseException:
            os.close(descriptor)
            raise
        if _same_inode(descriptor, lock):
            break
        os.close(descriptor)  # its holder removed it as we opened it: lock the new one
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
    except OSError:  # a full disk: the lock holds without the pid ("pid unknown")
        pass
    return descriptor


def _holder(descriptor: int) -> str:
    """`pid 1234` from the lock file, as its holder wrote it (or that it is unknown)."""
    try:
        text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _same_inode(descriptor: int, lock: Path) -> bool:
    try:
        on_disk = os.stat(lock)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _make_directories(directory: Path, made: list[Path]) -> None:
    """Create `directory` and its missing parents, adding each made to `made`, deepest
    first."""
    missing = []
    while not directory.absolute().exists():
        missing.append(directory)
        directory = directory.parent
    for each in reversed(missing):
        each.mkdir(exist_ok=True)
        made.insert(0, each)


def _remove_empty(directories: list[Path]) -> None:
    """Remove the directories a refused or finished run made and left empty: a refusal
    changes nothing."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # something was written there: it stays
            return


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
    target = nameable(path, flag)
    for source in inputs:
        if source is not None and same_file(target, Path(source)):
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
    target = nameable(path, flag)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{flag} {target} is not a directory")
    directory = _existing_ancestor(target)
    if not directory.is_dir():
        raise UsageError(f"{flag} {target}: {directory} is not a directory")
    _probe_writable(directory, f"{flag} {target}")
    return target


def check_apart(outputs: Iterable[tuple[str, str | os.PathLike | None, str]]) -> None:
    """Every output of one run, (flag, path, "file" | "dir"), against every other before
    any work: two at one path, or a folder output inside a file output, would leave one of
    them unwritable after the run (a record lost to the folder of logs made where it was to
    go). None paths are skipped. One UsageError line naming both flags."""
    named = [(flag, Path(os.path.abspath(path)), kind) for flag, path, kind in outputs if path]
    for index, (flag, path, kind) in enumerate(named):
        for other_flag, other, other_kind in named[index + 1 :]:
            if path == other:
                raise UsageError(
                    f"{flag} and {other_flag} are the same path ({path}); give each its own"
                )
            for outer, outer_path, outer_kind, inner, inner_path in (
                (flag, path, kind, other_flag, other),
                (other_flag, other, other_kind, flag, path),
            ):
                if outer_kind == "file" and outer_path in inner_path.parents:
                    raise UsageError(
                        f"{inner} {inner_path} is inside {outer} {outer_path}, which is a "
                        "file; give each its own place"
                    )


def check_input_file(path: str | os.PathLike, *, flag: str) -> Path:
    """An input the run reads must be an existing file (not a directory)."""
    source = Path(path)
    if not source.exists():
        raise UsageError(f"{flag} {source}: no such file")
    if source.is_dir():
        raise UsageError(f"{flag} {source} is a directory; give a file")
    return source


def nameable(path: str | os.PathLike, flag: str) -> Path:
    """`path` as a Path when the file system can look it up, whether or not it exists; else
    one UsageError line: an empty path, a symbolic link loop, a name longer than the file
    system takes (pathlib's exists() reads the last two as "no such file", and the write
    that follows fails with a traceback)."""
    if not os.fspath(path):
        raise UsageError(f"{flag} is empty; give a path")
    target = Path(path)
    try:
        os.stat(target)
        error = None
    except FileNotFoundError:
        error = None
        # The lookup stops at the first missing folder: the names after it are not checked.
        longest = max(len(os.fsencode(part)) for part in target.parts)
        if longest > _name_max(_existing_ancestor(target)):
            error = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        elif os.path.islink(target):  # a link to nowhere: a write would replace the link
            raise UsageError(
                f"{flag} {target} is a symbolic link to {os.readlink(target)}, which does "
                "not exist; give the path itself"
            ) from None
    except NotADirectoryError:
        error = None  # a file on the way: the callers name it (".. is not a directory")
    except OSError as raised:
        error = raised
    if error is not None:
        if error.errno == errno.ELOOP:
            why = "a symbolic link loop (a link that leads back to itself)"
        elif error.errno == errno.ENAMETOOLONG:
            why = "a name longer than the file system takes"
        else:
            why = error.strerror or type(error).__name__
        raise UsageError(f"{flag} {target}: {why}; give another path") from None
    return target


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one existing file (a link or another spelling included)."""
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


# --- what dew reads -----------------------------------------------------------------------


def _json_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {list: "a list", str: "a string"}.get(type(value), "a number")


def read_json_object(path: Path, role: str = "") -> str:
    """The text of `path` when it holds a JSON object; else UsageError, one line naming the
    file (`role`, e.g. "RUN", goes before the path) and what it is instead."""
    name = f"{role} {path}" if role else str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{name} is a directory; give a record file") from None
    except OSError as error:
        raise UsageError(f"{name}: cannot read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{name} is not a text file (byte {data[error.start]:#04x} at offset "
            f"{error.start} is not UTF-8); give a JSON record"
        ) from None
    if not text.strip():  # a run killed before its first write, a `touch`: say so plainly
        raise UsageError(f"{name} is empty ({len(data)} bytes); give a results record")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{name}: not JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise UsageError(f"{name}: not JSON this reader can take: nested too deeply") from None
    if not isinstance(value, dict):
        kind = _json_kind(value)
        raise UsageError(f"{name}: not a results record: the JSON is {kind}, not an object")
    return text
