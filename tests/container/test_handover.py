"""dew.host.handover stands in for the engine's client: a stop signal sent to it, or the
death of the session that started it (kill -9 included), reaches the client, which would
pass it into the container; and it waits for the client's own way out. A Python process in
the client's place records the signal it got, so no engine is needed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dew.host import handover

# The client's stand-in: says it is ready, and on SIGTERM or SIGINT writes which one came
# and exits as a stopped tool does (128 + the signal). Files are written whole and renamed
# into place: the test polls for them and must never read one half written.
CLIENT = """
import os, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    (out / "stopped.part").write_text(str(signum))
    os.replace(out / "stopped.part", out / "stopped")
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
(out / "ready").write_text("")
time.sleep(60)
"""

# The session's stand-in: starts the hand-over around the client, writes its pid, waits.
SESSION = """
import os, subprocess, sys, pathlib
out, argv = pathlib.Path(sys.argv[1]), sys.argv[2:]
child = subprocess.Popen(argv)
(out / "handover.pid.part").write_text(str(child.pid))
os.replace(out / "handover.pid.part", out / "handover.pid")
child.wait()
"""


def hand_over_argv(tmp_path: Path) -> list[str]:
    owner = f"{os.getuid()}:{os.getgid()}"  # the caller's own: nothing changes hands
    return [sys.executable, handover.__file__, "hand-over", owner, str(tmp_path), "--",
            sys.executable, "-c", CLIENT, str(tmp_path)]  # fmt: skip


def wait_for(path: Path, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it, or it lingers as a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_a_stop_signal_reaches_the_client_and_its_exit_is_the_hand_overs(tmp_path):
    for signum in (signal.SIGTERM, signal.SIGINT):
        for name in ("ready", "stopped"):
            (tmp_path / name).unlink(missing_ok=True)
        process = subprocess.Popen(hand_over_argv(tmp_path))
        assert wait_for(tmp_path / "ready")
        process.send_signal(signum)
        assert process.wait(timeout=20) == 128 + signum
        assert (tmp_path / "stopped").read_text() == str(int(signum))


def test_a_killed_session_stops_the_client_and_leaves_no_process(tmp_path):
    session = subprocess.Popen(
        [sys.executable, "-c", SESSION, str(tmp_path), *hand_over_argv(tmp_path)]
    )
    assert wait_for(tmp_path / "ready") and wait_for(tmp_path / "handover.pid")
    hand_over_pid = int((tmp_path / "handover.pid").read_text())
    session.kill()  # kill -9: the session can say nothing to its children
    session.wait(timeout=10)
    assert wait_for(tmp_path / "stopped"), "the client was not stopped"
    assert (tmp_path / "stopped").read_text() == str(int(signal.SIGTERM))
    assert gone(hand_over_pid), "the hand-over outlived its session"
