"""A case out of host memory (issue 32): its row fails with an error that begins "out of
memory" and the sweep goes on; a loader repeat likewise. For real: a sweep and a loader
under a memory cgroup (the limit a container, SLURM or systemd sets: the kernel's OOM
killer ends the case's process with SIGKILL); a child whose allocation fails under an
address-space limit (`ulimit -v`); the last lines XLA writes when its allocation fails
(std::bad_alloc). Under `ulimit -v` a whole sweep is no test: XLA reserves most of its
address space when its backend starts, so a limit that fails a case's compile fails the
device probe's start about as often (refused in one line, exit 2)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from infra.memory_cgroup import memory_cgroup

from dew.bench.record.schema import read_run
from dew.bench.runtime import protocol
from dew.bench.sweep.case_run import failure

REPO = Path(__file__).resolve().parents[3]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py")]
DATA = [sys.executable, str(REPO / "tools" / "benchmark_data.py")]
SMOKE = ["--preset", "cpu-smoke", "--architectures", "simple_dit", "uvit"]
SMOKE += ["--compile-jobs", "1", "--steps", "2", "--warmup", "1", "--idle-check", "off"]
SMOKE += ["--compilation-cache-dir", "off"]
LIMIT = 600 * 1024**2  # the run's processes: ~250 MB before a case; a case's needs ~800 MB
KILLED = "the case's process died of SIGKILL (the kernel's OOM killer)"
# A loader configuration of 400 MB a batch (32 images of 2048 px), two repeats.
HUGE_BATCHES = "data:synthetic-images --data.num-records 64 --data.image-size 2048 --batch 32"
HUGE_BATCHES += " --steps 2 --warmup 1 --repeats 2 --data.loading.workers 0"
HUGE_BATCHES += " --data.loading.threads 0 --idle-check off"


# --- for real: a sweep and a loader run out of memory -----------------------------------------


@pytest.mark.slow  # two cases killed during their compiles, one after the other: ~15 s
def test_a_case_killed_for_memory_fails_its_row_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "run.json"
    with memory_cgroup(LIMIT) as cgroup:
        run = subprocess.run(
            [*cgroup.argv, *STEP, *SMOKE, "--json-out", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        left = cgroup.left()
    assert run.returncode == 1, run.stderr  # cases failed; the run itself lived on
    rows = read_run(out).rows
    assert [row.architecture for row in rows] == ["uvit", "simple_dit"]  # both were tried
    for row in rows:
        assert row.status == "failed"
        assert row.error.startswith("out of memory in compile: "), row.error
        log = out.parent / "run.logs" / f"{row.architecture}-1.log"  # kept and named
        assert row.error == f"out of memory in compile: {KILLED} (its log: {log})"
    print(f"\n{rows[0].error}")
    assert left == [], "a process of the run outlived it"


def test_a_loader_repeat_killed_for_memory_is_one_line(tmp_path):
    with memory_cgroup(LIMIT) as cgroup:
        run = subprocess.run(
            [*cgroup.argv, *DATA, *HUGE_BATCHES.split(), "--json-out", str(tmp_path / "d.json")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        left = cgroup.left()
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines() == [
        "tools/benchmark_data.py: error: repeat 1 of 2: out of memory in the repeat: the loader's "
        "process died of SIGKILL (the kernel's OOM killer)"
    ]
    assert not (tmp_path / "d.json").exists() and left == []


# --- what a child says: its last line --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hello(protocol.Message):
    """What the parent waits for, and a dying child never sends."""


CHILD = "from dew.bench.runtime.protocol import ToParent\nToParent.from_environment()\n"
# A real allocation that fails: 2 GiB under a 1 GiB address space (`ulimit -v`).
ALLOCATES = """
import resource
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, (1024**3, 1024**3))
np.ones(2 * 1024**3, np.uint8)
"""
# What XLA's process wrote when its allocation failed under `ulimit -v` (std::bad_alloc,
# then abseil's stack trace), before it aborted.
ABORTS = """
import os, sys
print("terminate called after throwing an instance of 'std::bad_alloc'", file=sys.stderr)
print("  what():  std::bad_alloc", file=sys.stderr)
print("*** SIGABRT received by PID 7 (TID 7) on cpu 0 from PID 7; stack trace: ***",
      file=sys.stderr)
print("    @     0x7f392c37050f  PyObject_Vectorcall", file=sys.stderr, flush=True)
os.abort()
"""


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (ABORTS, "the test child died of SIGABRT: what():  std::bad_alloc"),
        (ALLOCATES, "the test child exited 1: numpy._core._exceptions._ArrayMemoryError: "),
    ],
    ids=["bad_alloc", "MemoryError"],
)
def test_a_child_that_says_it_ran_out_fails_out_of_memory(body, error):
    command = [sys.executable, "-c", CHILD + body]
    with protocol.spawn("the test child", command) as child:
        with pytest.raises(protocol.ChildOutOfMemory) as raised:
            child.receive(Hello, phase="testing", deadline=60)
    assert str(raised.value).startswith(f"out of memory in testing: {error}"), raised.value


def test_a_child_is_the_first_the_kernel_ends_when_memory_runs_out():
    run_adj = Path("/proc/self/oom_score_adj").read_text()
    says = "print(open('/proc/self/oom_score_adj').read(), flush=True)\nraise SystemExit(3)"
    with protocol.spawn("the test child", [sys.executable, "-c", CHILD + says]) as child:
        with pytest.raises(protocol.ChildExited) as raised:
            child.receive(Hello, phase="testing", deadline=60)
    assert raised.value.last_line == str(protocol.OOM_SCORE_ADJ)
    assert Path("/proc/self/oom_score_adj").read_text() == run_adj  # the run's own stays


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (MemoryError(), "out of memory: MemoryError"),
        (
            RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes."),
            "out of memory: RuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
            "allocate 8 bytes.",
        ),
        (ValueError("heads 5 does not divide 64"), "ValueError: heads 5 does not divide 64"),
    ],
)
def test_a_case_that_fails_in_its_process_says_out_of_memory_first(error, line):
    assert failure(error) == line
