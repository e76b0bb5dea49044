"""scripts/bad_inputs.py as a user runs it: its own bad input is one line and exit 2 before
any scratch directory is made; an input of the table (scripts/bad_input_cases.py) runs for
real against the scratch directory and is tabled; the whole table, in the slow tier, ends
as docs/research/bad-inputs.md says (exit 0: every input refused in one line, no file
changed)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bad_inputs.py"
PROG = "scripts/bad_inputs.py"


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], cwd=cwd, env=env, capture_output=True, text=True
    )


def scratch_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("dew-bad-inputs-*")}


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--frob"], f"{PROG}: error: unrecognized argument --frob"),
        (["--only", "no such input"], f"{PROG}: error: --only 'no such input' is in no input's"),
        (["--markdown", "yes"], f"{PROG}: error: unrecognized argument yes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, said, tmp_path):
    before = scratch_dirs()
    done = run(*argv, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(said) and "Traceback" not in done.stderr
    assert scratch_dirs() == before and not any(tmp_path.iterdir())


def test_an_input_runs_for_real_and_is_tabled(tmp_path):
    done = run("--markdown", "--only", "compare X X", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| compare X X ")]
    assert len(rows) == 1
    assert rows[0].startswith("| compare X X | `dew compare $D/step.json $D/step.json` | 2 | ")
    assert "are one file: a record against itself shows nothing" in rows[0]
    assert done.stdout.rstrip().endswith("1 inputs, 0 not ended as expected; files changed: []")


@pytest.mark.slow  # about 160 processes, most of them importing JAX
def test_every_input_ends_as_the_docs_table_says(tmp_path):
    done = run("--markdown", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 not ended as expected; files changed: []" in done.stdout
