"""The suite's workers (tests/conftest.py under pytest-xdist, as `nox -s tests` runs it): a
test marked `alone` runs while no other test does, and the files under tests/container/ go to
one worker, as they share the engine's images. Checked on a small suite of sleeping tests
run by a real pytest with two workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

RECORD = """
import json, os, time

def record(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    line = {"name": name, "start": start, "end": time.monotonic(),
            "worker": os.environ["PYTEST_XDIST_WORKER"]}
    with open(os.environ["SPANS"], "a") as spans:
        spans.write(json.dumps(line) + "\\n")
"""

OTHERS = """
import pytest
from record import record

@pytest.mark.parametrize("i", range(6))
def test_other(i):
    record(f"other{i}", 0.3)
"""

ALONE = """
import pytest
from record import record

def test_before():
    record("before", 0.3)

@pytest.mark.alone
def test_alone():
    record("alone", 1.0)
"""

CONTAINER = """
from record import record

def test_{name}():
    record("{name}", 0.2)
"""


def _run(root: Path, spans: Path) -> list[dict]:
    """pytest with two workers over `root`'s tests, this suite's conftest as a plugin; the
    spans its tests recorded."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "record.py").write_text(RECORD)
    env = {**os.environ, "SPANS": str(spans)}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(root), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadfile", "--basetemp", str(root / "base"), "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in spans.read_text().splitlines()]


def test_an_alone_test_runs_while_no_other_test_does(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_others.py").write_text(OTHERS)
    (tmp_path / "tests" / "test_alone.py").write_text(ALONE)
    lines = _run(tmp_path, tmp_path / "spans.jsonl")
    assert len(lines) == 8, lines
    assert {line["worker"] for line in lines} == {"gw0", "gw1"}  # two workers did run at once
    alone = next(line for line in lines if line["name"] == "alone")
    overlapping = [
        line["name"]
        for line in lines
        if line is not alone and line["start"] < alone["end"] and alone["start"] < line["end"]
    ]
    assert overlapping == [], overlapping


def test_the_container_files_go_to_one_worker(tmp_path):
    # four files would be two a worker; as one unit, they leave the second worker nothing
    (tmp_path / "tests" / "container").mkdir(parents=True)
    for name in ("engine_a", "engine_b", "engine_c", "engine_d"):
        test = tmp_path / "tests" / "container" / f"test_{name}.py"
        test.write_text(CONTAINER.format(name=name))
    lines = _run(tmp_path, tmp_path / "spans.jsonl")
    assert len(lines) == 4 and len({line["worker"] for line in lines}) == 1, lines
