"""A case's child process (dew.bench.sweep.case_process): forked from multiprocessing's forkserver
with the run's environment, and gone with the run, also after a kill -9."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

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


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_run_leaves_neither_its_case_process_nor_the_server():
    run = subprocess.Popen([sys.executable, "-c", RUN], stdout=subprocess.PIPE, text=True)
    try:
        child = int(run.stdout.readline())
        server = psutil.Process(child).ppid()
        assert server != run.pid and psutil.Process(server).ppid() == run.pid
        assert not _gone(child)  # compiling its case
    finally:
        run.kill()
        run.wait()
    deadline = time.monotonic() + 30
    while not (_gone(child) and _gone(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child), "the case's process outlived the run"
    assert _gone(server), "the forkserver outlived the run"
