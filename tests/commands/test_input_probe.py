"""Issue 63's probe as a test table: every input (input_probe_cases.py), run as a user types
it, ends as it should (the exit, one line, no traceback, what it must say), or is known and
says why not. The records read by validate run in the fast tier; the rest (a process of JAX
each, signals) in the slow one."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from input_probe_cases import Input, inputs
from input_probe_files import REPO, fill, setup

sys.path.insert(0, str(REPO / "scripts"))

from bad_inputs import scratch  # noqa: E402

INPUTS = inputs()
LIMIT_S = 120  # an input that has not ended by then is killed and counted bad


@dataclasses.dataclass(frozen=True)
class Outcome:
    code: int
    last: str
    ok: bool


def run_one(item: Input, d: Path, root: Path, env: dict) -> Outcome:
    argv = [fill(word, sys.executable, root, d) for word in item.argv]
    cwd = Path(fill(item.cwd, sys.executable, root, d)) if item.cwd else d
    env = {**env, **item.env}
    if item.stop is None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                  timeout=LIMIT_S)  # fmt: skip
        except subprocess.TimeoutExpired:  # killed: no end, no line of its own
            return Outcome(-9, f"no end after {LIMIT_S} s: killed", False)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:  # a stop signal once the command has said `after` on stderr
        signum, after = item.stop
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env, cwd=cwd)  # fmt: skip
        try:
            err, deadline = "", time.monotonic() + 120
            while after not in err and time.monotonic() < deadline and process.poll() is None:
                err += process.stderr.readline()
            process.send_signal(signum)
            out, rest = process.communicate(timeout=60)
            err += rest
        finally:
            process.kill()
        code = process.returncode
    lines = [line for line in err.splitlines() if line.strip()]
    lines = [line for line in lines if "simulated CPU devices" not in line]
    errors = [line for line in lines if ": error: " in line or "Error" in line]
    ok = code in item.exits and "Traceback" not in err
    if item.lines is not None:
        ok = ok and len(errors if item.exits != (0,) else lines) <= item.lines
    if item.said:
        ok = ok and item.said in (out + err).replace(str(d), "$D")
    if item.unsaid:
        ok = ok and item.unsaid not in out + err
    last = (errors or lines or [f"(stdout) {(out.strip().splitlines() or [''])[-1]}"])[-1]
    return Outcome(code, last.replace(str(d), "$D").replace(str(root) + "/", "")[:220], ok)


def test_the_probe_holds_at_least_100_inputs_each_named_once():
    names = [item.what for item in INPUTS]
    assert len(names) >= 100 and len(set(names)) == len(names)


@pytest.fixture(scope="module")
def place():
    d = scratch()
    setup(d)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("DEW_TYPED_COMMAND", None)
    yield d, env
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(
    "item",
    [
        item if item.what.startswith("validate") else pytest.param(item, marks=pytest.mark.slow)
        for item in INPUTS
    ],
    ids=[item.what for item in INPUTS],
)
def test_each_input_ends_as_it_should(place, item):
    d, env = place
    outcome = run_one(item, d, REPO, env)
    assert outcome.ok or item.known, (outcome.code, outcome.last)
