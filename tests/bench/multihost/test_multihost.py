"""Rows across processes, and a process that dies mid-run on loopback (2 x 4 CPU devices)."""

import json
import os
import signal
import sys
import time

import pytest

from dew.bench.multihost.combine import combine
from dew.bench.multihost.launch import STEP_TOOL, Launch
from dew.bench.record.schema import StepRow, read_run
from dew.train.distributed import EXIT_PEER_LOST


def _row(ms, p50, **extra):
    fields = dict(architecture="simple_dit", batch=8, params=10, gflop_per_step=1.5)
    fields.update(ms_per_step=ms, p10_ms=p50 - 1, p50_ms=p50, p90_ms=p50 + 1, status="ok")
    return StepRow(**{**fields, "samples_per_s": 8000 / ms, **extra})


def test_row_takes_the_slowest_process_and_the_spread():
    rows = [_row(10.0, 9.5, compile_s=3.0), _row(12.5, 12.0, compile_s=2.0), _row(11.0, 10.0)]
    row = combine(rows)
    assert row.status == "ok"
    assert (row.ms_per_step, row.p50_ms, row.compile_s) == (12.5, 12.0, 2.0)
    assert row.samples_per_s == pytest.approx(8000 / 12.5)
    assert row.process_spread_ms == pytest.approx(2.5)
    assert (row.params, row.gflop_per_step) == (10, 1.5)


def test_both_utils_are_the_slowest_processs():
    rows = [_row(10.0, 9.5, util=0.5, work_util=0.4), _row(12.5, 12.0, util=0.4, work_util=0.32)]
    assert (combine(rows).util, combine(rows).work_util) == (0.4, 0.32)


def test_a_process_reason_is_its_last_line_that_says_something(tmp_path):
    # gloo's threads tear its connection lines apart: a killed process's log (a CI run's,
    # process 1) may end in a piece with no word in it, which is no reason.
    torn = (
        "[Gloo] Rank 5 is connected to 7 peer ranks. Expected number of connected peer ranks "
        "is : [Gloo] Rank [Gloo] Rank 6 is connected to 7 peer ranks. Expected number of "
        "connected peer ranks is : 7\n7 is connected to 7 peer ranks. Expected number of "
        "connected peer ranks is : 7\n7\n"
    )
    (tmp_path / "process-1.log").write_text(torn)
    (tmp_path / "process-0.log").write_text("RuntimeError: boom\n" + torn)
    launch = Launch(["true"], 2, 4, tmp_path)
    assert launch._reason(1) is None
    assert launch._reason(0) == "RuntimeError: boom"


def test_a_failure_on_any_process_fails_the_row_naming_it():
    failed = StepRow(architecture="simple_dit", status="failed", error="XlaRuntimeError: boom")
    row = combine([_row(10.0, 9.5), failed])
    assert row.status == "failed"
    assert row.error == "process 1: XlaRuntimeError: boom"
    assert row.process_spread_ms is None


def test_compile_only_rows_pass_through():
    rows = [StepRow(architecture="unet", gflop_per_step=2.0, status="ok")] * 2
    assert combine(rows) == rows[0]


def test_a_process_killed_mid_log_has_no_reason_from_gloos_torn_lines(tmp_path):
    """Gloo's threads print their connection lines at once; a torn tail of one is noise, not
    why the process stopped (a SIGKILL leaves no line of its own)."""
    launch = Launch(["true"], 2, 4, tmp_path)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "process-1.log").write_text(
        "[Gloo] Rank 0 is connected to 7[Gloo] Rank 1 is connected to 7 peer ranks. "
        "Expected number of connected peer ranks is : 7\n"
        " peer ranks. Expected number of connected peer ranks is : 7\n"
        "[Gloo] Rank 6 is connected to [Gloo] Rank 75 peer ranks.  is connected to Expected "
        "number of connected peer ranks is : 77 peer ranks. \n"
        "Expected number of connected peer ranks is : 7\n"
    )
    (tmp_path / "process-0.log").write_text("step 1\nValueError: the batch is empty\n")
    assert launch._reason(1) is None
    assert launch._reason(0) == "ValueError: the batch is empty"


@pytest.mark.slow
def test_a_killed_process_stops_the_others_and_leaves_a_partial_record(tmp_path):
    """Process 1 is killed once the first of two cases is on disk (the second is compiling,
    which takes far longer than the first's 4 steps). Process 0 must stop on
    its own (dew.train.distributed.PeerWatch), not hang until the launcher kills it, the launcher
    says so in one line, and the record says it is partial."""
    record = tmp_path / "step.json"
    cases = [
        {"architecture": "simple_dit", "batch": 8},
        {"architecture": "simple_dit", "batch": 16},
    ]
    command = [*STEP_TOOL, "--preset", "cpu-smoke", "--cases", json.dumps(cases)]
    command += ["--steps", "2", "--warmup", "0", "--idle-check", "off"]
    command += ["--compilation-cache-dir", "off", "--json-out", str(record)]
    # The runtime aborts a process whose peer missed heartbeats for heartbeat_s; PeerWatch
    # must act first, at half of it. 20 s leaves PeerWatch 10 s of margin on a loaded host
    # (at 10 s, 5 s of margin once lost to the runtime's abort in CI: process 0 exited -6).
    launch = Launch(command, 2, 4, tmp_path / "logs", heartbeat_s=20, forward=False).start()
    try:
        deadline = time.monotonic() + 600
        while not record.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in launch.popen), "a process stopped early"
            time.sleep(0.5)
        assert record.exists(), "the first case never finished"
        os.kill(launch.popen[1].pid, signal.SIGKILL)
        # Grace far beyond the heartbeat: a process 0 that hangs is killed (SIGKILL) then.
        codes, failure = launch.wait(timeout_s=600, grace_s=180)
    finally:
        for process in launch.popen:
            if process.poll() is None:
                process.kill()

    assert codes[1] == -signal.SIGKILL
    log = (tmp_path / "logs" / "process-0.log").read_text(errors="replace")
    stopped = f"process 0 did not stop on its own: {failure}\n{log[-3000:]}"
    assert codes[0] == EXIT_PEER_LOST, stopped
    assert failure is not None and "\n" not in failure
    assert failure.startswith("multihost: process 1 died of SIGKILL; process 0 exited 3 ")
    assert "dew: process 0 of 2 stops: process 1 stopped answering" in failure, failure
    print(failure)

    run = read_run(record)
    assert run.partial.startswith("1 of 2 cases finished")
    assert [row.status for row in run.rows] == ["ok"]
    assert run.rows[0].process_spread_ms is not None
    assert [p.process_index for p in run.environment.processes] == [0, 1]


def test_the_launcher_refuses_a_process_count_that_does_not_split_the_devices(capsys):
    from dew.bench.multihost.launch import main

    assert main(["--processes", "3", "--json-out", os.devnull]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--processes 3" in err and "valid: 1, 2, 4, 8" in err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
