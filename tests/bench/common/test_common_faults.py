"""The faults every tool shares (dew.bench.common): a write that fails leaves the file as it
was and no temporary behind; one writer per output, by an OS lock the OS releases however
its holder ends; a stop signal is one line and exit 128 + its number."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from infra import full_disk

from dew.bench.common.cli import UsageError
from dew.bench.common.errors import Interrupted, WriteFailed, faults
from dew.bench.common.files import atomic_write, one_writer

# A process that holds `path` (one_writer) and says so, then waits to be ended.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from dew.bench.common.files import one_writer
    with one_writer(sys.argv[1], flag="--json-out"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _hold(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


# --- atomic_write on a full disk ------------------------------------------------------------


def test_a_write_to_a_full_disk_leaves_the_file_as_it_was_and_no_temporary(tmp_path):
    with full_disk.tmpfs(tmp_path / "disk") as disk:
        record = disk / "run.json"
        atomic_write(record, "the first version\n")
        full_disk.fill(disk, leave=0)
        with pytest.raises(OSError) as raised:
            atomic_write(record, "x" * 10_000)
        assert raised.value.errno == errno.ENOSPC
        assert record.read_text() == "the first version\n"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "run.json"]


# --- one writer per output ------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder_and_the_lock_goes_with_the_first(
    tmp_path,
):
    record = tmp_path / "run.json"
    holder = _hold(record)
    try:
        with pytest.raises(UsageError) as refused:
            with one_writer(record, flag="--json-out"):
                pytest.fail("two writers held one record")
        lock = tmp_path / ".run.json.lock"
        assert str(refused.value) == (
            f"--json-out {record} is being written by another run (pid {holder.pid}, "
            f"lock {lock}); wait for it to end or write elsewhere"
        )
    finally:
        holder.terminate()
        holder.wait()
    # It ended without its `finally` (SIGTERM's default): its lock file stays, unlocked by
    # the OS, and blocks nobody.
    with one_writer(record, flag="--json-out"):
        assert lock.read_text() == f"{os.getpid()}\n"
    assert list(tmp_path.iterdir()) == []  # released: the lock file removed


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path):
    record = tmp_path / "run.json"
    holder = _hold(record)
    holder.kill()  # kill -9: nothing of it runs, the OS drops its lock
    holder.wait()
    assert (tmp_path / ".run.json.lock").exists()
    with one_writer(record, flag="--json-out"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_one_process_cannot_hold_one_output_twice(tmp_path):
    with one_writer(tmp_path / "site", flag="--out"):
        with pytest.raises(UsageError, match=f"pid {os.getpid()}"):
            with one_writer(tmp_path / "site", flag="--out"):
                pass


def test_a_refused_writer_leaves_no_folder_it_made(tmp_path):
    record = tmp_path / "new" / "deeper" / "run.json"
    with one_writer(record, flag="--json-out"):
        assert (tmp_path / "new" / "deeper").is_dir()
    assert list(tmp_path.iterdir()) == []  # nothing written there: the folders go too
    with one_writer(record, flag="--json-out"):
        atomic_write(record, "{}")
    assert record.read_text() == "{}"  # a folder with an output stays


def test_no_path_holds_nothing():
    with one_writer(None, flag="--json-out"):
        pass


# --- faults: one line, one exit code ----------------------------------------------------------


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_is_one_line_and_128_plus_its_number(capsys, signum, code):
    cleaned = []

    def body() -> int:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises here
            return 0
        except Interrupted as stop:
            cleaned.append(stop.signum)
            stop.message = "interrupted: 1 of 2 cases finished"
            raise

    before = signal.getsignal(signum)
    assert faults("tool", body) == code
    assert cleaned == [signum]
    assert capsys.readouterr().err == "tool: error: interrupted: 1 of 2 cases finished\n"
    assert signal.getsignal(signum) is before  # the handlers before are back


def test_a_second_signal_does_not_cut_the_way_out_short(capsys):
    def body() -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Interrupted:
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: the cleanup goes on
            time.sleep(0.1)
            raise
        return 0

    assert faults("tool", body) == 143
    assert capsys.readouterr().err == "tool: error: interrupted\n"


def test_a_failed_write_is_one_line_and_exit_1(capsys):
    def body() -> int:
        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/.run.json.abc.tmp")
        raise WriteFailed("results/run.json", error, "the record keeps the rows before")

    assert faults("tool", body) == 1
    assert capsys.readouterr().err == (
        "tool: error: cannot write results/run.json: [Errno 28] No space left on device; "
        "the record keeps the rows before\n"
    )


def test_dews_own_line_is_never_cut_and_a_foreign_one_is():
    from dew.bench.common.errors import MAX_LINE, UsageError, one_line

    path = "/scratch/" + "s" * 400 + "/run.json"  # a long TMPDIR's
    own = one_line(UsageError(f"--json-out {path} is being written by another run; wait"))
    assert own.endswith("; wait") and len(own) > MAX_LINE
    foreign = one_line(RuntimeError("x" * 1000))
    assert len(foreign) == MAX_LINE and foreign.endswith("...")
