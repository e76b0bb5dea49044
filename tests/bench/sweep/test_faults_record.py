"""Faults around a sweep (tools/benchmark_step.py), each ending in one line with nothing
measured lost: a write of the record that fails (a real full disk, a tmpfs), a second run on
a record another run holds, SIGTERM and SIGINT. The hung case and the case out of memory
are test_faults_deadline.py's and test_faults_memory.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from infra import full_disk
from infra.processes import gone

from dew.bench.record.schema import StepRow, read_run
from dew.bench.sweep import executors
from dew.bench.sweep.step_command import main

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}
TOOL = [sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--preset", "cpu-smoke"]
QUICK = ["--steps", "1", "--warmup", "0", "--idle-check", "off"]
# Three uvit cases (the cheapest cpu-smoke compile), told apart by their batch.
THREE = json.dumps([{"architecture": "uvit", "batch": batch} for batch in (8, 16, 24)])


def _error_lines(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith("tools/benchmark_step.py: error:")
    ]


def _rows(path: Path) -> list[StepRow]:
    try:
        return read_run(path).rows
    except (OSError, ValueError):  # not there yet
        return []


# --- a write that fails ----------------------------------------------------------------------


def test_a_full_disk_stops_the_sweep_in_one_line_and_prints_the_rows_figures(
    tmp_path, monkeypatch, capsys
):
    measured = []

    def measure(case, options):  # no model: the write is tested
        measured.append(case.batch)
        fields = dict(batch=case.batch, sample="16x16x3", params=65_456, loss=1.0)
        fields.update(ms_per_step=10.0 + case.batch, gflop_per_step=0.5)
        return StepRow(**case.row_fields(), status="ok", **fields)

    monkeypatch.setattr(executors, "run_case", measure)
    with full_disk.tmpfs(tmp_path / "disk") as disk:
        out = disk / "run.json"
        # Room for the lock file (a page) and the first row's record (two), not the second's
        # beside it (the old file stays until the new one replaces it).
        full_disk.fill(disk, leave=4 * full_disk.PAGE)
        argv = ["--preset", "cpu-smoke", "--cases", THREE, "--no-isolate", *QUICK]
        code = main([*argv, "--json-out", str(out)])
        captured = capsys.readouterr()
        assert code == 1
        assert _error_lines(captured.err) == [
            f"tools/benchmark_step.py: error: cannot write {out}: [Errno 28] No space left on "
            "device; "
            "the record keeps the rows before uvit batch 16; its figures are on stdout; "
            "no further case started"
        ]
        assert "Traceback" not in captured.err
        header, line = captured.out.strip().splitlines()
        assert header.startswith("architecture\tsample\tbatch")
        assert line.split("\t")[:3] == ["uvit", "16x16x3", "16"] and "26.00" in line
        assert measured == [8, 16]  # the third case never started
        (kept,) = read_run(out).rows  # the record as before the failed write, valid
        assert (kept.batch, kept.ms_per_step) == (8, 18.0)
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "run.json"]


@pytest.mark.slow
def test_a_full_disk_under_a_real_sweep_keeps_the_first_row(tmp_path):
    with full_disk.tmpfs(tmp_path / "disk") as disk:
        out = disk / "run.json"
        full_disk.fill(disk, leave=4 * full_disk.PAGE)
        argv = [*TOOL, "--cases", THREE, "--no-isolate", *QUICK, "--json-out", str(out)]
        done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stderr[-2000:]
        (line,) = _error_lines(done.stderr)
        assert line.startswith(f"tools/benchmark_step.py: error: cannot write {out}: [Errno 28] ")
        assert "Traceback" not in done.stderr
        assert "batch=24" not in done.stderr  # the third case never started
        (figures,) = done.stdout.strip().splitlines()[1:]
        assert figures.split("\t")[:3] == ["uvit", "16x16x3", "16"]
        (kept,) = read_run(out).rows
        assert kept.status == "ok" and kept.batch == 8
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "run.json"]


# --- one writer per record -------------------------------------------------------------------


def test_a_record_another_run_holds_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "run.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["--preset", "cpu-smoke", "--architectures", "uvit", *QUICK,
                     "--json-out", str(out)])  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert capsys.readouterr().err == (
        f"tools/benchmark_step.py: error: --json-out {out} is being written by another run "
        f"(pid {holder.pid}, lock {tmp_path / '.run.json.lock'}); wait for it to end or "
        "write elsewhere\n"
    )


_HOLDER = """
import sys, time
from dew.bench.common.files import one_writer
with one_writer(sys.argv[1], flag="--json-out"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_two_real_runs_on_one_record_the_second_is_refused_and_the_first_keeps_its_row(
    tmp_path,
):
    out = tmp_path / "run.json"
    lock = tmp_path / ".run.json.lock"
    first = subprocess.Popen(
        [*TOOL, "--architectures", "simple_dit", *QUICK, "--json-out", str(out)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lock.exists(), "the first run never took its record"
        # --resume and --overwrite pass the checks of an existing file: the lock refuses.
        for mode in ("--resume", "--overwrite"):
            argv = [*TOOL, "--architectures", "uvit", *QUICK, "--json-out", str(out), mode]
            second = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300)
            assert second.returncode == 2, second.stderr[-2000:]
            lines = [line for line in second.stderr.splitlines() if line.strip()]
            assert lines == [
                f"tools/benchmark_step.py: error: --json-out {out} is being written by another run "
                f"(pid {first.pid}, lock {lock}); wait for it to end or write elsewhere"
            ]
        _, err = first.communicate(timeout=600)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, err[-2000:]
    (row,) = read_run(out).rows
    assert (row.architecture, row.status) == ("simple_dit", "ok")
    assert not lock.exists()


# --- SIGTERM and SIGINT ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_ends_every_process_and_the_record_keeps_the_finished_row(
    tmp_path, signum, code
):
    out = tmp_path / "run.json"
    argv = [*TOOL, "--cases", THREE, "--compile-jobs", "1", *QUICK, "--json-out", str(out)]
    run = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)  # fmt: skip
    tree: set[int] = set()  # the forkserver, its case processes, the resource tracker
    try:
        deadline = time.monotonic() + 300
        while not _rows(out) and run.poll() is None and time.monotonic() < deadline:
            tree |= {child.pid for child in psutil.Process(run.pid).children(recursive=True)}
            time.sleep(0.1)
        assert len(_rows(out)) == 1, "no row finished"
        time.sleep(1)  # the second case's process is compiling now
        tree |= {child.pid for child in psutil.Process(run.pid).children(recursive=True)}
        assert len(tree) >= 3
        run.send_signal(signum)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == code, err[-2000:]
    assert _error_lines(err) == [
        "tools/benchmark_step.py: error: interrupted: 1 of 3 cases finished; the record keeps "
        "them; "
        "--resume continues"
    ]
    assert "Traceback" not in err
    record = read_run(out)
    (row,) = record.rows  # valid, with the finished row
    assert (row.batch, row.status) == (8, "ok")
    # Issue 63: the record says it was cut short (at ec83e06 nothing did: validate read "ok")
    assert record.partial == f"stopped by {signal.Signals(signum).name}: 1 of 3 cases finished"
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in tree if not gone(pid)] == []
    # No lock, no temporary; the cases' logs beside the record, the one stopped too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.logs"]
    assert len(list((tmp_path / "run.logs").glob("*.log"))) >= 2
