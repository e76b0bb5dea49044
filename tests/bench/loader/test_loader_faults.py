"""Faults around tools/benchmark_data.py, each one line: a record that cannot be written (a
real full disk: exit 1, the row on stdout, nothing left behind), a record another run holds
(exit 2), SIGTERM while repeats are measured (exit 143, every child ended, nothing
written)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from infra import full_disk

from dew.bench.common.files import one_writer
from dew.bench.loader.data_command import main

REPO = Path(__file__).resolve().parents[3]
FAST = ["--data.loading.workers", "0", "--data.loading.threads", "0", "--idle-check", "off"]
TINY = ["data:synthetic-images", "--data.num-records", "8", "--batch", "2", "--steps", "4",
        "--warmup", "1", *FAST]  # fmt: skip


def test_a_full_disk_is_one_line_exit_1_and_the_row_stays_on_stdout(tmp_path, capsys):
    with full_disk.tmpfs(tmp_path / "disk") as disk:
        out = disk / "data.json"
        full_disk.fill(disk, leave=full_disk.PAGE)  # the lock file, not the record
        assert main([*TINY, "--json-out", str(out)]) == 1
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [
            f"tools/benchmark_data.py: error: cannot write {out}: [Errno 28] No space left on "
            "device; "
            f"{out} is as it was; the row's figures are on stdout"
        ]
        line = captured.out.splitlines()[0]  # then its warnings, if any
        assert line.startswith("synthetic-images batch 2 at ") and " samples/s, p50 " in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_record_another_run_holds_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "data.json"
    with one_writer(out, flag="--json-out"):  # this process holds it, as another run would
        assert main([*TINY, "--json-out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"tools/benchmark_data.py: error: --json-out {out} is being written by another run "
        f"(pid {os.getpid()}, lock {tmp_path / '.data.json.lock'}); wait for it to end or "
        "write elsewhere\n"
    )
    assert captured.out == "" and list(tmp_path.iterdir()) == []


def test_sigterm_between_repeats_ends_every_child_in_one_line(tmp_path):
    out = tmp_path / "data.json"
    argv = [sys.executable, str(REPO / "tools" / "benchmark_data.py"), *TINY,
            "--repeats", "3", "--json-out", str(out)]  # fmt: skip
    run = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    children: set[int] = set()
    try:
        for line in run.stderr:  # the first repeat measured: the second's child starts
            if line.startswith("repeat 1/3:"):
                break
        deadline = time.monotonic() + 60
        while not children and time.monotonic() < deadline:
            children = {child.pid for child in psutil.Process(run.pid).children(recursive=True)}
            time.sleep(0.05)
        assert children, "no repeat's process to end"
        run.send_signal(signal.SIGTERM)
        rest = run.stderr.read()
        run.wait(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 143
    assert rest.splitlines() == [
        "tools/benchmark_data.py: error: interrupted before the row was measured; nothing written"
    ]
    assert not [pid for pid in children if psutil.pid_exists(pid)]
    assert list(tmp_path.iterdir()) == []  # no record, no lock
