"""A case's child process (dew.bench.sweep.case_process): forked from multiprocessing's forkserver
with the run's environment, and gone with the run, also after a kill -9; one that hangs
past its deadline is killed and its row fails, as does one that dies, and the sweep goes on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from infra.processes import gone

# The run: one case's child started, its pid printed, then nothing until it is killed.
RUN = """
import time
from dew.bench.sweep.case_process import CaseProcess
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
options = Options(preset="cpu-smoke", mesh={"fsdp": 8, "min_shard_size": 256},
                  compilation_cache_dir="off")
child = CaseProcess(Case(architecture="simple_dit", batch=8), options)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_run_leaves_neither_its_case_process_nor_the_server():
    run = subprocess.Popen([sys.executable, "-c", RUN], stdout=subprocess.PIPE, text=True)
    try:
        child = int(run.stdout.readline())
        server = psutil.Process(child).ppid()
        assert server != run.pid and psutil.Process(server).ppid() == run.pid
        assert not gone(child)  # compiling its case
    finally:
        run.kill()
        run.wait()
    deadline = time.monotonic() + 30
    while not (gone(child) and gone(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), "the case's process outlived the run"
    assert gone(server), "the forkserver outlived the run"


# --- deadlines and deaths (dew.bench.runtime.protocol): a failed row each, the sweep goes on --


def _case_options(tmp_path, **overrides):
    from dew.bench.sweep.settings import Options

    base = dict(preset="cpu-smoke", steps=1, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256})
    # One cache for the module's compiles: after the first, a case loads its executable.
    return Options(**{**base, "compilation_cache_dir": str(tmp_path), **overrides})


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def _watchdog(pid: int, seconds: float = 120) -> threading.Timer:
    """Kill `pid` after `seconds`: a deadline that does not work fails a test (a death, not
    a timeout), never hangs it."""

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own: nothing to do
            os.kill(pid, signal.SIGKILL)

    timer = threading.Timer(seconds, kill)
    timer.daemon = True
    timer.start()
    return timer


def test_a_case_stopped_in_its_compile_is_killed_at_its_deadline_and_its_row_fails(cache):
    from dew.bench.sweep.case_process import CaseProcess
    from dew.bench.sweep.presets import Case

    start = time.monotonic()  # its deadline runs from its start
    child = CaseProcess(Case(architecture="simple_dit", batch=8), _case_options(cache), compile_s=3)
    os.kill(child.pid, signal.SIGSTOP)  # a hang: it will never report
    watchdog = _watchdog(child.pid)
    assert child.wait() is False
    watchdog.cancel()
    assert 3 <= time.monotonic() - start < 30
    row = child.go()
    assert row.status == "failed"
    assert row.error == (
        "the case's process timed out after 3 s in compile, waiting for its compiled step"
    )
    assert gone(child.pid), "the timed-out case's process lives on"


def test_a_case_past_its_timed_deadline_or_dead_keeps_what_it_compiled(cache):
    from dew.bench.sweep.case_process import CaseProcess
    from dew.bench.sweep.presets import Case

    case = Case(architecture="simple_dit", batch=8)
    stopped = CaseProcess(case, _case_options(cache), timed_s=2)
    killed = None
    try:
        assert stopped.wait()
        killed = CaseProcess(case, _case_options(cache))  # loads what `stopped` compiled
        assert killed.wait()
        os.kill(stopped.pid, signal.SIGSTOP)  # stops in its timed windows
        os.kill(killed.pid, signal.SIGKILL)  # dies there (the OOM killer)
        watchdog = _watchdog(stopped.pid)
        row = stopped.go()
        watchdog.cancel()
        assert row.status == "failed" and row.params and row.gflop_per_step
        assert row.error == "the case's process timed out after 2 s in timing, waiting for its row"
        assert gone(stopped.pid)
        row = killed.go()
        assert row.status == "failed" and row.params
        assert row.error.startswith("the case's process died of SIGKILL"), row.error
    finally:
        stopped.kill()
        if killed is not None:
            killed.kill()


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_the_sweep_goes_on_after_a_case_past_its_deadline(cache, monkeypatch):
    """The round scheduler (waves.run_round): the first case stops in its compile and fails
    at its deadline; the second is measured."""
    from dew.bench.runtime.progress import SilentProgress
    from dew.bench.sweep import executors
    from dew.bench.sweep.case_process import CaseProcess
    from dew.bench.sweep.presets import Case

    class FirstHangs(CaseProcess):
        started = 0

        def __init__(self, case, options):
            first = FirstHangs.started == 0
            FirstHangs.started += 1
            super().__init__(case, options, compile_s=3 if first else 600)
            if first:
                os.kill(self.pid, signal.SIGSTOP)
                _watchdog(self.pid)

    monkeypatch.setattr(executors, "CaseProcess", FirstHangs)
    cases = [Case(architecture="simple_dit", batch=8), Case(architecture="uvit", batch=8)]
    isolated = executors.Isolated(_case_options(cache), SilentProgress())
    results = isolated.round(list(enumerate(cases)), 0, lambda: None)
    rows = {result.position: result.row for result in results}
    assert rows[0].status == "failed" and "timed out after 3 s in compile" in rows[0].error
    assert rows[1].status == "ok", rows[1].error
