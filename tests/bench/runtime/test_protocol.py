"""dew.bench.runtime.protocol with real child processes: typed messages both ways over a
spawned child's inherited channel and over a multiprocessing Pipe; every receive has a
deadline, past which the child (with its process group) is killed and the error names it,
its phase and what was awaited; a child that dies, exits or closes its channel is reported
with its exit status at once; the device probe (dew.bench.sweep.preflight) speaks it too."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from infra.processes import gone

from dew.bench.common.cli import UsageError
from dew.bench.runtime import protocol
from dew.bench.runtime.protocol import (
    Child,
    ChildExited,
    ChildTimedOut,
    Deadline,
    Message,
    UnexpectedMessage,
    spawn,
)


@dataclasses.dataclass(frozen=True)
class Hello(Message):
    text: str
    count: int


@dataclasses.dataclass(frozen=True)
class Go(Message):
    pass


# The children's side, as a spawned child runs it: the same kinds, by name (the wire is
# tagged JSON, not pickles: a child need not share the parent's classes).
PRELUDE = """
import dataclasses, os, signal, subprocess, sys, time
from dew.bench.runtime.protocol import Message, ToParent

@dataclasses.dataclass(frozen=True)
class Hello(Message):
    text: str
    count: int

@dataclasses.dataclass(frozen=True)
class Go(Message):
    pass

@dataclasses.dataclass(frozen=True)
class Other(Message):
    pass

parent = ToParent.from_environment()
"""


def start(body: str, *args: str) -> Child:
    return spawn("the test child", [sys.executable, "-c", PRELUDE + body, *args])


@pytest.fixture
def watchdog():
    """Kill a given pid after 60 s: a deadline that does not work fails a test (a death,
    not a timeout), never hangs the suite."""
    timers = []

    def guard(pid: int) -> None:
        timer = threading.Timer(60, lambda: os.kill(pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()
        timers.append(timer)

    yield guard
    for timer in timers:
        timer.cancel()


# --- messages ------------------------------------------------------------------------------


def test_messages_are_typed_both_ways_and_stdout_stays_the_childs():

    body = """
print("DEW_DATA_ROW {} DEW_DEVICES {}", flush=True)  # its own log: never parsed
parent.send(Hello("hi", np.int64(3)))
go = parent.receive(Go)
parent.send(Hello("after go" if isinstance(go, Go) else "no go", 4))
"""
    with start("import numpy as np\n" + body) as child:
        first = child.receive(Hello, phase="testing", deadline=60)
        assert first == Hello("hi", 3) and type(first.count) is int
        assert child.send(Go())
        assert child.receive(Hello, phase="testing", deadline=60) == Hello("after go", 4)
        assert child.finish() == 0
        assert "DEW_DATA_ROW" in Path(child.log).read_text()
    assert not os.path.exists(child.log)  # the log goes with the child


def test_a_message_of_another_kind_kills_the_child():
    with start("parent.send(Other())\ntime.sleep(600)") as child:
        with pytest.raises(UnexpectedMessage) as raised:
            child.receive(Hello, phase="testing", deadline=60)
        assert str(raised.value) == (
            "the test child sent a 'Other' message in testing, waiting for Hello"
        )
        assert gone(child.pid, within_s=10)


# --- deadlines -----------------------------------------------------------------------------


HANGS = """
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(f"{worker.pid}")
if sys.argv[2] == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["sleep", "stop"])
def test_a_child_past_its_deadline_is_killed_with_its_process_group(tmp_path, watchdog, how):
    pids = tmp_path / "pids"
    with start(HANGS, str(pids), how) as child:
        watchdog(child.pid)
        start_s = time.monotonic()
        with pytest.raises(ChildTimedOut) as raised:
            child.receive(Hello, phase="testing", deadline=2, waiting_for="its greeting")
        assert 2 <= time.monotonic() - start_s < 30
        error = raised.value
        assert str(error) == (
            "the test child timed out after 2 s in testing, waiting for its greeting"
        )
        assert (error.child, error.phase, error.waiting_for, error.seconds) == (
            "the test child",
            "testing",
            "its greeting",
            2,
        )
        assert child.exit_code() == -signal.SIGKILL  # killed and reaped
        assert gone(int(pids.read_text()), within_s=10), "its worker outlived it"


def test_one_deadline_spans_several_receives(watchdog):
    with start("parent.send(Hello('one', 1))\ntime.sleep(600)") as child:
        watchdog(child.pid)
        deadline = Deadline(3)
        assert child.receive(Hello, phase="testing", deadline=deadline) == Hello("one", 1)
        with pytest.raises(ChildTimedOut, match="timed out after 3 s in testing"):
            child.receive(Hello, phase="testing", deadline=deadline)
        assert deadline.left() == 0


@pytest.mark.parametrize("seconds", [1e12, 1e300, float("inf")])
def test_a_deadline_of_years_is_waited_on_without_overflow(watchdog, seconds):
    """A huge --steps or --case-timeout makes a deadline past what poll() and select() take
    (OverflowError after the compile, issue 52): each wait is an hour at most."""
    with start("time.sleep(0.5)\nparent.send(Hello('late', 1))") as child:
        watchdog(child.pid)
        assert child.receive(Hello, phase="testing", deadline=seconds) == Hello("late", 1)


# --- deaths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, code, message",
    [
        ("print('boom', file=sys.stderr); sys.exit(3)", 3, "the test child exited 3: boom"),
        ("os.kill(os.getpid(), signal.SIGKILL)", -9, "the test child died of SIGKILL"),
        ("pass", 0, "the test child exited 0"),
    ],
)
def test_a_child_that_ends_is_reported_at_once_with_its_exit_status(body, code, message):
    with start(body) as child:
        start_s = time.monotonic()
        with pytest.raises(ChildExited) as raised:
            child.receive(Hello, phase="testing", deadline=600)
        assert time.monotonic() - start_s < 30  # not at the deadline
        assert str(raised.value) == message and raised.value.exit_code == code


def test_a_child_that_dies_while_its_worker_holds_the_channel_is_reported(watchdog):
    # The worker is forked: it holds the child's end of the channel, so no end of file
    # comes; the child's own end (its pidfd) says it died.
    body = "if os.fork() == 0:\n    time.sleep(600)\nos._exit(5)"
    with start(body) as child:
        watchdog(child.pid)
        start_s = time.monotonic()
        with pytest.raises(ChildExited) as raised:
            child.receive(Hello, phase="testing", deadline=600)
        assert time.monotonic() - start_s < 30
        assert raised.value.exit_code == 5


def test_a_child_that_closes_its_channel_and_lingers_is_killed(monkeypatch, watchdog):
    monkeypatch.setattr(protocol, "EXIT_GRACE_S", 1.0)
    with start("parent._connection.close()\ntime.sleep(600)") as child:
        watchdog(child.pid)
        with pytest.raises(ChildExited) as raised:
            child.receive(Hello, phase="testing", deadline=600)
        assert str(raised.value) == (
            "the test child closed its channel and did not exit within 1 s: killed"
        )
        assert raised.value.exit_code == -signal.SIGKILL


# --- a forked child: the same over a multiprocessing Pipe ----------------------------------


def forked_child(connection, run_pid: int, how: str) -> None:
    """A multiprocessing child (the spawn context imports this module by name)."""
    parent = protocol.ToParent(connection, run_pid)
    if how == "talks":
        parent.send(Hello("forked", 1))
        if parent.receive(Go) is not None:
            parent.send(Hello("timed", 2))
    elif how == "exits":
        os._exit(7)
    else:
        parent.send(Hello("started", 0))
        time.sleep(600)


@pytest.mark.parametrize("how", ["talks", "exits", "sleeps"])
def test_a_forked_child_over_a_multiprocessing_pipe(how, watchdog):
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=forked_child, args=(theirs, os.getpid(), how))
    process.start()
    theirs.close()
    with Child("the forked child", process, mine) as child:
        watchdog(child.pid)
        if how == "talks":
            assert child.receive(Hello, phase="compile", deadline=60) == Hello("forked", 1)
            child.send(Go())
            assert child.receive(Hello, phase="timing", deadline=60) == Hello("timed", 2)
            assert child.finish() == 0
        elif how == "exits":
            with pytest.raises(ChildExited, match="^the forked child exited 7$"):
                child.receive(Hello, phase="compile", deadline=60)
        else:
            assert child.receive(Hello, phase="compile", deadline=60) == Hello("started", 0)
            with pytest.raises(ChildTimedOut, match="timed out after 2 s in timing"):
                child.receive(Hello, phase="timing", deadline=2)
            assert not process.is_alive() and process.exitcode == -signal.SIGKILL


def test_the_deadlines_are_generous_named_and_documented():
    deadlines = {"COMPILE_S": 30 * 60, "TIMED_S": 10 * 60, "PROBE_S": 5 * 60}
    deadlines["LOADER_REPEAT_S"] = 30 * 60
    for name, seconds in deadlines.items():
        assert getattr(protocol, name) == seconds
        assert name in protocol.__doc__


# --- the device probe (dew.bench.sweep.preflight) ------------------------------------------


def test_the_device_probe_reports_its_devices():
    from dew.bench.sweep import preflight

    devices = preflight.probe_devices(dict(os.environ))
    assert (devices.platform, devices.count) == ("cpu", 8)
    identity, backend = devices.for_record()  # as the record holds them, read by the probe
    assert (identity.platform, identity.count, identity.read_by) == (
        "cpu", 8, "the process that held them"
    )  # fmt: skip
    assert backend.platform_version == "cpu"


def test_a_device_probe_that_fails_is_one_line():
    from dew.bench.sweep import preflight

    environment = {**os.environ, "JAX_PLATFORMS": "no_such_platform"}
    with pytest.raises(UsageError) as raised:
        preflight.probe_devices(environment)
    message = str(raised.value)
    assert message.startswith("JAX cannot start with this environment: ")
    assert "no_such_platform" in message and "\n" not in message


def test_a_device_probe_past_its_deadline_is_killed_and_one_line(monkeypatch):
    from dew.bench.sweep import preflight

    started = []

    def recording_spawn(*args, **kwargs):
        started.append(spawn(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(preflight, "PROBE", "import time; time.sleep(600)")
    monkeypatch.setattr(preflight.protocol, "spawn", recording_spawn)
    with pytest.raises(UsageError, match="^JAX did not start within 2 s$"):
        preflight.probe_devices(dict(os.environ), timeout_s=2)
    assert gone(started[0].pid, within_s=10)


def test_a_child_started_by_hand_is_one_line():
    import subprocess

    environment = {k: v for k, v in os.environ.items() if k != protocol.CHANNEL}
    command = [sys.executable, "-m", "dew.bench.loader.measure"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: no DEW_CHANNEL: a child process of a dew run, not a command"
    ]
