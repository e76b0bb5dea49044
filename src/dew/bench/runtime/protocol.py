"""One protocol between the run and a child process it waits on, every wait with a deadline.

Its children: a case's (dew.bench.sweep.case_process, forked from the forkserver), a loader
repeat's (dew.bench.loader.measure), the device probe (dew.bench.sweep.preflight), and a
TPU's compile processes and holder (dew.bench.sweep.chip); the benchmark children speak
dew.bench.runtime.conversation's messages, the chip's its own (chip.messages). The design:

    messages    a frozen dataclass per kind (`Message`'s; a pydantic one is validated when
                decoded), sent as tagged JSON ({"kind": its name, "fields": {...}}), a frame each;
    channel     a multiprocessing Connection: a Pipe() for a forked child, or the same over
                a socket pair whose child end a subprocess inherits (`spawn`: pass_fds, its
                number in the environment as CHANNEL); the children's stdout and stderr
                stay theirs (a log file), never parsed;
    child side  `ToParent`: send(message), receive(kinds) (blocking: the parent decides);
                the run's end kills it (dew.bench.runtime.lifeline.exit_with);
    parent side `Child.receive(kinds, phase=..., deadline=...)`: a message of those kinds,
                or ChildTimedOut (the child is killed, with its process group when it has
                one), ChildExited (it died or closed its channel: its exit status and the
                last line it wrote) or UnexpectedMessage (killed too): one line each.

Deadlines, generous: they end a child that hangs, never a slow but real compile. Each is a
parameter where it is used (CaseProcess, measure_in_child, probe_devices); these are the
floors of the defaults, which grow with the work asked (dew.bench.sweep.settings
.case_deadlines, dew.bench.loader.measure.repeat_deadline), and `--case-timeout SECONDS`
replaces every deadline of a case's or a repeat's child:

    COMPILE_S         30 min  a case's child from its start until compiled and initialised
                              (imports, trace and lower, the XLA compile, init)
    TIMED_S           10 min  a case's child from its turn (GO) until its row (warmup,
                              timed windows, GPU window, profile)
    PROBE_S            5 min  the device probe (import jax, start the backend)
    LOADER_REPEAT_S   30 min  a loader repeat (imports, workers' start, warmup, timed batches)
    EXIT_GRACE_S      10 s    a child that closed its channel or sent its last message, to exit

Out of memory: a child is the kernel's first choice when memory runs out (ToParent raises
its oom_score_adj), so the run, which holds every row, lives on. A child that died while
the kernel's OOM killer ran (its count in /proc/vmstat rose: the child got SIGKILL, or a
worker of its did), or whose last line is an allocation failure (OUT_OF_MEMORY:
std::bad_alloc, MemoryError, ENOMEM, RESOURCE_EXHAUSTED), fails with an error that begins
"out of memory in <phase>: " (ChildOutOfMemory).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

from dew.bench.common.errors import one_line
from dew.bench.runtime.lifeline import exit_with

COMPILE_S = 30 * 60.0
TIMED_S = 10 * 60.0
PROBE_S = 5 * 60.0
LOADER_REPEAT_S = 30 * 60.0
EXIT_GRACE_S = 10.0

CHANNEL = "DEW_CHANNEL"  # a spawned child's environment: "<fd of its end> <the run's pid>"
ERROR_CHARS = 300  # of the last line a dead child wrote, kept in the error
POLL_S = 1.0  # how often a wait looks at the child when the kernel has no pidfd for it
LONGEST_WAIT_S = 3600.0  # the longest single wait: the OS calls overflow far beyond it
OOM_SCORE_ADJ = 500  # a child's: ended before the run (0) when memory runs out
# An allocation that failed, as the last line of a child says it (glibc's ENOMEM is 12).
OUT_OF_MEMORY = re.compile(
    r"bad_alloc|MemoryError|RESOURCE_EXHAUSTED|Resource exhausted|Cannot allocate memory"
    r"|out of memory|\bENOMEM\b|mmap error: 12\b",
    re.IGNORECASE,
)
# A stack trace's frame or banner (abseil's, glog's), never the line that says what failed.
STACK_LINE = re.compile(r"^(@\s|\*\*\* |PC: @)")


@dataclasses.dataclass(frozen=True)
class Message:
    """A message kind: subclass it as a frozen dataclass of JSON fields; its tag is its
    class name."""


def encode(message: Message) -> bytes:
    fields = as_json(message)
    return json.dumps({"kind": type(message).__name__, "fields": fields}, default=_plain).encode()


def as_json(message: Message) -> dict[str, Any]:
    """A message's fields by name; a typed one's (a pydantic dataclass) as plain JSON."""
    if (typed := getattr(message, "__pydantic_serializer__", None)) is not None:
        return typed.to_python(message, mode="json")
    return {field.name: getattr(message, field.name) for field in dataclasses.fields(message)}


def decode(payload: bytes, kinds: Sequence[type[Message]]) -> Message:
    """The message in `payload`, one of `kinds`; ValueError for anything else."""
    data = json.loads(payload)
    by_name = {kind.__name__: kind for kind in kinds}
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in by_name:
        raise ValueError(f"a {kind!r} message")
    try:  # a pydantic dataclass validates its fields here: ValidationError, a ValueError
        return by_name[kind](**data["fields"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"a malformed {kind!r} message ({one_line(error)})") from None


def _plain(value: Any) -> Any:
    """A numpy scalar (a parameter count, a FLOP figure) as the Python number it holds."""
    if callable(getattr(value, "item", None)):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# --- errors: one line each, naming the child, its phase and what was awaited -----------------


class ChildFailed(Exception):
    """A child that will not deliver what its parent waits for."""

    def __init__(self, child: str, phase: str, waiting_for: str, reason: str):
        super().__init__(f"{child} {reason}")
        self.child, self.phase, self.waiting_for = child, phase, waiting_for


class ChildTimedOut(ChildFailed):
    """Its deadline passed; it has been killed."""

    def __init__(self, child: str, phase: str, waiting_for: str, seconds: float):
        reason = f"timed out after {seconds:g} s in {phase}, waiting for {waiting_for}"
        super().__init__(child, phase, waiting_for, reason)
        self.seconds = seconds


class ChildExited(ChildFailed):
    """It died, exited or closed its channel before sending what was awaited."""

    def __init__(
        self, child, phase, waiting_for, exit_code: int | None, last: str | None, closed=False
    ):
        if closed:
            reason = f"closed its channel and did not exit within {EXIT_GRACE_S:.0f} s: killed"
        elif exit_code is not None and exit_code < 0:
            reason = f"died of {signal.Signals(-exit_code).name}"
        else:
            reason = f"exited {exit_code}"
        if last:
            reason += f": {last[:ERROR_CHARS]}"
        super().__init__(child, phase, waiting_for, reason)
        self.exit_code, self.last_line = exit_code, last


class ChildOutOfMemory(ChildExited):
    """It died out of memory: the kernel's OOM killer ran meanwhile (it, or a worker of
    its, got SIGKILL), or an allocation failed."""

    def __init__(self, child, phase, waiting_for, exit_code, last, killer: bool):
        super().__init__(child, phase, waiting_for, exit_code, last)
        reason = str(self).removeprefix(f"{child} ")
        if killer:  # the kernel's OOM killer says so only in its own log
            note = "the kernel's OOM killer"
            if exit_code != -signal.SIGKILL:  # a worker of its, or another process
                note += " ended a process meanwhile"
            died, colon, said = reason.partition(": ")
            reason = f"{died} ({note}){colon}{said}"
        self.args = (f"out of memory in {phase}: {child} {reason}",)


def says_out_of_memory(text: str | None) -> bool:
    """Whether an error line says an allocation failed (OUT_OF_MEMORY)."""
    return bool(text) and OUT_OF_MEMORY.search(text) is not None


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has ended since boot (any memory cgroup
    included), or None where /proc/vmstat does not say."""
    try:
        with open("/proc/vmstat") as counters:
            for line in counters:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class UnexpectedMessage(ChildFailed):
    """It sent something else than what was awaited; it has been killed."""


# --- the child's end -------------------------------------------------------------------------


class ToParent:
    """A child's end of its channel: what it sends, what its parent tells it."""

    def __init__(self, connection: multiprocessing.connection.Connection, run_pid: int):
        self._connection = connection
        exit_with(run_pid)  # a kill -9 of the run ends this process too
        _first_to_end_out_of_memory()

    @classmethod
    def from_environment(cls) -> Self:
        """The end a spawned child inherited (`spawn`); a process started otherwise (by
        hand) exits with one line."""
        if CHANNEL not in os.environ:
            raise SystemExit(f"error: no {CHANNEL}: a child process of a dew run, not a command")
        fd, run_pid = os.environ.pop(CHANNEL).split()
        return cls(multiprocessing.connection.Connection(int(fd)), int(run_pid))

    def send(self, message: Message) -> None:
        self._connection.send_bytes(encode(message))

    def receive(self, *kinds: type[Message]) -> Message | None:
        """The parent's next message, as long as it takes; None once the parent has gone or
        sends anything but `kinds`."""
        try:
            return decode(self._connection.recv_bytes(), kinds)
        except (EOFError, OSError, ValueError):
            return None


def _first_to_end_out_of_memory() -> None:
    """Raise this process's oom_score_adj (OOM_SCORE_ADJ; raising it needs no privilege):
    when memory runs out the kernel ends a child, whose row then fails, not the run."""
    try:
        with open("/proc/self/oom_score_adj", "r+") as adj:
            if int(adj.read() or 0) < OOM_SCORE_ADJ:
                adj.seek(0)
                adj.write(str(OOM_SCORE_ADJ))
    except (OSError, ValueError):  # not Linux, or not allowed: the kernel's own choice
        pass


# --- the parent's end ------------------------------------------------------------------------


class Deadline:
    """`seconds` from its creation; one deadline may span several receives."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


class Child:
    """The parent's end: the child process (a multiprocessing Process or a subprocess
    Popen), its channel, and its log (the file its stdout and stderr go to, removed by
    `close` unless `keep_log`: a case's log kept beside its record, its warnings with it).
    `group`: the child leads its own process group, killed with it."""

    def __init__(
        self,
        name: str,
        process: multiprocessing.process.BaseProcess | subprocess.Popen,
        connection: multiprocessing.connection.Connection,
        *,
        log: str | None = None,
        keep_log: bool = False,
        group: bool = False,
    ):
        self.name, self.process, self.log, self.keep_log = name, process, log, keep_log
        self._connection, self._group, self._killed = connection, group, False
        self._oom_kills = oom_kills()  # the kernel's count at its start
        self._sentinel = getattr(process, "sentinel", None)  # a Process's: readable at its end
        self._pidfd = None
        if self._sentinel is None:
            try:
                self._sentinel = self._pidfd = os.pidfd_open(process.pid)
            except (AttributeError, OSError):  # not Linux 5.3 or later: POLL_S
                pass

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, message: Message) -> bool:
        """Send `message`; False when the child has gone (a receive then says how)."""
        try:
            self._connection.send_bytes(encode(message))
            return True
        except OSError:
            return False

    def receive(
        self,
        *kinds: type[Message],
        phase: str,
        deadline: Deadline | float,
        waiting_for: str | None = None,
    ) -> Message:
        """The child's next message, one of `kinds`, before `deadline` (seconds from now,
        or a Deadline); else a ChildFailed naming the child, `phase` and `waiting_for`."""
        deadline = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
        waiting_for = waiting_for or " or ".join(kind.__name__ for kind in kinds)
        while True:
            try:
                if self._ready(deadline):
                    payload = self._connection.recv_bytes()
                    break
            except (EOFError, OSError):  # it closed its end (its exit), or this end is closed
                raise self._exited(phase, waiting_for) from None
            if self.exit_code() is not None and not self._connection.poll(0):
                raise self._exited(phase, waiting_for)
            if not deadline.left():
                self.kill()
                raise ChildTimedOut(self.name, phase, waiting_for, deadline.seconds)
        try:
            return decode(payload, kinds)
        except ValueError as error:
            self.kill()
            reason = f"sent {error} in {phase}, waiting for {waiting_for}"
            raise UnexpectedMessage(self.name, phase, waiting_for, reason) from None

    def _ready(self, deadline: Deadline) -> bool:
        """Whether a message (or the end of the channel) is there: waits until one is, the
        child ends, or the deadline passes."""
        if self._sentinel is None:
            return self._connection.poll(min(deadline.left(), POLL_S))
        # At most an hour a wait (the caller's loop waits again): a deadline of years (a
        # huge --steps or --case-timeout) is more than poll() and select() can take.
        waited = multiprocessing.connection.wait(
            [self._connection, self._sentinel], min(deadline.left(), LONGEST_WAIT_S)
        )
        return self._connection in waited or self._connection.poll(0)

    def exit_code(self, wait_s: float | None = 0) -> int | None:
        """Its exit status once it has ended (waiting up to `wait_s`, None: as long as it
        takes), else None."""
        if isinstance(self.process, subprocess.Popen):
            try:
                return self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                return None
        self.process.join(wait_s)
        return self.process.exitcode

    def _exited(self, phase: str, waiting_for: str) -> ChildExited:
        code = self.exit_code(0 if self._killed else EXIT_GRACE_S)
        closed = code is None
        if closed:  # alive, its channel closed: it can say nothing more
            self.kill()
            code = self.exit_code()
        last = last_line(self.log)
        # The OOM killer's SIGKILL looks like any other; the kernel's count tells them apart.
        killer = not closed and self._oom_killer_ran()
        if killer or says_out_of_memory(last):
            return ChildOutOfMemory(self.name, phase, waiting_for, code, last, killer)
        return ChildExited(self.name, phase, waiting_for, code, last, closed)

    def _oom_killer_ran(self) -> bool:
        """Whether the kernel's OOM killer ended a process since this child started."""
        now = oom_kills()
        return None not in (now, self._oom_kills) and now > self._oom_kills

    def finish(self) -> int | None:
        """Its exit status once it has sent its last message (killed when it lingers)."""
        code = self.exit_code(EXIT_GRACE_S)
        if code is None:
            self.kill()
            code = self.exit_code()
        return code

    def hang_up(self) -> None:
        """Close the parent's end of the channel: a child waiting for its next message reads
        the end and leaves (a holder of the chip between rounds)."""
        self._connection.close()

    def kill(self) -> None:
        """Kill it (and its process group) and reap it."""
        self._killed = True
        try:
            if self._group:  # its group outlives it while a member (a worker) lives
                os.killpg(self.process.pid, signal.SIGKILL)
            elif self.exit_code() is None:
                self.process.kill()
        except (ProcessLookupError, PermissionError):  # none is left
            pass
        self.exit_code(None)

    def close(self) -> None:
        """Release the channel and the log (removed unless kept); the child must have ended
        (`kill`, `finish`)."""
        self._connection.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.log is not None and not self.keep_log:
            try:
                os.unlink(self.log)
            except FileNotFoundError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.kill()
        self.close()


def spawn(name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Child:
    """Start `argv` as a child with a channel (ToParent.from_environment in it), in its own
    process group, its stdin empty, its stdout and stderr to its log."""
    mine, theirs = multiprocessing.Pipe()  # a socket pair: both ways
    environment = dict(os.environ if env is None else env)
    environment[CHANNEL] = f"{theirs.fileno()} {os.getpid()}"
    descriptor, log = tempfile.mkstemp(prefix="dew-child-", suffix=".log")
    try:
        process = subprocess.Popen(
            list(argv),
            env=environment,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=descriptor,
            stderr=descriptor,
            start_new_session=True,
        )
    except BaseException:
        mine.close()
        os.unlink(log)
        raise
    finally:
        os.close(descriptor)
        theirs.close()  # the child holds it: its exit is this end's end of file
    return Child(name, process, mine, log=log, group=True)


def last_line(path: str | None) -> str | None:
    """The last line of a child's log that says something (the error of a child that
    died): empty lines and a stack trace's frames are passed over."""
    if path is None:
        return None
    try:
        with open(path, "rb") as output:
            output.seek(max(0, os.path.getsize(path) - 64 * 1024))
            lines = output.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    lines = [line.strip() for line in lines if line.strip()]
    said = [line for line in lines if not STACK_LINE.match(line)]
    return (said or lines)[-1] if lines else None
