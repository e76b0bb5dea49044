"""Each case in its own child process (`python -m dew.bench.isolation`).

The allocator peak then belongs to that row alone (it only rises within a process), and a
crash, an abort or RESOURCE_EXHAUSTED fails that row only. The parent never initialises a
JAX backend, so it holds no device memory the children need.

The conversation with a child, on its stdin and stdout: the parent writes the job (one JSON
line); the child imports, builds, compiles and initialises the case, prints what it knows
after COMPILED_MARKER (so a child that dies later still reports its params and GFLOP) and
waits; the parent writes GO when the case's turn to be timed has come (dew.bench.waves
compiles several at once and times one at a time); the child times it and prints its row
after ROW_MARKER.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from dew.bench.case_run import make_row, run_case
from dew.bench.phases import PhaseClock
from dew.bench.presets import Case
from dew.bench.schema import StepRow
from dew.bench.settings import Options, append_xla_flags

ROW_MARKER = "DEW_STEP_ROW "  # prefix of the line a child prints its row on
COMPILED_MARKER = "DEW_STEP_COMPILED "  # ... the figures it had once compiled and initialised
GO = "go\n"  # what the parent writes when the child's turn to be timed has come
STDERR_TAIL = 40  # lines of a child's stderr kept for the error of a failed row


def child_environment(options: Options) -> dict[str, str]:
    env = dict(os.environ)
    append_xla_flags(env, options.xla_flags)
    return env


class CaseProcess:
    """A case's child process, driven in two steps, so that a sweep can compile several
    cases at once and time one at a time (dew.bench.waves):

        child = CaseProcess(case, options)   # starts: imports, lowers, compiles, inits
        child.wait_ready()                   # True once compiled, False if it ended early
        row = child.go()                     # its turn: warmup, timed windows, its row

    A child that dies at any point is a failed row, with what it reported before (params,
    GFLOP, compile s) and the last line of its stderr.
    """

    def __init__(self, case: Case, options: Options):
        self.case = case
        self.compiled: dict[str, Any] = {}
        self.row: StepRow | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        job = {"case": case.model_dump(), "options": dataclasses.asdict(options)}
        job["parent_pid"] = os.getpid()
        # The spawn time rides on the command line: the child's "imports" phase starts here.
        argv = [sys.executable, "-m", "dew.bench.isolation", repr(time.time())]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_environment(options),
        )
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self._send(json.dumps(job) + "\n")

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> bool:
        """Block until the child is compiled and waits for its turn (True), or has ended
        (False: its row, failed or compile-only, is then in `self.row` after `go()`)."""
        return self._read_until(COMPILED_MARKER)

    def go(self) -> StepRow:
        """Let a ready child time its case; return its row once it exits."""
        if self.row is None:
            self._send(GO)
            self._read_until(ROW_MARKER)
        return self._finish()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def _send(self, text: str) -> None:
        try:
            self.process.stdin.write(text)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):  # it died: its exit status says how
            pass

    def _read_until(self, marker: str) -> bool:
        for line in self.process.stdout:
            if line.startswith(ROW_MARKER):
                self.row = StepRow.model_validate_json(line[len(ROW_MARKER) :])
                return marker == ROW_MARKER
            if line.startswith(COMPILED_MARKER):
                self.compiled = json.loads(line[len(COMPILED_MARKER) :])
                if marker == COMPILED_MARKER:
                    return True
        return False  # end of its output: it exited (or died)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            if line.strip():
                self._stderr.append(line.strip())

    def _finish(self) -> StepRow:
        code = self.process.wait()
        self._drain.join(timeout=5)
        if self.row is not None:
            return self.row
        if code < 0:
            error = f"the case's process died of {signal.Signals(-code).name}"
        else:
            error = f"the case's process exited {code}"
        if self._stderr:
            error += f": {self._stderr[-1][:300]}"
        # It died mid-case: keep what it measured before (params, GFLOP, compile s).
        return make_row(self.case, self.compiled, status="failed", error=error)


def die_with_parent(parent_pid: int) -> None:
    """A `kill -9` of the sweep must not leave a child computing (and holding the GPU).

    Called by the child itself, first thing: no preexec_fn, which would fork a parent that
    may already run threads.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the child outlives a killed parent
        return
    if os.getppid() != parent_pid:  # the parent died before the call above
        os._exit(1)


def child_main(spawned: float | None = None) -> int:
    """Entry of the child process: a job line on stdin; once compiled, the figures after
    COMPILED_MARKER, then wait for GO on stdin; the row on stdout after ROW_MARKER."""
    # The cycle collector is off until the case is compiled: imports, tracing and lowering
    # make millions of objects and no garbage worth a pass (4% of unet_2d_condition's CPU
    # time to there); it is on again for the timed windows, as in any training loop.
    gc.disable()
    clock = PhaseClock()
    import dew.train.trainer  # noqa: F401  jax, flax, optax: counted in the imports phase

    if spawned is not None:
        clock.add("imports", spawned, time.time() - spawned)
    job = json.loads(sys.stdin.readline())
    die_with_parent(job["parent_pid"])

    def report_compiled(figures: dict[str, Any]) -> None:
        gc.enable()
        sys.stdout.write("\n" + COMPILED_MARKER + json.dumps(figures) + "\n")
        sys.stdout.flush()
        if sys.stdin.readline() != GO:  # the parent gave up on this case (or died)
            os._exit(0)

    options = Options(**job["options"])
    row = run_case(Case.model_validate(job["case"]), options, report_compiled, clock)
    sys.stdout.write("\n" + ROW_MARKER + row.model_dump_json() + "\n")
    sys.stdout.flush()
    # Nothing is left to do: skip the interpreter's and JAX's teardown (a second or more).
    os._exit(0)


if __name__ == "__main__":
    sys.exit(child_main(float(sys.argv[1]) if len(sys.argv) > 1 else None))
