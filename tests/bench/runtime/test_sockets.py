"""The run's AF_UNIX sockets (the forkserver's) in a short private folder, whatever TMPDIR is
(dew.bench.runtime.sockets); one line when no such folder can be made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from multiprocessing import process

import pytest

from dew.bench.runtime import sockets


def long_tmpdir(root: str, length: int = 100) -> str:
    """A writable folder under `root` (short) whose path is exactly `length` characters (a
    SLURM job's scratch)."""
    folder = os.path.join(root, "s" * (length - len(root) - 1))
    assert len(folder) == length
    os.makedirs(folder, exist_ok=True)
    return folder


@pytest.fixture
def short_base():
    """A short folder whatever this test run's TMPDIR is (the module's own answer to it)."""
    folder = sockets.make_folder()
    yield folder
    shutil.rmtree(folder)


# The forkserver started as a run starts it, and one child forked from it: its exit code.
FORK = """
import os
from dew.bench.sweep.case_process import forkserver_context
child = forkserver_context(dict(os.environ)).Process(target=os.getpid)
child.start()
child.join()
print("forked", child.exitcode)
"""


def test_the_forkserver_starts_with_a_100_character_tmpdir(short_base):
    tmpdir = long_tmpdir(short_base)
    env = {**os.environ, "TMPDIR": tmpdir}
    done = subprocess.run(
        [sys.executable, "-c", FORK], env=env, capture_output=True, text=True, timeout=120
    )
    assert "AF_UNIX path too long" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "forked 0"
    assert os.listdir(tmpdir) == []  # its folder was elsewhere, and the process left nothing


def test_a_short_tmpdir_keeps_the_folder_under_it(short_base):
    folder = sockets.make_folder((short_base,))
    assert os.path.dirname(folder) == short_base
    assert os.stat(folder).st_mode & 0o777 == 0o700  # the run's alone
    assert sockets.fits(folder)


def test_a_long_tmpdir_moves_the_folder_to_a_short_base(short_base):
    folder = sockets.make_folder((long_tmpdir(short_base), short_base))
    assert os.path.dirname(folder) == short_base


def test_no_folder_is_one_line_naming_each_base_tried(short_base):
    long = long_tmpdir(short_base)
    missing = os.path.join(short_base, "missing")
    with pytest.raises(sockets.NoSocketFolder) as raised:
        sockets.make_folder((long, missing))
    message = str(raised.value)
    assert "\n" not in message
    assert f"{long} (100 bytes: too long)" in message
    assert f"{missing} (No such file or directory)" in message
    assert "set TMPDIR" in message


def test_the_benchmark_refuses_in_one_line_before_any_case(short_base, monkeypatch, capsys):
    from dew.bench.sweep import step_command

    monkeypatch.setattr(tempfile, "tempdir", long_tmpdir(short_base))
    monkeypatch.setattr(sockets, "SHORT_BASES", (os.path.join(short_base, "missing"),))
    monkeypatch.delitem(process.current_process()._config, "tempdir", raising=False)
    code = step_command.main(["--preset", "cpu-smoke", "--architectures", "simple_dit"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(
        "tools/benchmark_step.py: error: no folder for the case processes' socket"
    )
    assert err.count("\n") == 1 and "Traceback" not in err
