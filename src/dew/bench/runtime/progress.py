"""Live progress of a sweep: which case is in which phase, for how long, and when the stage ends.

A sweep (`dew.bench.sweep.run`) runs in stages, "compile" (several cases at once, in child
processes) then "time" (one case at a time). Its progress is an observer of the sweep's
events, `SilentProgress`'s interface: a stage begins (stage), a case enters a phase (set),
a case finishes or fails with its result line (finish), anything else worth a line (note),
the run ends (close). Three observers hear them: `SilentProgress` says nothing (a follower
host); `LogProgress` hands the lines to a function (plain lines, a test's list);
`Progress` shows them in one of two ways, picked from the stream it writes to:

- a terminal: a rich `Live` region under the permanent lines, a header (stage, done/total,
  elapsed, ETA) and one line per case still running or queued in the stage (its label, its
  phase, the seconds it has been in that phase). A finished case's result line, and every
  `note`, print above the region and stay; the region itself disappears on `close`;
- anything else (a CI log, a file, pytest's capture): plain lines and nothing else, no cursor
  codes and no colour: `[compile] 18 cases, 4 at a time` when a stage begins,
  `[compile 3/18] unet: compiling (ETA 1m20s)` whenever a case changes phase (3/18: its
  place in the stage), and the result lines exactly as given, so logs and tests keep
  reading them.

Both ways end a stage with one permanent line, `[compile] 18 done, 1 failed in 4m02s`.

The ETA of a stage is the mean duration of its finished cases times the cases left, over the
cases that run at once (never more than are left: the last two of a 4-wide stage take one
case's time, not half of it); "?" until a case has finished. The live header counts it down
between finishes. A case's duration runs from its
first phase after "queued" in the stage; one finished without any counts from the stage's
previous finish (or its start), which is right for a one-at-a-time stage.

Thread-safe: the compile stage reports from several threads. Every change happens under one
lock, and the live region renders an immutable snapshot of the state, so rich's refresh
thread never waits on that lock (it holds its own while rendering, and a print under ours
waits on its lock: two locks taken in both orders would deadlock).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Self, TextIO

QUEUED = "queued"


def format_duration(seconds: float | None) -> str:
    """Seconds as a short duration: "?" (unknown), "42s", "1m20s", "2h05m"."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def stage_eta(durations: Sequence[float], remaining: int, parallel: int = 1) -> float | None:
    """Seconds left in a stage: the mean finished duration x cases left / cases at once
    (at most as many at once as are left); None while no case has finished."""
    if remaining <= 0:
        return 0.0
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    return mean * remaining / max(1, min(parallel, remaining))


@dataclass
class _Case:
    """A case's place in the current stage."""

    phase: str = QUEUED
    phase_since: float = 0.0
    started: float | None = None  # its first phase after "queued" in this stage
    finished: bool = False


@dataclass(frozen=True)
class _Stage:
    name: str
    indices: tuple[int, ...]
    parallel: int
    started: float


@dataclass(frozen=True)
class _View:
    """What the live region draws: a snapshot, so rendering takes no lock."""

    stage: str
    done: int
    total: int
    failed: int
    started: float
    eta: float | None
    eta_at: float  # when `eta` was computed; the region counts it down from there
    # (label, phase, in it since; None: no time, the "+ N more" line), running first
    lines: tuple[tuple[str, str, float | None], ...]
    clock: Callable[[], float]

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        now = self.clock()
        eta = None if self.eta is None else max(0.0, self.eta - (now - self.eta_at))
        header = Text.assemble(
            (self.stage, "bold"),
            f"  {self.done}/{self.total} done",
            (f", {self.failed} failed" if self.failed else "", "red"),
            f"  elapsed {format_duration(now - self.started)}  ETA {format_duration(eta)}",
        )
        cases = Table.grid(padding=(0, 2))
        cases.add_column(no_wrap=True, overflow="ellipsis")  # label
        cases.add_column(no_wrap=True, overflow="ellipsis")  # phase
        cases.add_column(justify="right", no_wrap=True)  # seconds in the phase
        for label, phase, since in self.lines:
            style = "dim" if phase == QUEUED else ""
            cases.add_row(
                Text(f"  {label}", style=style), Text(phase, style=style),
                Text("" if since is None else format_duration(now - since), style=style),
            )  # fmt: skip
        return Group(header, cases)


class SilentProgress:
    """The events a sweep reports as it goes, heard and not said: the interface every
    observer of its progress has, and the one a follower host of a multi-process run has."""

    def stage(self, name: str, indices: Sequence[int], parallel: int = 1) -> None: ...

    def set(self, index: int, phase: str) -> None: ...

    def finish(self, index: int, line: str | None, ok: bool = True) -> None: ...

    def note(self, line: str) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class LogProgress(SilentProgress):
    """The result lines and notes, each handed to `log` as it comes (the stages and phases
    are not said): a sweep's progress where nothing is drawn."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log

    def finish(self, index: int, line: str | None, ok: bool = True) -> None:
        if line is not None:
            self.log(line)

    def note(self, line: str) -> None:
        self.log(line)


class Progress(SilentProgress):
    """The progress of a sweep over `labels` (one entry per case, index = its position).

    `live=None` draws a rich Live region when `stream` (default sys.stderr) is a terminal,
    plain lines otherwise; `live=True` draws it on any stream (a StringIO in the tests).
    `clock` is the time source (time.monotonic; the tests pass their own)."""

    def __init__(
        self,
        labels: Sequence[str],
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.labels = list(labels)
        self.stream = sys.stderr if stream is None else stream
        if live is None:  # a terminal that can move its cursor
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.live = live
        self._clock = clock
        self._lock = threading.RLock()
        self._stage: _Stage | None = None
        self._cases: dict[int, _Case] = {}
        self._durations: list[float] = []
        self._failed = 0
        self._last_finish = 0.0
        self._closed = False
        self._live = None
        self._view: _View | None = None  # what the live region draws, see _redraw
        if self.live:
            self._start_live()

    # --- the interface ------------------------------------------------------------------

    def stage(self, name: str, indices: Sequence[int], parallel: int = 1) -> None:
        """A new stage over these cases (all queued), `parallel` of them at a time."""
        with self._lock:
            for index in indices:
                self._check(index)
            now = self._clock()
            self._stage = _Stage(name, tuple(indices), max(1, parallel), now)
            self._cases = {index: _Case(phase_since=now) for index in indices}
            self._durations = []
            self._failed = 0
            self._last_finish = now
            at_once = f", {self._stage.parallel} at a time" if self._stage.parallel > 1 else ""
            if not self.live:
                self._write(f"[{name}] {len(indices)} cases{at_once}")
            self._redraw()

    def set(self, index: int, phase: str) -> None:
        """The case's current phase ("compiling", "timing", ... free text)."""
        with self._lock:
            case = self._case(index)
            if case.finished or phase == case.phase:
                return
            now = self._clock()
            case.phase, case.phase_since = phase, now
            if case.started is None and phase != QUEUED:
                case.started = now
            if not self.live:
                stage = self._stage
                position = f"{stage.indices.index(index) + 1}/{len(stage.indices)}"
                eta = format_duration(self._eta())
                self._write(f"[{stage.name} {position}] {self.labels[index]}: {phase} (ETA {eta})")
            self._redraw()

    def finish(self, index: int, line: str | None, ok: bool = True) -> None:
        """The case left the stage; `line`, its result, is printed exactly as given (None:
        nothing printed, e.g. a case compiled and waiting for its timed stage)."""
        with self._lock:
            case = self._case(index)
            now = self._clock()
            first = not case.finished
            if first:
                case.finished = True
                start = case.started if case.started is not None else self._last_finish
                self._durations.append(now - start)
                self._failed += not ok
                self._last_finish = now
            self._redraw()  # so the region drawn under the line already lacks the case
            if line is not None:
                self._print(line)
            stage = self._stage
            if first and all(self._cases[i].finished for i in stage.indices):
                failed = f", {self._failed} failed" if self._failed else ""
                took = format_duration(now - stage.started)
                self._print(f"[{stage.name}] {len(stage.indices)} done{failed} in {took}")

    def note(self, line: str) -> None:
        """Any other message, printed permanently."""
        with self._lock:
            self._print(line)

    def close(self) -> None:
        """Stop the live region (it disappears; the permanent lines stay). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._live is not None:
                self._live.stop()

    # --- the parts ------------------------------------------------------------------------

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self.labels):
            raise IndexError(f"case {index} is not one of the {len(self.labels)} cases")

    def _case(self, index: int) -> _Case:
        """The case's entry in the current stage. A case outside it joins it: a progress
        display must not end a benchmark over a bookkeeping slip."""
        self._check(index)
        if self._stage is None:
            self.stage("run", range(len(self.labels)))
        if index not in self._cases:
            stage = self._stage
            self._stage = _Stage(stage.name, (*stage.indices, index), stage.parallel, stage.started)
            self._cases[index] = _Case(phase_since=self._clock())
        return self._cases[index]

    def _eta(self) -> float | None:
        left = sum(not case.finished for case in self._cases.values())
        return stage_eta(self._durations, left, self._stage.parallel)

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def _print(self, line: str) -> None:
        if self._live is None:
            self._write(line)
            return
        from rich.text import Text

        # A Text: no markup, no emoji codes, no highlighting; soft_wrap: no inserted breaks.
        self._live.console.print(Text(line), soft_wrap=True, highlight=False)

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self.stream, force_terminal=True)
        # Redirect print() to above the region only when the region owns a standard stream.
        ours = self.stream in (sys.stdout, sys.stderr)
        self._live = Live(
            console=console, transient=True, refresh_per_second=4,
            redirect_stdout=ours, redirect_stderr=ours, get_renderable=self._render,
        )  # fmt: skip
        self._live.start()

    def _render(self):
        from rich.text import Text

        view = self._view  # one attribute read: the snapshot, no lock
        return Text("") if view is None else view

    def _redraw(self) -> None:
        """A new snapshot for the region, drawn now: the header, then the running and queued
        cases (the queued summed up in one line when the terminal is too short for them)."""
        if self._live is None or self._closed:
            return
        stage = self._stage
        now = self._clock()
        left = [(i, self._cases[i]) for i in stage.indices if not self._cases[i].finished]
        rows = [(self.labels[i], c.phase, c.phase_since) for i, c in left if c.phase != QUEUED]
        waiting = [(self.labels[i], QUEUED, c.phase_since) for i, c in left if c.phase == QUEUED]
        room = max(3, self._live.console.size.height - 2 - len(rows))
        if len(waiting) > room:
            more = (f"+ {len(waiting) - room + 1} more", QUEUED, None)
            waiting = [*waiting[: room - 1], more]
        done = sum(case.finished for case in self._cases.values())
        self._view = _View(
            stage.name, done, len(stage.indices), self._failed, stage.started,
            self._eta(), now, (*rows, *waiting), self._clock,
        )  # fmt: skip
        self._live.refresh()
