"""`handover.py hand-over UID:GID DIR... -- ENGINE RUN ...`: lend the directories a
container writes into to the image's user for the run, run it, then give everything it
wrote back to the caller (runner.run_argv puts it in front of the engine's command for a
root caller).

Run as a script: standard library only, importing nothing of dew.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def _chown_tree(top: Path, frm: int, to: tuple[int, int], dirs_only: bool) -> None:
    """lchown what `frm` owns under `top` (symlinks are not followed)."""
    for folder, subdirs, files in os.walk(top):
        # os.walk does not descend into a linked directory: the link itself is chowned.
        links = [d for d in subdirs if os.path.islink(os.path.join(folder, d))]
        names = [folder] + ([] if dirs_only else [os.path.join(folder, f) for f in files + links])
        for name in names:
            try:
                if os.lstat(name).st_uid == frm:
                    os.chown(name, *to, follow_symlinks=False)
            except OSError:
                pass


def hand_over(argv: Sequence[str]) -> int:
    """`handover.py hand-over UID:GID DIR... -- ENGINE RUN ...`: lend the directories to the
    image's user for the run, run it, then give everything it wrote back to the caller."""
    owner, *rest = argv
    split = rest.index("--")
    dirs, command = [Path(d) for d in rest[:split]], rest[split + 1 :]
    uid, gid = (int(part) for part in owner.split(":"))
    caller = (os.getuid(), os.getgid())
    for folder in dirs:
        _chown_tree(folder, caller[0], (uid, gid), dirs_only=True)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for folder in dirs:
            _chown_tree(folder, uid, caller, dirs_only=False)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    if sys.argv[1:2] == ["hand-over"]:
        # A stopped session must still give the results back: SIGTERM unwinds like Ctrl-C.
        signal.signal(signal.SIGTERM, _interrupt)
        sys.exit(hand_over(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} hand-over UID:GID DIR... -- COMMAND...")
