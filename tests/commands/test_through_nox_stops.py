"""dew ab / dew reproduce stopped by a signal (issue 63: Ctrl-C was a KeyboardInterrupt
traceback): one line, exit 128 + the signal, whether it came while the arguments were
checked or while nox ran. A stand-in for nox (a Python that waits) keeps this off any build;
the signal handling under test is through_nox's own."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DRIVER = """
import pathlib, sys, time
from dew.commands import through_nox
started = pathlib.Path(sys.argv[1])
def wait(*_):
    started.write_text("")
    time.sleep(60)
stage = sys.argv[2]
check = wait if stage == "check" else (lambda argv, python: None)
through_nox.nox_argv = lambda: [sys.executable, "-c",
    "import pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(''); time.sleep(60)",
    str(started)]
sys.exit(through_nox.run_session("ab", "", ["--out", "x"], check))
"""


@pytest.mark.parametrize(
    ("stage", "signum", "said"),
    [
        ("check", signal.SIGINT, "interrupted while its arguments were checked; nothing was"),
        ("nox", signal.SIGTERM, "interrupted (SIGTERM): nox stopped"),
    ],
)
def test_a_stop_is_one_line_and_its_exit_code(tmp_path, stage, signum, said):
    started = tmp_path / "started"
    argv = [sys.executable, "-c", DRIVER, str(started), stage]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(400):
            if started.exists():
                break
            time.sleep(0.05)
        assert started.exists(), process.communicate(timeout=5)
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 128 + signum, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"dew ab: error: {said}"), err


def test_started_outside_the_checkout_it_says_where_the_run_goes(tmp_path):
    # Issue 63: `dew ab` from another folder wrote its record into the checkout, unsaid
    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys\nfrom dew.commands import through_nox\n"
        "through_nox.nox_argv = lambda: [sys.executable, '-c', 'pass']\n"
        "sys.exit(through_nox.run_session('ab', '', [], lambda argv, python: None))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"dew ab: started outside the checkout, the run's folder goes under "
        f"{root / 'results' / 'runs'} and its environments under {root / '.nox'} (nox runs "
        "from the checkout; an image writes only under its results/)\n"
    )
