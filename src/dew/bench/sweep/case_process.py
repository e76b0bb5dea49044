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

The conversation with a child, dew.bench.runtime.conversation's over a pipe: the child
gets the job with its start; it builds, compiles and initialises the case, sends what it
knows then (Ready: so a child that dies later still reports its params and GFLOP) and
waits; the parent sends Go when the case's turn to be timed has come (dew.bench.sweep.waves
compiles several at once and times one at a time); the child times it and sends its row
(Result). Every wait of the parent has a deadline (dew.bench.sweep.settings
.case_deadlines: --case-timeout, or 30 min from the child's start to compile, 10 min per
100 steps from its Go to time): a child past it is killed and its row fails, "timed out
after N s in compile" (or timing), and the sweep goes on; `--resume` runs it again. The
child's stdout and stderr go to a file: the last line there is the error of a row whose
process died ("out of memory: ..." when the kernel's OOM killer ended it or an allocation
failed, dew.bench.runtime.protocol). With a record (--json-out) or --log-dir that file is
kept, `<case>-<n>.log` in the options' log_dir (n: the first number free there, so a
case's repeats, and a --resume's, number on), and its row names it (the repeat's `log`,
or the error of a failed row): the compiler's, ptxas', cuDNN's and the autotuner's
warnings of a run stay with it. Without one it is removed when the case ends.

A case may set XLA_PYTHON_CLIENT_PREALLOCATE for its own process (Case.xla_preallocate):
the server's children inherit its environment, so the child sets it in itself before its
JAX backend starts (the first use of a device, in the case); its row records the
allocator setting its process ran with (`xla_preallocate`, `xla_mem_fraction`).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from multiprocessing import forkserver
from typing import Any

from dew.bench.record.schema import StepRow
from dew.bench.runtime import protocol, sockets
from dew.bench.runtime.conversation import Go, Ready, Result
from dew.bench.runtime.phases import PhaseClock
from dew.bench.sweep.case_run import make_row, run_case
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, append_xla_flags, case_deadlines
from dew.bench.sweep.waves import move_log

PRELOAD = ("dew.train.trainer", "dew.bench.sweep.case_process")  # what the server imports once
NAME = "the case's process"  # in its row's error

_server_environment: dict[str, str] | None = None  # the environment the server runs with


PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
MEM_FRACTIONS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")  # jaxlib's order


def child_environment(options: Options) -> dict[str, str]:
    env = dict(os.environ)
    append_xla_flags(env, options.xla_flags)
    return env


def case_environment(case: Case) -> dict[str, str]:
    """What a case sets in its own process's environment, over the server's."""
    if case.xla_preallocate is None:
        return {}
    return {PREALLOCATE: "true" if case.xla_preallocate else "false"}


def allocator_fields(environ: Mapping[str, str]) -> dict[str, Any]:
    """The row's allocator setting, read as jaxlib's GPU client reads it (its
    generate_pjrt_gpu_plugin_options): preallocate unless 'false', 'False' or '0'; the
    memory fraction, None when unset or not a fraction."""
    fraction = next((environ[name] for name in MEM_FRACTIONS if environ.get(name)), None)
    try:
        value = float(fraction) if fraction is not None else None
    except ValueError:
        value = None
    return {
        "xla_preallocate": environ.get(PREALLOCATE, "") not in ("false", "False", "0"),
        "xla_mem_fraction": value if value is not None and 0 < value <= 1 else None,
    }


def forkserver_context(environment: Mapping[str, str]) -> multiprocessing.context.BaseContext:
    """multiprocessing's forkserver context, its server running with `environment` (started,
    or started again when it runs with another)."""
    global _server_environment
    context = multiprocessing.get_context("forkserver")
    if _server_environment == environment:
        return context
    stop_forkserver()
    sockets.for_multiprocessing()  # its socket in a short folder, whatever TMPDIR is
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
        child.wait()                         # True once compiled, False if it ended early
        row = child.go()                     # its turn: warmup, timed windows, its row

    A child that dies at any point is a failed row, with what it reported before (params,
    GFLOP, compile s) and the last line it wrote. So is one past its deadline, killed:
    `compile_s` from its start until compiled, `timed_s` from its turn until its row
    (default: the options' case_deadlines).
    """

    def __init__(
        self,
        case: Case,
        options: Options,
        *,
        compile_s: float | None = None,
        timed_s: float | None = None,
    ):
        default_compile_s, default_timed_s = case_deadlines(options)
        compile_s = default_compile_s if compile_s is None else compile_s
        timed_s = default_timed_s if timed_s is None else timed_s
        self.case = case
        self.compiled: dict[str, Any] = {}
        self.row: StepRow | None = None
        self.timed_s = timed_s
        self._failure: protocol.ChildFailed | None = None
        environment = child_environment(options)
        context = forkserver_context(environment)
        self._allocator = allocator_fields({**environment, **case_environment(case)})
        # The child writes to a temporary file, moved beside the record when the case ends:
        # a full or unwritable record disk must not cost the case its stderr.
        descriptor, output = tempfile.mkstemp(prefix="dew-case-", suffix=".log")
        os.close(descriptor)
        # The start time rides with the job: the child's "imports" phase (its start) is
        # measured from here.
        job = {"case": case.model_dump(), "options": dataclasses.asdict(options)}
        job["spawned"], job["parent_pid"] = time.time(), os.getpid()
        connection, theirs = context.Pipe()
        self.process = context.Process(target=child_main, args=(job, theirs, output), daemon=True)
        self._compile_deadline = protocol.Deadline(compile_s)
        self.process.start()
        theirs.close()  # the child holds the other end: its exit is our end of file
        self._log_dir = options.log_dir
        kept = bool(options.log_dir)
        self._child = protocol.Child(NAME, self.process, connection, log=output, keep_log=kept)
        self.log: str | None = None  # the kept log's path, once the case has ended

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self) -> bool:
        """Block until the child is compiled and waits for its turn (True), or has ended or
        passed its compile deadline (False: its row, failed or compile-only, is then in
        `self.row` after `go()`)."""
        message = self._receive(Ready, Result, phase="compile", deadline=self._compile_deadline)
        if isinstance(message, Ready):
            self.compiled = message.figures
            return True
        return False

    def go(self) -> StepRow:
        """Let a ready child time its case; return its row once it exits."""
        if self.row is None and self._failure is None:
            self._child.send(Go())
            self._receive(Result, phase="timing", deadline=self.timed_s)
        return self._finish()

    def kill(self) -> None:
        self._child.kill()
        self._child.close()
        self._keep_log()

    def _keep_log(self) -> str | None:
        """Move the ended case's log into the log directory (once); its name there, or None
        where it could not be moved (a full disk: it stays where it was written, `self.log`)."""
        if not self._log_dir or self.log is not None:
            return None
        self.log = self._child.log
        kept = move_log(self._child.log, self._log_dir, self.case)
        if kept is None:
            return None
        self.log = kept
        return os.path.basename(kept)

    def _receive(self, *kinds, phase: str, deadline) -> protocol.Message | None:
        """The child's next message; None when it failed (`self._failure` says how)."""
        waiting_for = "its row" if kinds == (Result,) else "its compiled step"
        try:
            message = self._child.receive(
                *kinds, phase=phase, deadline=deadline, waiting_for=waiting_for
            )
        except protocol.ChildFailed as failure:
            self._failure = failure
            return None
        if isinstance(message, Result):
            self.row = StepRow.model_validate(message.row)
        return message

    def _finish(self) -> StepRow:
        self._child.finish()
        self._child.close()
        row = self.row
        if row is None:
            # It died or timed out mid-case: keep what it measured before (params, GFLOP,
            # compile s), and the allocator setting it was started with.
            row = make_row(self.case, self.compiled, status="failed", error=str(self._failure))
            row = row.model_copy(update=self._allocator)
        return self._with_log(row)

    def _with_log(self, row: StepRow) -> StepRow:
        """The row naming its kept log: on its repeat (its name in the log directory), or
        at the end of a failed row's error. A log that cannot be moved into the log
        directory (a full disk) stays where it was written, and the row names that path."""
        if not self._log_dir:
            return row
        name = self._keep_log() or self.log
        if row.status != "ok":
            return row.model_copy(update={"error": f"{row.error} (its log: {self.log})"})
        if row.repeats:
            last = row.repeats[-1].model_copy(update={"log": name})
            return row.model_copy(update={"repeats": [*row.repeats[:-1], last]})
        return row


def child_main(job: dict[str, Any], connection, output: str) -> None:
    """The child, forked from the server: the job's case, Ready once compiled, then
    (after Go) Result with its row, on `connection`; its stdout and stderr to the file
    `output`."""
    # The cycle collector is off until the case is compiled: tracing and lowering make
    # millions of objects and no garbage worth a pass (4% of unet_2d_condition's CPU time
    # to there). Then one pass, and the survivors frozen, still in the compile stage: the
    # first collections after a long pause would otherwise walk them all during the
    # warmup or a timed window.
    gc.disable()
    clock = PhaseClock()
    clock.add("imports", job["spawned"], time.time() - job["spawned"], time.process_time())
    written = os.open(output, os.O_WRONLY | os.O_APPEND)
    os.dup2(written, 1)
    os.dup2(written, 2)
    os.close(written)
    parent = protocol.ToParent(connection, job["parent_pid"])  # gone with the run

    def report_compiled(figures: dict[str, Any]) -> None:
        gc.collect()
        gc.freeze()
        gc.enable()
        parent.send(Ready(figures))
        if parent.receive(Go) is None:  # the parent gave up on this case (or died)
            _exit()

    options = Options(**job["options"])
    case = Case.model_validate(job["case"])
    os.environ.update(case_environment(case))  # before the case starts the backend
    row = run_case(case, options, report_compiled, clock)
    row = row.model_copy(update=allocator_fields(os.environ))  # as this process had it
    parent.send(Result(row.model_dump(mode="json")))
    # Nothing is left to do: skip the interpreter's and JAX's teardown (a second or more).
    _exit()


def _exit() -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
