"""Each case in its own child process (`python -m dew.bench.isolation`).

The allocator peak then belongs to that row alone (it only rises within a process), and a
crash, an abort or RESOURCE_EXHAUSTED fails that row only. The parent never initialises a
JAX backend, so it holds no device memory the children need. The child reads its job on
stdin and prints its row after ROW_MARKER (and what it had after the compile after
COMPILED_MARKER, so a child that dies mid-case still reports its params and GFLOP).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from typing import Any

from dew.bench.case_run import make_row, run_case
from dew.bench.presets import Case
from dew.bench.schema import StepRow
from dew.bench.settings import Options, append_xla_flags

ROW_MARKER = "DEW_STEP_ROW "  # prefix of the line a child prints its row on
COMPILED_MARKER = "DEW_STEP_COMPILED "  # ... and the figures it had after the compile


def child_environment(options: Options) -> dict[str, str]:
    env = dict(os.environ)
    append_xla_flags(env, options.xla_flags)
    return env


def run_case_isolated(case: Case, options: Options) -> StepRow:
    """One case in a child process; a crash of the child is a failed row, not a failed run."""
    job = json.dumps(
        {
            "case": case.model_dump(),
            "options": dataclasses.asdict(options),
            "parent_pid": os.getpid(),
        }
    )
    process = subprocess.run(
        [sys.executable, "-m", "dew.bench.isolation"],
        input=job,
        capture_output=True,
        text=True,
        env=child_environment(options),
    )
    compiled: dict[str, Any] = {}
    for line in process.stdout.splitlines():
        if line.startswith(ROW_MARKER):
            return StepRow.model_validate_json(line[len(ROW_MARKER) :])
        if line.startswith(COMPILED_MARKER):
            compiled = json.loads(line[len(COMPILED_MARKER) :])
    if process.returncode < 0:
        error = f"the case's process died of {signal.Signals(-process.returncode).name}"
    else:
        error = f"the case's process exited {process.returncode}"
    last = [line for line in process.stderr.splitlines() if line.strip()]
    if last:
        error += f": {last[-1].strip()[:300]}"
    # The process died mid-case: keep what it measured before (params, GFLOP, compile s).
    return make_row(case, compiled, status="failed", error=error)


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


def child_main() -> int:
    """Entry of the child process: a job on stdin, the row on stdout after ROW_MARKER."""
    job = json.loads(sys.stdin.read())
    die_with_parent(job["parent_pid"])

    def report_compiled(figures: dict[str, Any]) -> None:
        sys.stdout.write("\n" + COMPILED_MARKER + json.dumps(figures) + "\n")
        sys.stdout.flush()

    options = Options(**job["options"])
    row = run_case(Case.model_validate(job["case"]), options, on_compiled=report_compiled)
    sys.stdout.write("\n" + ROW_MARKER + row.model_dump_json() + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
