"""dew's error style, for every entry point and helper: bad input is one `UsageError` line,
`<prog>: error: <message>`, and one exit code per meaning.

    0    ok
    1    a case failed, or a comparison found a change; an output could not be written
    2    bad input: a flag, a value, a path, a file that is not what it should be, or an
         output another run is writing
    130  stopped by SIGINT (Ctrl-C), 143 by SIGTERM: 128 + the signal, as a shell reports it

Faults that are not bad input end the same way, in one line: a write that fails
(`WriteFailed`, exit 1) and a stop signal (`Interrupted`), both handled by `faults`.

Standard library only at the top (pydantic is imported where a pydantic error is read), so
the schema and the noxfile's helpers can raise and print through it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from dew.flags import flag

EXIT_OK, EXIT_CHANGED, EXIT_USAGE = 0, 1, 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
MAX_LINE = 400  # an XLA or pydantic message runs to pages; a line is enough to act on
# (dew's own UsageError lines are not cut: their paths may be long, their ends say what to do)


class UsageError(ValueError):
    """Bad input (a flag, a value, a path, a file): one line on stderr, exit 2."""


# The most a count flag (steps, warmup, repeats, batch, rounds) takes: the optimizer's step
# counter and XLA's loop counters are 32-bit integers.
MAX_COUNT = 2**31 - 1


def check_count(name: str, value: int, least: int) -> None:
    """A count flag's value in [least, MAX_COUNT]; else UsageError naming the flag."""
    if value < least:
        raise UsageError(f"{flag(name)} must be at least {least} (got {value})")
    if value > MAX_COUNT:
        raise UsageError(f"{flag(name)} must be at most {MAX_COUNT:,} (got {value:,})")


def one_line(error: BaseException, *, flags: bool = False, typed: bool = False) -> str:
    """An error as one line: a pydantic error's first problem with where it is, else the
    type and first line of the message (XLA's run to pages). dew's own UsageError and an
    OS error say what and where without their type, unless `typed`: an error a user's
    code raised keeps its type, whatever it is (`FileNotFoundError: ...`). With `flags`,
    a pydantic location is spelled as the flag a user typed (`--data.image-size`)."""
    import pydantic  # in every dew environment; imported here to keep the top stdlib-only

    if isinstance(error, pydantic.ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")  # pydantic's wrapper of a raise
        if flags and where:
            text = f"{flag(where)}: {message}"
        else:
            text = f"invalid {error.title}{'.' + where if where else ''}: {message}"
        if "input" in first and first["type"] not in ("missing", "extra_forbidden"):
            text += f" (got {first['input']!r})"
    elif isinstance(error, UsageError | OSError | UnicodeDecodeError) and not typed:
        text = first_line(str(error)) or type(error).__name__
        if isinstance(error, UsageError):
            # dew's own line, read whole: its paths (under a long TMPDIR) must not cut off
            # what to do; a foreign message inside it went through one_line already
            return text
    else:
        message = first_line(str(error))
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def stdout_closed() -> int:
    """What a command returns when its reader went away (`dew compare ... | head`): no
    traceback; stdout pointed at /dev/null so that the flush at exit cannot raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CHANGED


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def say(prog: str, message: str) -> None:
    """One line on stderr in the shared format."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)


# --- faults: a write that fails, a stop signal ------------------------------------------------


class WriteFailed(Exception):
    """An output could not be written (a full disk, a quota, an I/O error): one line naming
    the path and the OS error, then what was kept; exit 1. What was on disk stays as it was
    before the write (dew.bench.common.files.atomic_write)."""

    def __init__(self, path: str | os.PathLike, error: OSError, kept: str = ""):
        super().__init__(f"cannot write {path}: {os_error(error)}" + (f"; {kept}" if kept else ""))
        self.path, self.error = path, error


def os_error(error: OSError) -> str:
    """`[Errno 28] No space left on device`: the error without the file it names (a
    temporary file's name says nothing to the user; the caller names the output)."""
    if error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return first_line(str(error)) or type(error).__name__


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived: raised in the main thread, so every `finally` and context
    manager on the way out runs (children killed, temporary files removed). A
    BaseException, like KeyboardInterrupt, so that no `except Exception` swallows it.
    `message` says what the run kept; the code that knows sets it on the way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.message = "interrupted"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While inside: the first SIGTERM or SIGINT raises Interrupted in the main thread; a
    later one is ignored, so the way out (killing children, stopping the forkserver) is
    not cut short. The handlers before are restored after. Off the main thread (a test
    calling an entry point from a thread) signals stay as they were."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def handler(signum: int, frame) -> None:
        if not arrived:
            arrived.append(signum)
            raise Interrupted(signum)

    before = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, previous in before.items():
            signal.signal(number, previous)


def faults(prog: str, body: Callable[[], int]) -> int:
    """Run an entry point's body (cli.run's) under stop_signals: a stop signal is one line,
    `<prog>: error: interrupted: ...`, and exit 128 + its number; a failed write one line
    and exit 1. Never a traceback."""
    try:
        with stop_signals():
            return body()
    except Interrupted as stop:
        say(prog, stop.message)
        return stop.exit_code
    except WriteFailed as failure:
        say(prog, str(failure))
        return EXIT_CHANGED
