"""Each case in its own child process, forked from a server that has imported JAX already.

The allocator peak then belongs to that row alone (it only rises within a process), and a
crash, an abort or RESOURCE_EXHAUSTED fails that row only. The parent never initialises a
JAX backend, so it holds no device memory the children need.

The children come from multiprocessing's forkserver, which imports jax, flax, optax and the
case code once (PRELOAD) and forks a child per case: a child starts in a few milliseconds,
where a fresh interpreter spent 1-2 s importing (26-36 s summed over a cold cpu-smoke
sweep). No JAX backend exists in the server, so every child still creates its own (its
devices, its XLA flags, its allocator peak), as a fresh process would. The server runs with
the children's environment (the allocator's LD_PRELOAD, XLA_FLAGS; JAX reads its JAX_*
variables at import), and is started again when a run's children need another.

The conversation with a child, over a pipe: the parent sends the job; the child builds,
compiles and initialises the case, sends what it knows then ("compiled": so a child that
dies later still reports its params and GFLOP) and waits; the parent sends GO when the
case's turn to be timed has come (dew.bench.sweep.waves compiles several at once and times one
at a time); the child times it and sends its row. The child's stdout and stderr go to a
file: the last line there is the error of a row whose process died.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from multiprocessing import forkserver
from typing import Any

from dew.bench.record.schema import StepRow
from dew.bench.runtime.lifeline import exit_with
from dew.bench.runtime.phases import PhaseClock
from dew.bench.sweep.case_run import make_row, run_case
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, append_xla_flags

PRELOAD = ("dew.train.trainer", "dew.bench.sweep.case_process")  # what the server imports once
GO = "go"  # what the parent sends when the child's turn to be timed has come
ERROR_CHARS = 300  # of the last line a dead child wrote, kept in its row's error

_server_environment: dict[str, str] | None = None  # the environment the server runs with


def child_environment(options: Options) -> dict[str, str]:
    env = dict(os.environ)
    append_xla_flags(env, options.xla_flags)
    return env


def forkserver_context(environment: Mapping[str, str]) -> multiprocessing.context.BaseContext:
    """multiprocessing's forkserver context, its server running with `environment` (started,
    or started again when it runs with another)."""
    global _server_environment
    context = multiprocessing.get_context("forkserver")
    if _server_environment == environment:
        return context
    stop_forkserver()
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environment)
    try:  # the server's environment is this process's when it starts
        context.set_forkserver_preload(list(PRELOAD))
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if _server_environment is None:
        atexit.register(stop_forkserver)
    _server_environment = dict(environment)
    return context


def stop_forkserver() -> None:
    """End the server, once its children have ended (at exit at the latest): only then are
    its children's CPU seconds (it waited for them) counted as this process's children's,
    as they were when this process started each case itself."""
    forkserver._forkserver._stop()


class CaseProcess:
    """A case's child process, driven in two steps, so that a sweep can compile several
    cases at once and time one at a time (dew.bench.sweep.waves):

        child = CaseProcess(case, options)   # starts: lowers, compiles, inits
        child.wait_ready()                   # True once compiled, False if it ended early
        row = child.go()                     # its turn: warmup, timed windows, its row

    A child that dies at any point is a failed row, with what it reported before (params,
    GFLOP, compile s) and the last line it wrote.
    """

    def __init__(self, case: Case, options: Options):
        self.case = case
        self.compiled: dict[str, Any] = {}
        self.row: StepRow | None = None
        context = forkserver_context(child_environment(options))
        descriptor, self._output = tempfile.mkstemp(prefix="dew-case-", suffix=".log")
        os.close(descriptor)
        # The start time rides with the job: the child's "imports" phase (its start) is
        # measured from here.
        job = {"case": case.model_dump(), "options": dataclasses.asdict(options)}
        job["spawned"], job["parent_pid"] = time.time(), os.getpid()
        self._connection, theirs = context.Pipe()
        self.process = context.Process(
            target=child_main, args=(job, theirs, self._output), daemon=True
        )
        self.process.start()
        theirs.close()  # the child holds the other end: its exit is our end of file

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> bool:
        """Block until the child is compiled and waits for its turn (True), or has ended
        (False: its row, failed or compile-only, is then in `self.row` after `go()`)."""
        return self._receive_until("compiled")

    def go(self) -> StepRow:
        """Let a ready child time its case; return its row once it exits."""
        if self.row is None:
            self._send(GO)
            self._receive_until("row")
        return self._finish()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self._close()

    def _send(self, message: str) -> None:
        try:
            self._connection.send(message)
        except OSError:  # it died: its exit status says how
            pass

    def _receive_until(self, kind: str) -> bool:
        while True:
            try:
                received, payload = self._connection.recv()
            except (EOFError, OSError):
                return False  # it exited (or died)
            if received == "row":
                self.row = StepRow.model_validate_json(payload)
                return kind == "row"
            self.compiled = payload
            if kind == "compiled":
                return True

    def _finish(self) -> StepRow:
        self.process.join()
        code = self.process.exitcode
        last = None if self.row is not None else _last_line(self._output)  # only a death's
        self._close()
        if self.row is not None:
            return self.row
        if code is not None and code < 0:
            error = f"the case's process died of {signal.Signals(-code).name}"
        else:
            error = f"the case's process exited {code}"
        if last:
            error += f": {last[:ERROR_CHARS]}"
        # It died mid-case: keep what it measured before (params, GFLOP, compile s).
        return make_row(self.case, self.compiled, status="failed", error=error)

    def _close(self) -> None:
        self._connection.close()
        try:
            os.unlink(self._output)
        except FileNotFoundError:
            pass


def _last_line(path: str) -> str | None:
    try:
        with open(path, "rb") as output:
            output.seek(max(0, os.path.getsize(path) - 64 * 1024))
            lines = output.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    lines = [line.strip() for line in lines if line.strip()]
    return lines[-1] if lines else None


def child_main(job: dict[str, Any], connection, output: str) -> None:
    """The child, forked from the server: the job's case, what it knows once compiled, then
    (after GO) its row, on `connection`; its stdout and stderr to the file `output`."""
    # The cycle collector is off until the case is compiled: tracing and lowering make
    # millions of objects and no garbage worth a pass (4% of unet_2d_condition's CPU time
    # to there). Then one pass, and the survivors frozen, still in the compile stage: the
    # first collections after a long pause would otherwise walk them all during the
    # warmup or a timed window.
    gc.disable()
    clock = PhaseClock()
    clock.add("imports", job["spawned"], time.time() - job["spawned"])
    written = os.open(output, os.O_WRONLY | os.O_APPEND)
    os.dup2(written, 1)
    os.dup2(written, 2)
    os.close(written)
    exit_with(job["parent_pid"])

    def report_compiled(figures: dict[str, Any]) -> None:
        gc.collect()
        gc.freeze()
        gc.enable()
        connection.send(("compiled", figures))
        try:
            go = connection.recv()
        except EOFError:  # the parent died
            go = None
        if go != GO:  # the parent gave up on this case (or died)
            _exit()

    options = Options(**job["options"])
    row = run_case(Case.model_validate(job["case"]), options, report_compiled, clock)
    connection.send(("row", row.model_dump_json()))
    # Nothing is left to do: skip the interpreter's and JAX's teardown (a second or more).
    _exit()


def _exit() -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
