"""Issue 63's probe (scripts/input_probe.py) as a test table: every input ends as it should
(the exit, one line, no traceback, what it must say), or is known and says why not. The
records read by validate run in the fast tier; the rest (a process of JAX each, signals)
in the slow one."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import input_probe  # noqa: E402
from bad_inputs import scratch  # noqa: E402
from input_probe_cases import inputs  # noqa: E402
from input_probe_files import REPO, setup  # noqa: E402

INPUTS = inputs()


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
    outcome = input_probe.run_one(item, d, REPO, env)
    assert outcome.ok or item.known, (outcome.code, outcome.last)
