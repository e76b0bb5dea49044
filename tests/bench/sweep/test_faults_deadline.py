"""A hung case (issue 32): `--case-timeout SECONDS` on tools/benchmark_step.py is the
deadline of each phase of a case's process; past it the process is killed, its row fails
"timed out after N s in compile", the sweep goes on, and `--resume` runs the row again.
Without the flag, the deadlines are generous and derived from the phase and the host
(dew.bench.sweep.settings.case_deadlines)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from infra.processes import gone

from dew.bench.record.schema import read_run
from dew.bench.runtime import hostprobe, protocol
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, case_deadlines, settings_record

REPO = Path(__file__).resolve().parents[3]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py")]
SMOKE = ["--preset", "cpu-smoke", "--architectures", "simple_dit", "--compile-jobs", "1"]
SMOKE += ["--steps", "2", "--warmup", "1", "--idle-check", "off"]
SMOKE += ["--compilation-cache-dir", "off"]  # a real compile, never one read from a cache


def test_the_default_deadlines_are_generous_and_grow_with_the_work():
    smoke = Options(preset="cpu-smoke", compile_jobs=1)
    assert case_deadlines(smoke) == (protocol.COMPILE_S, protocol.TIMED_S) == (1800, 600)
    # The small preset on a GPU: one compile job, 100 steps: 30 min to compile, whereas the
    # slowest compile of the published tables is 50.4 s (RTX 4080).
    assert case_deadlines(Options(preset="small", compile_jobs=1)) == (1800, 600)
    # More steps take longer to time; more compile jobs than cores share the cores.
    assert case_deadlines(dataclasses.replace(smoke, steps=1000))[1] == 6000
    crowded = dataclasses.replace(smoke, compile_jobs=4 * hostprobe.cores())
    assert case_deadlines(crowded)[0] == 4 * 1800


def test_case_timeout_sets_every_phase_and_is_kept_in_the_record():
    options = Options(preset="cpu-smoke", case_timeout=20.0)
    assert case_deadlines(options) == (20.0, 20.0)
    settings = settings_record(options, [Case(architecture="simple_dit", batch=8)])
    assert settings.options["case_timeout"] == 20.0


def _stop_its_compile(run: subprocess.Popen, seen: dict) -> None:
    """Watch the run's processes for its case's (a child of the forkserver); once it has
    spent 3 s of CPU (tracing or compiling its step), stop it as a wedged process looks."""
    while run.poll() is None:
        for process in _descendants(run.pid):
            try:
                parent = process.parent()
                if parent is None or "forkserver" not in " ".join(parent.cmdline()):
                    continue
                seen["server"] = parent.pid
                times = process.cpu_times()
                if times.user + times.system < 3:
                    continue
                seen["oom_score_adj"] = Path(f"/proc/{process.pid}/oom_score_adj").read_text()
                process.send_signal(signal.SIGSTOP)
            except psutil.Error:
                continue
            seen["case"], seen["stopped"] = process.pid, time.monotonic()
            return
        time.sleep(0.1)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow  # a real compile stopped, 20 s of deadline, then --resume compiles again
def test_a_case_stopped_in_its_compile_fails_at_its_case_timeout_and_resume_runs_it(tmp_path):
    out = tmp_path / "run.json"
    run = subprocess.Popen(
        [*STEP, *SMOKE, "--case-timeout", "20", "--json-out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(300, run.kill)  # a deadline that fails: a failure, not a hang
    watchdog.start()
    seen: dict = {}
    stopper = threading.Thread(target=_stop_its_compile, args=(run, seen), daemon=True)
    stopper.start()
    lines: list[tuple[float, str]] = []  # the run's stderr, each line with when it came
    for line in run.stderr:
        lines.append((time.monotonic(), line.rstrip()))
    run.wait()
    watchdog.cancel()
    stderr = "\n".join(line for _, line in lines)
    assert "case" in seen, f"the case's process was never seen compiling:\n{stderr}"
    assert run.returncode == 1, stderr
    (row,) = read_run(out).rows
    assert row.status == "failed"
    log = out.parent / "run.logs" / "simple_dit-1.log"  # kept beside the record, named
    assert row.error == (
        "the case's process timed out after 20 s in compile, waiting for its compiled step"
        f" (its log: {log})"
    )
    assert log.is_file()
    moved_on = next(at for at, line in lines if "timed out after 20 s" in line)
    after_stop = moved_on - seen["stopped"]
    print(f"\nthe sweep moved on {after_stop:.1f} s after the case's process was stopped")
    assert 0 < after_stop < 20 + 10  # at its deadline (from its start), not after
    assert read_run(out).settings.options["case_timeout"] == 20.0
    assert seen["oom_score_adj"].strip() == str(protocol.OOM_SCORE_ADJ)
    assert gone(seen["case"], within_s=10) and gone(seen["server"], within_s=10), (
        "a process of the run outlived it"
    )

    # --resume runs the failed row again, this time to the end.
    again = subprocess.run(
        [*STEP, *SMOKE, "--case-timeout", "600", "--json-out", str(out), "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    (row,) = read_run(out).rows
    assert row.status == "ok" and row.error is None and row.ms_per_step > 0


def test_a_case_timeout_of_the_loader_is_kept_to_by_the_repeat(tmp_path):
    """tools/benchmark_data.py --case-timeout: even one repeat runs in its own process,
    which is killed at the deadline; one line, exit 1."""
    # 1.6 million samples of 512 px: far more than 2.5 s take.
    argv = "data:synthetic-images --data.num-records 64 --data.image-size 512 --batch 16"
    argv += " --steps 100000 --warmup 1 --data.loading.workers 0 --data.loading.threads 0"
    argv += " --idle-check off --case-timeout 2.5"
    run = subprocess.run(
        [sys.executable, str(REPO / "tools" / "benchmark_data.py"), *argv.split()],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines() == [
        "tools/benchmark_data.py: error: repeat 1 of 1: the loader's process timed out after "
        "2.5 s in "
        "the repeat, waiting for its row"
    ]
