"""A short private folder for the run's AF_UNIX sockets, whatever TMPDIR is.

A socket's path is at most 107 bytes on Linux (sun_path holds 108 with its NUL; 103 on
macOS). multiprocessing's forkserver binds `listener-XXXXXXXX` in its temporary folder,
`pymp-XXXXXXXX` under tempfile.gettempdir(): a TMPDIR of ~80 characters (a SLURM job's
scratch, macOS's /var/folders/..., a deep pytest base) ends every isolated case in
`OSError: AF_UNIX path too long`. So the folder multiprocessing uses is made here, under
TMPDIR while it is short enough and else under the first short base that can be written;
mkdtemp makes it 0700 (the socket inside is the run's alone) and it is removed at exit.

Only the socket's folder moves: TMPDIR itself stays as the user set it for everything
else the run and its cases write.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from multiprocessing import process, util

from dew.bench.common.errors import UsageError

SUN_PATH_MAX = 103 if sys.platform == "darwin" else 107  # bytes, without the NUL
SOCKET_NAME_ROOM = 20  # multiprocessing's `listener-XXXXXXXX` (17) with room to spare
FOLDER_PREFIX = "dew-"
SHORT_BASES = ("/tmp", "/var/tmp", "/dev/shm")  # where TMPDIR is too long


class NoSocketFolder(UsageError):
    """No short folder could be made for the sockets: one line, exit 2."""


def fits(folder: str) -> bool:
    """Whether a socket named by multiprocessing inside `folder` fits in sun_path."""
    return len(os.fsencode(folder)) + 1 + SOCKET_NAME_ROOM <= SUN_PATH_MAX


def make_folder(bases: tuple[str, ...] | None = None) -> str:
    """A new private folder, short enough for a socket, under the first of `bases` (default:
    tempfile.gettempdir(), then SHORT_BASES) where one can be made."""
    if bases is None:
        bases = (tempfile.gettempdir(), *SHORT_BASES)
    tried: list[str] = []
    for base in dict.fromkeys(bases):  # TMPDIR may be /tmp itself: try each once
        # mkdtemp adds 8 characters to the prefix: check the name it will make first
        if not fits(os.path.join(base, FOLDER_PREFIX + "X" * 8)):
            tried.append(f"{base} ({len(os.fsencode(base))} bytes: too long)")
            continue
        try:
            return tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=base)
        except OSError as error:
            tried.append(f"{base} ({error.strerror or type(error).__name__})")
    raise NoSocketFolder(  # what to do first, then the bases tried (long paths, some)
        f"no folder for the case processes' socket (a socket path holds at most "
        f"{SUN_PATH_MAX} bytes): set TMPDIR to a short writable folder; tried " + "; ".join(tried)
    )


def for_multiprocessing() -> str:
    """The folder multiprocessing binds its sockets in (the forkserver's): its own when it
    fits, else a new short one, made once per process. Call before the forkserver starts;
    a folder that cannot be made is a NoSocketFolder."""
    # multiprocessing keeps the folder in the process's _config['tempdir'] (util.get_temp_dir
    # makes it under TMPDIR on first use and reads it there afterwards): setting it first is
    # the one way to move the socket without moving TMPDIR for everything else.
    config = process.current_process()._config
    current = config.get("tempdir")
    if current is not None and fits(current):
        return current
    folder = make_folder()
    # removed at exit as multiprocessing removes its own, after the forkserver has stopped
    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
    config["tempdir"] = folder
    return folder
